"""How sure the step estimate is: its error on the published rows of the job's kind of model.

``benchmarks/predict_published.py`` sets the estimate beside every pre-training row NVIDIA
publishes for Megatron-Bridge (current and archived releases) and, with ``--write-accuracy``,
writes the median errors per model family, and per published model, into ``accuracy.json``
beside this module (rows a constant was fitted on left out). :func:`measured_accuracy` reads
that file for a model: the figure every estimate prints, or that no published row is of this
kind of model, and the figures of the model's own published rows where it is a published model.
The family of a model is :func:`model_family` and the model it is :func:`architecture`, one rule
each, read by the script and the estimate alike. Pure data: importing this module loads no
torch.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from megatron.bridge.training.megatron_core_support import DSV4_HYBRID_FIELDS

if TYPE_CHECKING:
    from megatron.bridge.training.job import ModelDescription

__all__ = [
    "ACCURACY_FILE",
    "ARCHITECTURE_FIELDS",
    "FAMILIES",
    "Family",
    "MeasuredAccuracy",
    "ModelAccuracy",
    "architecture",
    "measured_accuracy",
    "model_family",
]

Family = Literal["dense", "moe", "moe_mla", "hybrid", "sparse_attention"]
"""A kind of model, as far as the step estimate's accuracy goes."""

FAMILIES: Mapping[Family, str] = MappingProxyType(
    {
        "dense": "dense transformers",
        "moe": "MoE transformers",
        "moe_mla": "MoE transformers with multi-latent attention",
        "hybrid": "hybrid Mamba-transformers",
        "sparse_attention": "models with an experimental attention variant",
    }
)
"""Each family and what it holds, in words."""

ACCURACY_FILE = Path(__file__).with_name("accuracy.json")
"""The measured figures, written by ``benchmarks/predict_published.py --write-accuracy``."""


def model_family(model: ModelDescription) -> Family:
    """The family of ``model``: its layer kinds decide, the first that applies in this order.

    A hybrid layer pattern (Mamba layers among the attention ones) is ``hybrid``; an
    experimental attention variant (megatron-core's ``experimental_attention_variant``) is
    ``sparse_attention``; routed experts with multi-latent attention ``moe_mla``, without it
    ``moe``; anything else ``dense``.
    """
    if model.hybrid_layer_pattern:
        return "hybrid"
    if model.experimental_attention_variant is not None:
        return "sparse_attention"
    if model.moe:
        return "moe_mla" if model.multi_latent_attention else "moe"
    return "dense"


#: The fields of a model description that make it the model it is: its layers' kinds and widths,
#: its attention (DeepSeek-V4's hybrid attention's fields included), experts, Mamba mixers,
#: vocabulary and MTP layers. Sequence length, the layout, precision, recompute, dropout and
#: kernel choices are how a model is trained, not which model.
ARCHITECTURE_FIELDS: tuple[str, ...] = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "ffn_hidden_size",
    "vocab_size",
    "gated_linear_unit",
    "activation_func",
    "glu_linear_offset",
    "activation_func_clamp_value",
    "add_bias_linear",
    "add_qkv_bias",
    "normalization",
    "position_embedding_type",
    "share_embeddings_and_output_weights",
    "softmax_type",
    "multi_latent_attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "window_size",
    "window_attn_skip_freq",
    "attention_output_gate",
    "experimental_attention_variant",
    "dsa_indexer_n_heads",
    "dsa_indexer_head_dim",
    "dsa_indexer_topk",
    *DSV4_HYBRID_FIELDS,
    "hybrid_layer_pattern",
    "mamba_state_dim",
    "mamba_head_dim",
    "mamba_num_groups",
    "mamba_num_heads",
    "num_moe_experts",
    "moe_router_topk",
    "moe_router_score_function",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "moe_latent_size",
    "mtp_num_layers",
)


def architecture(model: ModelDescription) -> dict[str, Any]:
    """Which model ``model`` is: its :data:`ARCHITECTURE_FIELDS`, JSON-ready (tuples as lists),
    as ``accuracy.json`` names each published model."""
    return {name: _json_ready(getattr(model, name)) for name in ARCHITECTURE_FIELDS}


def _json_ready(value: Any) -> Any:
    return [_json_ready(v) for v in value] if isinstance(value, (tuple, list)) else value


