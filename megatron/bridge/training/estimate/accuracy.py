"""How sure the step estimate is: its error on the published rows of the job's kind of model.

``benchmarks/predict_published.py`` sets the estimate beside every pre-training row NVIDIA
publishes for Megatron-Bridge (current and archived releases) and, with ``--write-accuracy``,
writes the median errors per model family into ``accuracy.json`` beside this module (rows a
constant was fitted on left out). :func:`measured_accuracy` reads that file for a model: the
figure every estimate prints, or that no published row is of this kind of model. The family of
a model is :func:`model_family`, one rule read by the script and the estimate alike. Pure data:
importing this module loads no torch.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from megatron.bridge.training.job import ModelDescription

__all__ = [
    "ACCURACY_FILE",
    "FAMILIES",
    "Family",
    "MeasuredAccuracy",
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

    @property
    def description(self) -> str:
        """The family in words."""
        return FAMILIES[self.family]

    def line(self) -> str:
        """The figure in words, as every estimate prints it."""
        if not self.rows or self.median_abs_error is None:
            return (
                f"measured accuracy: no published rows for this kind of model ({self.description})"
            )
        held_out = (
            ""
            if self.out_of_group_median_abs_error is None
            else f"; {self.out_of_group_median_abs_error:.1%} with each model's rows left out of "
            "the fit"
        )
        return (
            f"measured accuracy: tokens/s/GPU off by {self.median_abs_error:.1%} median "
            f"(signed {self.median_signed_error:+.1%}) over {self.rows} published rows of "
            f"{self.description}{held_out}"
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
        }


@functools.cache
def _figures() -> Mapping[str, Mapping[str, Any]]:
    """The families' figures of :data:`ACCURACY_FILE`."""
    return json.loads(ACCURACY_FILE.read_text(encoding="utf-8"))["families"]


def measured_accuracy(model: ModelDescription) -> MeasuredAccuracy:
    """The measured error of the estimate on published rows of ``model``'s family."""
    family = model_family(model)
    figures = _figures().get(family)
    if figures is None:
        return MeasuredAccuracy(family, 0, None, None)
    held_out = figures.get("out_of_group", {}).get("median_abs_error")
    return MeasuredAccuracy(
        family,
        int(figures["rows"]),
        float(figures["median_abs_error"]),
        float(figures["median_signed_error"]),
        None if held_out is None else float(held_out),
    )
