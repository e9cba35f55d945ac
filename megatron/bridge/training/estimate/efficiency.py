"""Measured efficiencies the step estimate applies, each with its source.

**The achievable fraction** of peak tensor-core throughput, per GPU and compute dtype.

A step's GEMM time is their executed FLOPs over ``peak x fraction``: the fraction is what the
GEMMs and the unmodelled elementwise work reach on average. Core attention runs at its kernel's
measured curve (:mod:`.attention`), the memory-bound kernels at the HBM peak, the communication
at NCCL's measured bus shares (:mod:`.collectives`) and the pipeline bubble on the schedule
(:mod:`.schedule`), each accounted apart.

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

**The share of EP all-to-all time that ``overlap_moe_expert_parallel_comm`` hides**
(:data:`EP_OVERLAP`): the schedule (:mod:`.schedule`) bounds what the combined 1F1B slots can
hide; of that, a measured share comes off the step. The measurement is upstream's A/B: the
step time the overlap saved (timed runs) over the time the communication kernels ran without
it (its Nsight capture of the same configuration, read as one step; all communication kernels,
the EP all-to-alls with a little DP traffic). The capture gives that time as a two-digit
percentage, so the share is 0.43-0.47. With the overlap the communication kernels ran 31 %
longer (10.83 s against 8.25 s) and about a third of their time ran beside GEMMs and
attention: overlapped kernels share the GPU's SMs and memory, so overlap hides less than the
windows allow. The share is of measured kernel time and is applied to the all-to-all time at
achieved bandwidth (below), the time the A/B's kernels ran. One measurement, on H100 with HybridEP, serves every GPU and dispatcher;
the alltoall A/B on the same shape (PR 3862) is the check
(``tests/unit_tests/training/test_step_model.py``).

**The achieved share of link peak of EP all-to-alls** (:data:`ALLTOALL_ACHIEVED`), per link. An EP
token all-to-all runs many small messages, one per peer, through kernels that share the GPU with the
experts' GEMMs: it reaches a share of the link's peak, and its time at achieved bandwidth
(:attr:`CommEntry.seconds_at_achieved_bandwidth`) is the time at link peak over that share. NVLink:
DeepEP's measured intranode normal kernels (EP8 on H800, dispatch 153 GB/s and combine 158 GB/s,
deepseek-ai/DeepEP README, "Normal kernels with NVLink and RDMA forwarding") over H800's NVLink peak
per direction, 200 GB/s (the datasheet's 400 GB/s bidirectional, the convention of the catalogue's
``nvlink_gb_per_s``): 0.78. The README's "~160 GB/s NVLink maximum bandwidth" is what it reaches,
not the link's peak, and the ring collectives' NVLink share (:data:`~.collectives.NVLINK_RING`,
0.81) is likewise taken over the datasheet's. Network: one row, named and fitted, PR 5094's Nsight
capture (the :data:`EP_OVERLAP` shape, 16 x H100 over two nodes, HybridEP): its communication
kernels ran 8.25 s per step with the overlap off, where this estimate puts the EP all-to-all at 4.11
s at network peak (and 0.12 s of DP): a share of 0.50. It serves every GPU generation and
dispatcher; DeepEP's internode RDMA figures (43-58 GB/s of about 50 GB/s, 0.86-1.16, counted per
logical receiver) are kernel microbenchmarks without the GEMMs beside them, so the production
capture is the figure used. The ring collectives and p2p sends (TP, CP, PP, DP) take NCCL's measured
bus shares and latency per call (:mod:`.collectives`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from megatron.bridge.training.precisions import PRECISIONS, canonical_precision

__all__ = [
    "ACHIEVABLE",
    "ALLTOALL_ACHIEVED",
    "EP_OVERLAP",
    "FIT_ROWS",
    "QUOTED_BF16",
    "Achievable",
    "AchievedShare",
    "FitRow",
    "OverlapAB",
    "achievable_fraction",
]


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
            ("gb300", "fp8_mx"): 0.657,
            ("gb300", "nvfp4"): 0.485,
            ("gb200", "fp8_mx"): 0.474,
            ("gb200", "nvfp4"): 0.379,
            ("h100", "fp8_cs"): 0.651,
            ("b200", "fp8_cs"): 0.516,
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


def achievable_fraction(
    gpu: str,
    precision: str | None,
    *,
    table: Mapping[tuple[str, str], Achievable] = ACHIEVABLE,
) -> Achievable:
    """The fraction of peak for ``gpu`` training in ``precision`` (a compute dtype or alias;
    None, a custom quantization recipe, counts as bf16), read from ``table`` (default: the fitted
    :data:`ACHIEVABLE`; the leave-one-group-out check passes it without a group's fit).

    A pair without a fitted row falls back as the module docstring says, and its source says so.
    """
    dtype = "bf16" if precision is None else canonical_precision(precision)
    if (gpu, dtype) in table:
        return table[(gpu, dtype)]
    cores = _format(dtype)
    for owner in (gpu, "h100"):
        for (g, d), found in table.items():
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


@dataclass(frozen=True)
class OverlapAB:
    """A measured A/B of one overlap knob: the step without and with it, and the time its
    communication's kernels ran per step without it."""

    step_without: float
    """Seconds per step with the knob off."""
    step_with: float
    """Seconds per step with the knob on, all else held."""
    comm_seconds: float
    """Seconds per step the communication's kernels ran with the knob off."""
    source: str
    """Where the figures are published."""

    @property
    def hidden_share(self) -> float:
        """Share of the communication's time the knob took off the step."""
        return (self.step_without - self.step_with) / self.comm_seconds


#: Upstream's profiled EP-overlap A/B (Megatron-Bridge PR 5094; skills/
#: nemo-mbridge-perf-expert-parallel-overlap/SKILL.md, "HybridEP Production-Shape Benchmark"):
#: Qwen3-30B-A3B, 16 x H100, BF16, seq 4096, MBS 1, GBS 1024, TP1 PP1 CP1 EP16, forced load
#: balancing, flex dispatcher with HybridEP. Steady step 24.7138 s off, 20.9920 s on (the
#: independent validation run). Nsight, knob off: 9.079 ms of communication ran beside GEMMs and
#: attention, 0.11 % of the communication time, which is 8.254 s.
EP_OVERLAP = OverlapAB(
    step_without=24.7138,
    step_with=20.9920,
    comm_seconds=9.079e-3 / 0.0011,
    source="Megatron-Bridge PR 5094's profiled A/B (Qwen3-30B-A3B, 16 x H100, BF16, EP16, "
    "HybridEP): the step time saved over the communication kernels' time without the overlap",
)


@dataclass(frozen=True)
class AchievedShare:
    """The share of a link's peak per-direction bandwidth a collective reaches, per link."""

    nvlink: float
    """Share of the NVLink peak."""
    network: float
    """Share of the network NIC's peak."""
    source: str
    """Where the figures come from."""

    def of(self, link: str) -> float:
        """The share on ``link`` (nvlink or network)."""
        return self.nvlink if link == "nvlink" else self.network


#: EP token all-to-alls. NVLink: DeepEP README (deepseek-ai/DeepEP, "Normal kernels with NVLink
#: and RDMA forwarding"): intranode EP8 on H800, dispatch 153 GB/s and combine 158 GB/s, over
#: H800's 200 GB/s NVLink per direction (H800 SXM datasheet: 400 GB/s bidirectional). Network:
#: fitted on one named row, Megatron-Bridge PR 5094's Nsight capture (see EP_OVERLAP: 8.254 s of
#: communication kernels per step, knob off), over this estimate's 4.1104 s of that shape's EP
#: all-to-all at network peak (HybridEP, 16 x H100).
ALLTOALL_ACHIEVED = AchievedShare(
    nvlink=(153 + 158) / 2 / 200,
    network=4.1104 / (9.079e-3 / 0.0011),
    source="EP all-to-all achieved bandwidth: NVLink from DeepEP's measured intranode kernels "
    "(0.78 of H800's NVLink peak); network fitted on Megatron-Bridge PR 5094's Nsight capture "
    "(16 x H100, HybridEP: 0.50 of peak)",
)
