"""Core attention's time from the flash-attention kernels' measured throughput curves.

Core attention (softmax(QK^T)V) does not run at a GEMM's rate: a fused attention kernel's
throughput rises with the key length it sees per call (a short call spends a larger share in its
prologue, its softmax rescaling and, under a causal mask, the partly masked tiles on the
diagonal) and levels off at a long-sequence rate below the GEMMs'. Its backward, which recomputes
QK^T, reaches less than its forward. So :func:`attention_seconds` prices each part of a layer's
core attention at the kernel's measured rate for the key length of its calls:

- without context parallelism a call sees the whole sequence, causal, or the sliding window
  (``window_size``: left + right + 1 keys);
- with CP (megatron-core's ring attention through Transformer Engine's
  ``AttnFuncWithCPAndKVP2P``, the sequence in 2 x CP chunks balanced over the ranks), each rank
  runs CP steps: one causal step on its own two chunks (s / CP keys) and CP - 1 unmasked steps
  on half a chunk pair (s / 2CP keys per call);
- with CP over an all-to-all of Q, K, V and O (``cp_comm_type="a2a"``, Transformer Engine's
  ``AttnFuncWithCPAndQKVOA2A``, DeepSpeed-Ulysses style), each rank holds the whole sequence for
  1 / CP of the heads and runs one causal call over all the keys (:func:`a2a_share`: the layers
  that do).

A curve is ``rate(L) = long_rate x L / (L + half_length)`` per GPU generation, mask and pass, as
a share of the GPU's dense 16-bit peak (the FP8 peak with ``fp8_dot_product_attention``), fitted
to the published figures named in :data:`CURVES`; head dimension 64 runs at its generation's
:data:`HEAD_DIM_64` share of it. The published backward figures count the backward's FLOPs as
2.5 x the forward's (FlashAttention's convention: dQ, dK, dV and the recomputed QK^T), while the
model's FLOPs count it as 2 x: so of a layer's core-attention model FLOPs, a third is the forward
at the forward rate and two thirds, times 1.25, the backward at the backward rate.

Pure arithmetic: no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from megatron.bridge.training.estimate.kernels import generation
from megatron.bridge.training.hardware import GpuSpec
from megatron.bridge.training.job import ModelDescription

__all__ = [
    "BACKWARD_FLOPS_PER_MODEL_FLOP",
    "CURVES",
    "HEAD_DIM_64",
    "AttentionCurve",
    "a2a_share",
    "attention_seconds",
    "attention_source",
    "kernel_calls",
]


@dataclass(frozen=True)
class AttentionCurve:
    """One pass and mask of the fused attention kernel on one GPU generation."""

    long_rate: float
    """Share of the dense 16-bit peak the kernel approaches at long key lengths."""
    half_length: float
    """Key length per call at which it reaches half of that."""
    source: str
    """The published figures it is fitted to."""

    def rate(self, keys: float) -> float:
        """Share of the peak at ``keys`` keys per call."""
        return self.long_rate * keys / (keys + self.half_length)


_FA3 = (
    "FlashAttention-3 paper (Shah et al., arXiv 2407.08608), H100 SXM5 BF16 head dim 128, the "
    "cuDNN series of its forward and backward figures (assets/flash3_fp16_fwd.png in "
    "Dao-AILab/flash-attention), which is the kernel Transformer Engine's FusedAttention runs"
)
_FA4 = (
    "FlashAttention-4 on B200 BF16 head dim 128 (Dao-AILab/flash-attention PR 2605's forward "
    "sweep, PR 2280's forward and backward at 8K keys); the FA4 paper puts cuDNN 9.13 within "
    "1.3x of it"
)
_H100_PEAK = 989.0
"""H100 SXM dense BF16 TFLOP/s (NVIDIA H100 datasheet), the denominator of the Hopper shares."""
_B200_PEAK = 2250.0
"""B200 dense BF16 TFLOP/s (NVIDIA DGX B200 datasheet), the denominator of the Blackwell shares."""

#: (generation, causal, pass) -> curve. Hopper, cuDNN head dim 128: causal forward 315 TFLOP/s at
#: 512 keys and 539 at 16K (552 x L / (L + 385)); unmasked forward 497 at 512 and 595 at 16K
#: (599 x L / (L + 105)); unmasked backward 305 at 512 and 516 at 16K (528 x L / (L + 374)). The
#: causal backward is not published: the unmasked backward's long rate times the causal
#: forward's share of the unmasked forward's at 16K (539 / 595), at the causal forward's half
#: length. Blackwell, FA4 head dim 128: causal forward 704 at 1K and 1114 at 4K
#: (1382 x L / (L + 986)); unmasked forward 1196 at 1K and 1401 at 16K (1417 x L / (L + 189));
#: the backwards as the forward times the backward / forward ratio at 8K keys (causal 1208 / 1418,
#: unmasked 1360 / 1535).
CURVES: Mapping[tuple[str, bool, str], AttentionCurve] = MappingProxyType(
    {
        ("hopper", True, "forward"): AttentionCurve(552 / _H100_PEAK, 385, _FA3),
        ("hopper", False, "forward"): AttentionCurve(599 / _H100_PEAK, 105, _FA3),
        ("hopper", False, "backward"): AttentionCurve(528 / _H100_PEAK, 374, _FA3),
        ("hopper", True, "backward"): AttentionCurve(528 * 539 / 595 / _H100_PEAK, 385, _FA3),
        ("blackwell", True, "forward"): AttentionCurve(1382 / _B200_PEAK, 986, _FA4),
        ("blackwell", False, "forward"): AttentionCurve(1417 / _B200_PEAK, 189, _FA4),
        ("blackwell", True, "backward"): AttentionCurve(1382 * 1208 / 1418 / _B200_PEAK, 986, _FA4),
        ("blackwell", False, "backward"): AttentionCurve(
            1417 * 1360 / 1535 / _B200_PEAK, 189, _FA4
        ),
    }
)

#: Rate of head dimension 64 against 128, per generation: its softmax exponentials, one per
#: 4 x 64 FLOPs, bound the kernel rather than its tensor cores. Hopper: FlashAttention-3's causal
#: forward at 16K keys on H100 (473 against 616 TFLOP/s, the paper's forward figure). Blackwell:
#: FA4's causal forward at 16K keys on B200 (836 TFLOP/s, PR 2605) against the head-dim-128 curve
#: there (1382 x 16K / (16K + 986) = 1303).
HEAD_DIM_64: Mapping[str, float] = MappingProxyType(
    {"hopper": 473 / 616, "blackwell": 836 / (1382 * 16384 / (16384 + 986))}
)

BACKWARD_FLOPS_PER_MODEL_FLOP = 2.5 / 2
"""The backward kernel's counted FLOPs per backward model FLOP (2.5 x forward against 2 x)."""


