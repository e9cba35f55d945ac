"""megatron-core's hybrid layer pattern: its symbols, the layer defaults they build, its parsing.

A hybrid model (``hybrid_layer_pattern``) spells its decoder one symbol a layer, ``|`` between
pipeline stages and ``/`` before each multi-token-prediction depth (megatron-core's
``hybrid_layer_allocation``). :func:`parse_hybrid_pattern` splits it as megatron-core does into
a :class:`HybridPattern`; the symbol constants and the Mamba and gated-delta-net dimensions
megatron-core defaults to are what the FLOPs and parameter counts read.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = [
    "ATTENTION",
    "GATED_DELTA_NET",
    "GDN",
    "LAYER_SYMBOLS",
    "MAMBA",
    "MAMBA_CONV_KERNEL",
    "MLA",
    "MLP",
    "MOE",
    "GatedDeltaNetDims",
    "HybridPattern",
    "parse_hybrid_pattern",
]

# Layer symbols of megatron-core's hybrid pattern (``hybrid_layer_allocation.Symbols``); ``D``
# is DSA attention.
MAMBA, GDN, ATTENTION, MLP, MOE, MLA = "M", "G", "*", "-", "E", "+"
LAYER_SYMBOLS = frozenset("MG*D+-E")
_PIPE, _MTP_SEPARATOR = "|", "/"

# megatron-core's MambaMixer d_conv default: the causal conv1d's kernel width.
MAMBA_CONV_KERNEL = 4


@dataclass(frozen=True)
class GatedDeltaNetDims:
    """A gated delta net's dimensions, under megatron-core TransformerConfig's names."""

    linear_key_head_dim: int
    """Width of one query/key head."""
    linear_value_head_dim: int
    """Width of one value head."""
    linear_num_key_heads: int
    """Query/key heads."""
    linear_num_value_heads: int
    """Value heads."""
    linear_conv_kernel_dim: int
    """Kernel width of the causal conv1d over Q, K and V."""

    @property
    def key_width(self) -> int:
        """Query (and key) width: heads x head dim."""
        return self.linear_key_head_dim * self.linear_num_key_heads

    @property
    def value_width(self) -> int:
        """Value width: heads x head dim."""
        return self.linear_value_head_dim * self.linear_num_value_heads


GATED_DELTA_NET = GatedDeltaNetDims(
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_conv_kernel_dim=4,
)
"""megatron-core TransformerConfig's linear_* defaults, which the job description does not hold
and upstream's ``hybrid_flops`` falls back to as well."""


@dataclass(frozen=True)
class HybridPattern:
    """A hybrid layer pattern split into the decoder's layers and the MTP layers."""

    main: str
    """The decoder layers' symbols, pipe separators removed."""
    mtp: str
    """One MTP depth's symbols (empty without MTP)."""
    mtp_depths: int
    """MTP depths the pattern spells."""


@functools.lru_cache(maxsize=64)
def parse_hybrid_pattern(pattern: str) -> HybridPattern:
    """Split a hybrid layer pattern as megatron-core's ``parse_hybrid_pattern`` does.

    ``<main>/<mtp>/<mtp>...``: the main pattern may hold ``|`` stage boundaries; every MTP part
    must be the same. ``ValueError`` names the field for a symbol megatron-core does not know
    or MTP parts that differ (megatron-core refuses both).
    """
    main, *mtp_parts = pattern.split(_MTP_SEPARATOR)
    main = main.replace(_PIPE, "")
    mtp_parts = mtp_parts if any(mtp_parts) else []
    if len(set(mtp_parts)) > 1:
        raise ValueError(
            f"hybrid_layer_pattern={pattern!r}: every MTP part after '/' must be the same "
            f"pattern (megatron-core's parse_hybrid_pattern); found {sorted(set(mtp_parts))}."
        )
    mtp = mtp_parts[0] if mtp_parts else ""
    unknown = sorted(set(main + mtp) - LAYER_SYMBOLS)
    if unknown:
        raise ValueError(
            f"hybrid_layer_pattern={pattern!r} holds {unknown}, which are not layer symbols; "
            f"use {''.join(sorted(LAYER_SYMBOLS))} ('|' between pipeline stages, '/' before "
            "each MTP depth)."
        )
    return HybridPattern(main=main, mtp=mtp, mtp_depths=len(mtp_parts))
