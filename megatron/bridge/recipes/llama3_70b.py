"""Llama-3 70B pre-training recipe, in the layout NVIDIA publishes for H100.

Model: 80 layers, hidden 8192, 64 heads in 8 query groups, FFN 28672, sequence 8192 (Llama-3
architecture, see :mod:`megatron.bridge.recipes.llama`). Published layout: TP4 (with sequence
parallelism) x PP4 with 5 virtual stages per rank x CP2, micro-batch 1. We run it on 64 GPUs
(DP 2) with global batch 128, the size of NVIDIA's published Llama-3 70B H100 runs.

Preset: ``userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192``. Its name has no ``_cp`` part
although the layout is CP2; NVIDIA's recipe uses it at CP2 all the same, and so does the preset
choice here (exact CP first, then the CP-less name, for every recipe and the CLI alike).

Importing this module loads no torch: :data:`SPEC` plans the recipe anywhere,
:func:`llama3_70b` builds its ``ConfigContainer``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megatron.bridge.recipes.llama import LLAMA3_VOCAB_SIZE
from megatron.bridge.recipes.spec import ModelShape, RecipeSpec

if TYPE_CHECKING:
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
    from megatron.bridge.training.config import ConfigContainer

__all__ = ["PUBLISHED", "SPEC", "llama3_70b", "perf_env_plugin", "spec"]

HIDDEN_SIZE = 8192
"""Model width; also what the userbuffers preset is looked up for."""

SPEC = RecipeSpec(
    name="llama3_70b",
    model=ModelShape(
        provider="megatron.bridge.recipes.llama:llama3_provider",
        num_layers=80,
        hidden_size=HIDDEN_SIZE,
        num_attention_heads=64,
        num_query_groups=8,
        ffn_hidden_size=28672,
        vocab_size=LLAMA3_VOCAB_SIZE,
        seq_length=8192,
    ),
    num_gpus=64,
    gpu="h100",
    tp_size=4,
    pp_size=4,
    vpp_size=5,
    cp_size=2,
    micro_batch_size=1,
    global_batch_size=128,
)
"""The recipe in plain values: 64 H100 GPUs, TP4 x PP4 (VPP5) x CP2 -> DP 2."""

PUBLISHED = SPEC
"""The published run (``num_gpus``, ``gpu``): the spec itself."""


def spec(**overrides: Any) -> RecipeSpec:
    """The recipe's spec with keyword overrides (``gpu``, ``precision``, sizes, ...); no torch."""
    return SPEC.with_overrides(**overrides)


def llama3_70b(**overrides: Any) -> ConfigContainer:
    """Llama-3 70B: a complete ``ConfigContainer`` in the published layout, sizes overridable.

    Keywords: ``gpu``, ``precision``, ``tp_size``, ``pp_size``, ``vpp_size`` (None or 1: no
    interleaving), ``cp_size``, ``seq_length``, ``micro_batch_size``, ``global_batch_size``,
    ``tp_comm_overlap``. ``gpu`` and ``precision`` pick the userbuffers preset (``None`` with a
    logged warning when none is published for the resulting shape).
    """
    return spec(**overrides).build()


def perf_env_plugin(
    cfg: ConfigContainer,
    *,
    num_gpus: int = PUBLISHED.num_gpus,
    gpu: str = PUBLISHED.gpu,
    **overrides: Any,
) -> PerfEnvPlugin:
    """NeMo-Run ``PerfEnvPlugin`` for a config of this recipe (sizes read from ``cfg``)."""
    from megatron.bridge.recipes import common

    return common.perf_env_plugin(cfg, num_gpus=num_gpus, gpu=gpu, **overrides)