@dataclass(frozen=True)
class ModelAccuracy:
    """The estimate's error on the published rows of one model (one :func:`architecture`)."""

    recipes: tuple[str, ...]
    """The recipes whose published rows are of this model."""
    changes: Mapping[str, Any] = field(default_factory=dict)
    """Where it differs from the first recipe's model: field -> value (empty: nowhere)."""
    rows: int = 0
    """Its rows counted in :attr:`median_abs_error` (no constant fitted on them)."""
    median_abs_error: float | None = None
    """Median of |predicted / published - 1| over those rows; None when each was fitted on."""
    median_signed_error: float | None = None
    """Median of predicted / published - 1 (positive: the estimate is optimistic)."""
    out_of_group_median_abs_error: float | None = None
    """Median |error| over its rows with the constants fitted on them refit without them."""

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> ModelAccuracy:
        """One published model of :data:`ACCURACY_FILE` (an entry of its ``models``)."""
        return cls(
            tuple(entry["recipes"]),
            MappingProxyType(dict(entry.get("changes", {}))),
            int(entry["rows"]),
            entry["median_abs_error"],
            entry["median_signed_error"],
            entry.get("out_of_group", {}).get("median_abs_error"),
        )

    @property
    def name(self) -> str:
        """The recipes, and where the model differs from the first one's."""
        changed = ", ".join(f"{k} {v}" for k, v in self.changes.items())
        return ", ".join(self.recipes) + (f" with {changed}" if changed else "")

    def words(self) -> str:
        """The figures in words, as the accuracy line ends."""
        parts = []
        if self.rows and self.median_abs_error is not None:
            parts.append(
                f"off by {self.median_abs_error:.1%} median (signed "
                f"{self.median_signed_error:+.1%}) over its {_rows(self.rows)}"
            )
        if self.out_of_group_median_abs_error is not None:
            parts.append(f"{self.out_of_group_median_abs_error:.1%} with them left out of the fit")
        return f"this model ({self.name}): {', '.join(parts) or 'no measured rows'}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "recipes": list(self.recipes),
            "changes": dict(self.changes),
            "rows": self.rows,
            "median_abs_error": self.median_abs_error,
            "median_signed_error": self.median_signed_error,
            "out_of_group_median_abs_error": self.out_of_group_median_abs_error,
        }


@dataclass(frozen=True)
class MeasuredAccuracy:
    """The estimate's error on the published rows of one family of models."""

    family: Family
    """The family (:func:`model_family`)."""
    rows: int
    """Published rows of the family the error is measured on (0: none)."""
    median_abs_error: float | None
    """Median of |predicted / published - 1| over those rows; None without rows."""
    median_signed_error: float | None
    """Median of predicted / published - 1 (positive: the estimate is optimistic)."""
    out_of_group_median_abs_error: float | None = None
    """Median |error| over the same rows when each (model, GPU, precision) group is predicted
    with the constants fitted on it refit without it; None when not measured."""
    model: ModelAccuracy | None = None
    """The figures of the model's own published rows; None when it is no published model."""

    @property
    def description(self) -> str:
        """The family in words."""
        return FAMILIES[self.family]

    def line(self) -> str:
        """The figure in words, as every estimate prints it."""
        own = "" if self.model is None else f"; {self.model.words()}"
        if not self.rows or self.median_abs_error is None:
            return (
                "measured accuracy: no published rows for this kind of model "
                f"({self.description}){own}"
            )
        held_out = (
            ""
            if self.out_of_group_median_abs_error is None
            else f"; {self.out_of_group_median_abs_error:.1%} with each model's rows left out of "
            "the fit"
        )
        return (
            f"measured accuracy: tokens/s/GPU off by {self.median_abs_error:.1%} median "
            f"(signed {self.median_signed_error:+.1%}) over {_rows(self.rows)} of "
            f"{self.description}{held_out}{own}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "family": self.family,
            "description": self.description,
            "rows": self.rows,
            "median_abs_error": self.median_abs_error,
            "median_signed_error": self.median_signed_error,
            "out_of_group_median_abs_error": self.out_of_group_median_abs_error,
            "model": None if self.model is None else self.model.to_dict(),
        }


def _rows(n: int) -> str:
    return f"{n} published row{'' if n == 1 else 's'}"


@functools.cache
def _document() -> Mapping[str, Any]:
    """:data:`ACCURACY_FILE`, read once."""
    return json.loads(ACCURACY_FILE.read_text(encoding="utf-8"))


def _figures() -> Mapping[str, Mapping[str, Any]]:
    """The families' figures of :data:`ACCURACY_FILE`."""
    return _document()["families"]


def _model_accuracy(model: ModelDescription) -> ModelAccuracy | None:
    """The figures of the published model whose :func:`architecture` ``model`` has, if any."""
    fields = architecture(model)
    for entry in _document().get("models", ()):
        if entry["architecture"] == fields:
            return ModelAccuracy.from_entry(entry)
    return None


def measured_accuracy(model: ModelDescription) -> MeasuredAccuracy:
    """The measured error of the estimate on published rows of ``model``'s family, and on the
    model's own where it is a published model (its :func:`architecture`)."""
    family = model_family(model)
    figures = _figures().get(family)
    own = _model_accuracy(model)
    if figures is None:
        return MeasuredAccuracy(family, 0, None, None, model=own)
    held_out = figures.get("out_of_group", {}).get("median_abs_error")
    return MeasuredAccuracy(
        family,
        int(figures["rows"]),
        float(figures["median_abs_error"]),
        float(figures["median_signed_error"]),
        None if held_out is None else float(held_out),
        own,
    )
