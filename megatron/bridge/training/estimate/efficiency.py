"""The achievable fraction of peak tensor-core throughput, per GPU and precision, with its source.

A step's compute time is its executed FLOPs over ``peak x fraction``: the fraction is what the
GEMMs, attention kernels and the unmodelled elementwise work reach on average, with the
communication and the pipeline bubble accounted apart by the schedule (:mod:`.schedule`).

Each figure is fitted on ONE published measurement: the fraction for which this estimate's
predicted tokens/s/GPU equals the published one for that row's exact layout
(:data:`FIT_ROWS` keeps the row, and a test re-derives the prediction from it). A GPU and
precision without a fitted row uses the fitted figure of the same precision on H100 and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ACHIEVABLE", "FIT_ROWS", "Achievable", "FitRow", "achievable_fraction"]


@dataclass(frozen=True)
class FitRow:
    """One published measurement a fraction was fitted on: the job and its tokens/s/GPU."""

    gpu: str
    """GPU model, as the catalogue spells it."""
    precision: str
    """bf16 or fp8."""
    model: str
    """Which recipe's architecture the row trains (a module of ``megatron.bridge.recipes``)."""
    layout: dict[str, Any]
    """The row's layout and batch, as ``RecipeSpec.changed`` keys."""
    world_size: int
    """GPUs in the row."""
    tokens_per_s_per_gpu: float
    """The published throughput."""
    source: str
    """Where the row is published."""


@dataclass(frozen=True)
class Achievable:
    """The fraction of peak one GPU and precision reaches, and where it comes from."""

    fraction: float
    """Share of the peak dense tensor-core FLOP/s the step's compute runs at."""
    source: str
    """How it was chosen."""


#: The rows the fractions are fitted on, one per GPU and precision.
FIT_ROWS: dict[tuple[str, str], FitRow] = {
    ("h100", "fp8"): FitRow(
        gpu="h100",
        precision="fp8",
        model="llama3_70b",
        layout={
            "model.tensor_model_parallel_size": 4,
            "model.pipeline_model_parallel_size": 8,
            "model.virtual_pipeline_model_parallel_size": 5,
            "model.context_parallel_size": 1,
            "global_batch_size": 128,
            "micro_batch_size": 1,
        },
        world_size=64,
        tokens_per_s_per_gpu=1602.0,
        source="Megatron-Bridge docs/performance-summary-archive.md, 25.11 container, DGX-H100, "
        "LLAMA3_70B, 64 GPUs FP8-CS, GBS 128, MBS 1, seq 8192, TP4 PP8 VP5",
    ),
}

#: The fitted fraction per (gpu, precision). Fitted by bisection on the row above with this
#: estimate (``tests/unit_tests/training/test_step_model.py`` re-derives the row's prediction).
ACHIEVABLE: dict[tuple[str, str], Achievable] = {
    ("h100", "fp8"): Achievable(
        0.423,
        "fitted on " + FIT_ROWS[("h100", "fp8")].source,
    ),
}

_BF16_H100 = Achievable(
    0.47,
    "H100 BF16: no published dense H100 BF16 row upstream to fit on; Megatron-LM's README "
    "reports up to 47 % MFU for Megatron-Core BF16 GPT training on H100 clusters, measured end "
    "to end (communication and bubble included), taken as the compute fraction (a lower bound)",
)


def achievable_fraction(gpu: str, precision: str) -> Achievable:
    """The fraction of peak for ``gpu`` training in ``precision`` (fp16 counts as bf16).

    Falls back to the H100 figure of the same precision when ``gpu`` has no fitted row.
    """
    key = (gpu, "fp8" if precision == "fp8" else "bf16")
    if key in ACHIEVABLE:
        return ACHIEVABLE[key]
    base = ACHIEVABLE.get(("h100", key[1]), _BF16_H100)
    if key == ("h100", "bf16"):
        return base
    return Achievable(
        base.fraction, f"no fitted row for {gpu} {key[1]}: the H100 {key[1]} figure ({base.source})"
    )
