"""What every cost part reads from a :class:`ModelDescription` before it counts anything.

:class:`ModelShape` holds the model and checks on construction that its shape fields are known;
it derives the widths (query, key/value, MLP matrices), the layer counts by kind, the MTP depth
and the padded vocabulary, and owns the check that the attention variant is one the estimate
covers (DeepSeek-V4's fields included). The FLOPs (:mod:`.model_flops`), memory-bound bytes
(:mod:`.model_bytes`) and parameters (:mod:`.model_params`) build on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from megatron.bridge.training.estimate.hybrid_pattern import (
    ATTENTION,
    MAMBA,
    MLP,
    MOE,
    parse_hybrid_pattern,
)
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.megatron_core_support import DSV4_HYBRID
from megatron.bridge.training.model_rules import check_moe_layer_pattern

__all__ = ["CSA_RATIO", "DSV4_RATIOS", "HCA_RATIO", "ModelShape"]

# DeepSeek-V4's hybrid attention: the compression ratios upstream's ``transformer_flops`` knows
# (0: window only, 4: compressed sparse, 128: heavily compressed).
CSA_RATIO, HCA_RATIO = 4, 128
DSV4_RATIOS = (0, CSA_RATIO, HCA_RATIO)


@dataclass(frozen=True)
class ModelShape:
    """The model and the dimensions the cost parts derive from it."""

    model: ModelDescription
    """The model; its shape fields (layers, width, heads, vocabulary, sequence) must be known."""

    def __post_init__(self) -> None:
        missing = [
            name
            for name in (
                "num_layers",
                "hidden_size",
                "num_attention_heads",
                "vocab_size",
                "seq_length",
            )
            if getattr(self.model, name) is None
        ]
        if missing:
            raise ValueError(
                f"The step estimate needs the model's {', '.join(missing)}; set them in the job "
                "description (e.g. --vocab-size on the command line)."
            )
        check_moe_layer_pattern(self.model)

    @property
    def query_width(self) -> int:
        """Query projection width: heads x head_dim."""
        return self.model.num_attention_heads * self.model.head_dim

    @property
    def kv_width(self) -> int:
        """Key (and value) projection width: query groups x head_dim."""
        return self.model.query_groups * self.model.head_dim

    @property
    def num_moe_layers(self) -> int:
        """MoE layers of the decoder (MTP layers excluded): from moe_layer_freq, or the ``E``
        symbols of a hybrid model's pattern; 0 for a dense model."""
        if self.model.hybrid_layer_pattern is not None:
            return parse_hybrid_pattern(self.model.hybrid_layer_pattern).main.count(MOE)
        return sum(self.model.moe_layer_pattern) if self.model.moe else 0

    @property
    def num_mamba_layers(self) -> int:
        """Mamba layers of the decoder: the ``M`` symbols of a hybrid model's pattern (0 for a
        transformer)."""
        return self._layer_counts()[1]

    @property
    def mtp_layers(self) -> int:
        """Multi-token-prediction layers: mtp_num_layers, or for a hybrid model that leaves it
        unset, the MTP depths its pattern spells (upstream's ``num_floating_point_operations``)."""
        if self.model.mtp_num_layers is not None:
            return self.model.mtp_num_layers
        if self.model.hybrid_layer_pattern is not None:
            return parse_hybrid_pattern(self.model.hybrid_layer_pattern).mtp_depths
        return 0

    def padded_vocab(self, tp_size: int) -> int:
        """The vocabulary megatron-core allocates: padded to make_vocab_size_divisible_by x TP."""
        multiple = self.model.make_vocab_size_divisible_by * tp_size
        return math.ceil(self.model.vocab_size / multiple) * multiple

    @property
    def _mlp_matrices(self) -> int:
        return 3 if self.model.gated_linear_unit else 2

    def _layer_counts(self) -> tuple[int, int, int, int]:
        """(attention, Mamba, dense MLP, MoE) blocks among the decoder layers: a transformer
        layer is an attention block and a dense or MoE MLP block by moe_layer_pattern; a hybrid
        model counts its pattern's attention (``*``), Mamba (``M``), MLP (``-``) and MoE (``E``)
        symbols (its gated-delta-net, DSA and MLA layers are not priced)."""
        m = self.model
        if m.hybrid_layer_pattern is not None:
            main = parse_hybrid_pattern(m.hybrid_layer_pattern).main
            return main.count(ATTENTION), main.count(MAMBA), main.count(MLP), main.count(MOE)
        moe = self.num_moe_layers
        return m.num_layers, 0, m.num_layers - moe, moe

    @property
    def dsv4_hybrid(self) -> bool:
        """Whether the model runs DeepSeek-V4's hybrid attention (the variant on a transformer,
        not inside a hybrid layer pattern)."""
        return (
            self.model.experimental_attention_variant == DSV4_HYBRID
            and self.model.hybrid_layer_pattern is None
        )

    def _check_attention_variant(self) -> None:
        variant = self.model.experimental_attention_variant
        if variant == DSV4_HYBRID and self.model.hybrid_layer_pattern is None:
            self._check_dsv4_fields()
            return
        if variant is not None and self.model.hybrid_layer_pattern is None:
            raise ValueError(
                f"The FLOPs of experimental_attention_variant={variant!r} need settings the job "
                "description does not hold (the gated delta net's head dimensions, the DSA "
                "indexer's loss); the estimate covers MLA, DeepSeek-V4's dsv4_hybrid, GQA/MHA, "
                "sliding windows and hybrid layer patterns. Leave the variant unset to count "
                "the layers as the plain attention they replace."
            )

    def _check_dsv4_fields(self) -> None:
        """``ValueError`` naming the field when a DeepSeek-V4 attention field the FLOPs read is
        missing or out of range (upstream raises for the same ones)."""
        m = self.model
        if not m.multi_latent_attention:
            raise ValueError(
                f"experimental_attention_variant={DSV4_HYBRID!r} is a multi-latent attention "
                "variant: set multi_latent_attention=True (--multi-latent-attention)."
            )
        for name in ("q_lora_rank", "o_lora_rank", "csa_compress_ratios"):
            if getattr(m, name) is None:
                raise ValueError(
                    f"experimental_attention_variant={DSV4_HYBRID!r} needs {name}; set it in "
                    "the job description."
                )
        ratios = m.csa_compress_ratios
        expected = m.num_layers + self.mtp_layers
        if len(ratios) != expected:
            raise ValueError(
                f"csa_compress_ratios has {len(ratios)} entries; it needs one per layer, "
                f"num_layers + MTP layers = {expected}."
            )
        unknown = sorted(set(ratios) - set(DSV4_RATIOS))
        if unknown:
            raise ValueError(
                f"csa_compress_ratios holds {unknown}; each entry is one of {list(DSV4_RATIOS)}."
            )
        if CSA_RATIO in ratios:
            for name in ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk"):
                if getattr(m, name) is None:
                    raise ValueError(
                        f"csa_compress_ratios has ratio-{CSA_RATIO} layers, which run the DSA "
                        f"indexer: set {name}."
                    )
