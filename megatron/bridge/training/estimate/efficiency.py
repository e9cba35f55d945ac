"""The achievable fraction of peak tensor-core throughput, per GPU and compute dtype, with its source.

A step's compute time is its executed FLOPs over ``peak x fraction``: the fraction is what the
GEMMs, attention kernels and the unmodelled elementwise work reach on average, with the
communication and the pipeline bubble accounted apart by the schedule (:mod:`.schedule`).

How the table is chosen: one published measurement per GPU and tensor-core format, fitted
(:data:`FIT_ROWS`): the fraction for which this estimate's predicted tokens/s/GPU equals the
published figure of that row's run (``benchmarks/predict_published.py --fit`` re-derives every
figure by bisection; a test holds each fitted row to its published figure). The row chosen is
fixed before fitting, not picked by its error: the Llama-3 70B row of the GPU and format (a
dense model, which the estimate describes without MoE routing or hybrid-layer idealisations),
or on B200, which publishes Llama-3 8B only, that row. Every other published row is a check
(``benchmarks/predict_published.py`` prints the error on each). There is no per-model factor.

A compute dtype without a fitted row takes, in this order: the same GPU's fitted dtype of the
same tensor-core format (FP8 current scaling and MXFP8 both run FP8 GEMMs), the H100 figure of
that format, else the quoted H100 BF16 figure; the source says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from megatron.bridge.training.precisions import PRECISIONS, canonical_precision

__all__ = ["ACHIEVABLE", "FIT_ROWS", "QUOTED_BF16", "Achievable", "FitRow", "achievable_fraction"]


@dataclass(frozen=True)
class FitRow:
    """One published measurement a fraction was fitted on: the run and its tokens/s/GPU.

    The recipe ``model`` at ``gpu`` and ``precision`` picks the row's published layout, world
    size and batch sizes (:mod:`megatron.bridge.recipes.published`).
    """

    model: str
    """The recipe that trains the row's model (a name of ``megatron.bridge.recipes.RECIPES``)."""
    gpu: str
    """GPU model, as the catalogue spells it."""
    precision: str
    """The row's compute dtype (``precisions.PRECISIONS``)."""
    release: str
    """The NeMo container release the row was published for."""
    tokens_per_s_per_gpu: float
    """The published throughput."""
    source: str
    """Where the row is published."""


@dataclass(frozen=True)
class Achievable:
    """The fraction of peak one GPU and compute dtype reaches, and where it comes from."""

    fraction: float
    """Share of the peak dense tensor-core FLOP/s the step's compute runs at."""
    source: str
    """How it was chosen."""


def _llama3_70b(gpu: str, precision: str, system: str, label: str, tokens: float) -> FitRow:
    return FitRow(
        model="llama3_70b",
        gpu=gpu,
        precision=precision,
        release="26.04.01",
        tokens_per_s_per_gpu=tokens,
        source=f"Megatron-Bridge docs/performance-summary-archive.md, 26.04.01, {system}, "
        f"LLAMA3_70B {label}",
    )


#: The published rows the fractions are fitted on, one per GPU and tensor-core format, keyed
#: (gpu, compute dtype).
FIT_ROWS: Mapping[tuple[str, str], FitRow] = MappingProxyType(
    {
        # 64 GPUs, GBS 256, MBS 1, seq 8192, TP1 PP4 VP5: 4864 tokens/s/GPU.
        ("gb300", "fp8_mx"): _llama3_70b("gb300", "fp8_mx", "DGX-GB300", "MXFP8", 4864.0),
        # 64 GPUs, GBS 256, MBS 1, seq 8192, TP1 PP4 VP5: 7296 tokens/s/GPU.
        ("gb300", "nvfp4"): _llama3_70b("gb300", "nvfp4", "DGX-GB300", "NVFP4", 7296.0),
        # 64 GPUs, GBS 256, MBS 1, seq 8192, TP2 PP4 VP5: 3712 tokens/s/GPU.
        ("gb200", "fp8_mx"): _llama3_70b("gb200", "fp8_mx", "DGX-GB200", "MXFP8", 3712.0),
        # 64 GPUs, GBS 256, MBS 1, seq 8192, TP2 PP4 VP5: 4864 tokens/s/GPU.
        ("gb200", "nvfp4"): _llama3_70b("gb200", "nvfp4", "DGX-GB200", "NVFP4", 4864.0),
        # 64 GPUs, GBS 256, MBS 1, seq 8192, TP4 PP8 VP5: 1664 tokens/s/GPU.
        ("h100", "fp8_cs"): _llama3_70b("h100", "fp8_cs", "DGX-H100", "FP8", 1664.0),
        # 8 GPUs, GBS 128, MBS 2, seq 8192, TP1 PP1: 30624 tokens/s/GPU.
        ("b200", "fp8_cs"): FitRow(
            model="llama3_8b",
            gpu="b200",
            precision="fp8_cs",
            release="25.11",
            tokens_per_s_per_gpu=30624.0,
            source="Megatron-Bridge docs/performance-summary-archive.md, 25.11, DGX-B200, "
            "LLAMA3_8B FP8-CS",
        ),
    }
)

#: The fitted fraction per (gpu, compute dtype): bisection on the row of :data:`FIT_ROWS` with
#: this estimate (``benchmarks/predict_published.py --fit``).
ACHIEVABLE: Mapping[tuple[str, str], Achievable] = MappingProxyType(
    {
        key: Achievable(fraction, f"fitted on {FIT_ROWS[key].source}")
        for key, fraction in {
            ("gb300", "fp8_mx"): 0.538,
            ("gb300", "nvfp4"): 0.350,
            ("gb200", "fp8_mx"): 0.409,
            ("gb200", "nvfp4"): 0.310,
            ("h100", "fp8_cs"): 0.489,
            ("b200", "fp8_cs"): 0.427,
        }.items()
    }
)

#: H100 BF16: upstream publishes no H100 BF16 pre-training row to fit on.
QUOTED_BF16 = Achievable(
    0.47,
    "H100 BF16: no published H100 BF16 row to fit on; Megatron-LM's README reports up to 47 % "
    "MFU for Megatron-Core BF16 GPT training on H100 clusters, measured end to end "
    "(communication and bubble included), taken as the compute fraction (a lower bound)",
)


def _format(precision: str) -> str:
    return PRECISIONS[precision].tensor_cores


def achievable_fraction(gpu: str, precision: str | None) -> Achievable:
    """The fraction of peak for ``gpu`` training in ``precision`` (a compute dtype or alias;
    None, a custom quantization recipe, counts as bf16).

    A pair without a fitted row falls back as the module docstring says, and its source says so.
    """
    dtype = "bf16" if precision is None else canonical_precision(precision)
    if (gpu, dtype) in ACHIEVABLE:
        return ACHIEVABLE[(gpu, dtype)]
    cores = _format(dtype)
    for owner in (gpu, "h100"):
        for (g, d), found in ACHIEVABLE.items():
            if g == owner and _format(d) == cores:
                return Achievable(
                    found.fraction,
                    f"no fitted row for {gpu} {dtype}: the {g} {d} figure, the same "
                    f"{cores.upper()} tensor cores ({found.source})",
                )
    if (gpu, dtype) == ("h100", "bf16"):
        return QUOTED_BF16
    return Achievable(
        QUOTED_BF16.fraction, f"no fitted row for {gpu} {dtype}: {QUOTED_BF16.source}"
    )