def a2a_share(model: ModelDescription) -> float:
    """Share of the layers whose CP exchange is the all-to-all over heads ("a2a"); the others
    run the K/V ring or, for "all_gather" and "a2a+p2p", are priced as it (the same K/V bytes
    per rank; "a2a+p2p"'s inner all-to-all sizes are not described)."""
    kinds = model.cp_comm_types
    return kinds.count("a2a") / len(kinds) if kinds else 0.0


def kernel_calls(
    keys: float, cp_size: int, a2a: float = 0.0
) -> tuple[tuple[float, float, bool], ...]:
    """(share of the work, keys per call, causal) of core attention over ``keys`` causal keys on
    a CP rank (see the module docstring): the whole causal call without CP; with CP's ring one
    causal step of 1 / CP of the work over keys / CP, and CP - 1 unmasked steps over keys / 2CP;
    the ``a2a`` share of the layers (:func:`a2a_share`) one causal call over all the keys."""
    if cp_size <= 1 or a2a >= 1:
        return ((1.0, keys, True),)
    ring = 1 - a2a
    calls = (
        (ring / cp_size, keys / cp_size, True),
        (ring * (1 - 1 / cp_size), keys / (2 * cp_size), False),
    )
    return calls if a2a <= 0 else ((a2a, keys, True), *calls)


def attention_seconds(
    flops: float,
    *,
    keys: float,
    cp_size: int,
    head_dim: int,
    gpu_generation: str,
    peak: float,
    a2a: float = 0.0,
) -> tuple[float, float]:
    """(forward, backward) seconds of ``flops`` core-attention model FLOPs (a third forward, two
    thirds backward) whose calls see ``keys`` keys before the CP split (the ``a2a`` share of
    them after CP's all-to-all, :func:`kernel_calls`), at the curves of ``gpu_generation``
    (Ampere and older take Hopper's shares) on a GPU of ``peak`` FLOP/s."""
    gen = _curve_generation(gpu_generation)
    scale = peak * (HEAD_DIM_64[gen] if head_dim <= 64 else 1.0)
    forward = backward = 0.0
    for share, length, causal in kernel_calls(keys, cp_size, a2a):
        part = flops * share
        forward += part / 3 / (scale * CURVES[(gen, causal, "forward")].rate(length))
        backward += (
            part
            * 2
            / 3
            * BACKWARD_FLOPS_PER_MODEL_FLOP
            / (scale * CURVES[(gen, causal, "backward")].rate(length))
        )
    return forward, backward


def attention_source(gpu: GpuSpec, softmax_type: str = "vanilla") -> str:
    """The figures the curve of ``gpu``'s generation is fitted to (Ampere and older: Hopper's),
    and, for a softmax with sinks, the kernel that runs it: Transformer Engine takes an
    off-by-one or learnable softmax only in cuDNN's FusedAttention (``get_attention_backend``
    disables FlashAttention for it), priced at the same curve."""
    source = CURVES[(_curve_generation(generation(gpu)), True, "forward")].source
    if softmax_type == "vanilla":
        return source
    return f"{source}; softmax_type {softmax_type} runs in cuDNN fused attention, at this curve"


def _curve_generation(gpu_generation: str) -> str:
    """The generation whose curves a GPU takes: its own, or Hopper's for Ampere and older."""
    return gpu_generation if gpu_generation in ("hopper", "blackwell") else "hopper"
