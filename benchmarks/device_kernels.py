"""Kernel timings on the GPU this runs on, beside the step estimate's curves for that GPU.

    uv run python benchmarks/device_kernels.py [--gpu NAME] [--out FILE] [--quick] [--device cpu]

The step estimate prices a dense GEMM at the achievable fraction times its shape's tile, wave
and roofline efficiency (:func:`~megatron.bridge.training.estimate.gemm.gemm_efficiency`) and
core attention at the fused attention kernel's curve for the keys a call sees
(:func:`~megatron.bridge.training.estimate.attention.attention_seconds`). This script times,
on the machine's GPU:

- BF16 GEMMs through ``torch.matmul``, of the shapes a layer runs (:data:`GEMMS`);
- causal BF16 attention at 4K and 32K keys, head dimension 128, through PyTorch's
  ``scaled_dot_product_attention`` (its cuDNN backend where PyTorch has one, else its flash
  backend) and Transformer Engine's ``DotProductAttention`` where it is installed;
- GPT-OSS 120B's attention through ``DotProductAttention`` (the one backend that runs it): 64
  heads in 8 groups of head dimension 64, learnable sinks (``softmax_type="learnable"``), on a
  full layer and on a sliding-window layer (window (127, 0)), 4K keys (:data:`ATTENTION`).

Each kernel's forward, and an attention's backward, is timed (CUDA events, median of the
timed calls after warm-up) and set beside the curve's rate for the GPU named (``--gpu``; by
default the catalogue GPU whose name the device's contains, ``hardware.device_gpu``):
``measured / curve`` is the estimate's time over the measured one, above 1 where the kernel
runs faster than priced. FLOPs
follow the estimate's count: 2MNK per GEMM; an attention forward 4 x heads x head dim per
query-key pair, over the causal half of the sequence or the sliding window's mean context
(:mod:`~megatron.bridge.training.estimate.model_flops`), its backward 2.5 times that. A kernel
that cannot run here (no Transformer Engine, an argument its version lacks) is a row with the
reason. Prints a markdown table; ``--out`` writes the rows and the device's software versions
as JSON. ``--quick --device cpu`` runs small shapes on the CPU against the named GPU's curves,
which checks the script, not the curves. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from megatron.bridge.training.estimate.attention import (
    BACKWARD_FLOPS_PER_MODEL_FLOP,
    attention_seconds,
)
from megatron.bridge.training.estimate.efficiency import achievable_fraction
from megatron.bridge.training.estimate.gemm import gemm_efficiency
from megatron.bridge.training.estimate.kernels import OPERAND_BYTES, generation
from megatron.bridge.training.estimate.model_flops import window_context, window_keys
from megatron.bridge.training.hardware import GPUS, GpuSpec, device_gpu, gpu_spec

WARMUP = 3
"""Calls before timing (cuDNN and cuBLAS pick and build their plans on the first)."""
TIMED = 10
"""Calls timed; the median is kept."""


@dataclass(frozen=True)
class Gemm:
    """One GEMM shape: M x N x K, and the layer it comes from."""

    label: str
    m: int
    n: int
    k: int


#: The GEMMs timed: a dense layer's at micro-batch 1 x 4K tokens (Llama-3 8B: hidden 4096, 32
#: heads in 8 groups of 128, MLP 14336 gated), a routed expert's of GPT-OSS 120B (hidden 2880,
#: expert width 2880 gated, 4096 routed rows), and a short M against DeepSeek-V3's 7168 width.
GEMMS = (
    Gemm("Llama-3 8B QKV, 4K tokens", 4096, 6144, 4096),
    Gemm("Llama-3 8B fc1 (gated), 4K tokens", 4096, 28672, 4096),
    Gemm("Llama-3 8B fc2, 4K tokens", 4096, 4096, 14336),
    Gemm("GPT-OSS 120B expert fc1, 4096 rows", 4096, 5760, 2880),
    Gemm("256 rows x 7168 x 7168", 256, 7168, 7168),
)


@dataclass(frozen=True)
class Attention:
    """One attention call: batch, heads, KV groups, sequence, head dim, window, softmax."""

    label: str
    batch: int
    heads: int
    groups: int
    seq: int
    head_dim: int
    window: tuple[int, int] | None = None
    softmax_type: str = "vanilla"

    @property
    def context(self) -> float:
        """Mean keys a query attends to: the causal half, or the sliding window's mean context
        (upstream ``calculate_swa_context``, as the estimate's FLOP count takes it)."""
        return self.seq / 2 if self.window is None else window_context(self.window, self.seq)

    @property
    def keys(self) -> int:
        """Keys per call, as the estimate's curve reads them: the sequence or the window."""
        return self.seq if self.window is None else window_keys(self.window, self.seq)

    @property
    def forward_flops(self) -> float:
        """4 x heads x head dim per query-key pair."""
        return 4.0 * self.batch * self.heads * self.seq * self.context * self.head_dim


#: The attention calls timed (GPT-OSS 120B: openai/gpt-oss-120b config.json, its sliding window
#: of 128 as Megatron-Bridge's gpt_oss_bridge writes it, (127, 0), on every other layer).
ATTENTION = (
    Attention("causal d128, 4K", 4, 32, 8, 4096, 128),
    Attention("causal d128, 32K", 1, 32, 8, 32768, 128),
    Attention("GPT-OSS 120B full layer, sinks, 4K", 4, 64, 8, 4096, 64, None, "learnable"),
    Attention("GPT-OSS 120B window layer, sinks, 4K", 4, 64, 8, 4096, 64, (127, 0), "learnable"),
)


@dataclass(frozen=True)
class Row:
    """One timed kernel beside its curve."""

    kernel: str
    label: str
    backend: str
    shape: str
    flops: float
    measured_seconds: float | None
    curve_seconds: float
    reason: str | None = None

    @property
    def measured_tflops(self) -> float | None:
        return None if not self.measured_seconds else self.flops / self.measured_seconds / 1e12

    @property
    def curve_tflops(self) -> float:
        return self.flops / self.curve_seconds / 1e12

    @property
    def ratio(self) -> float | None:
        """The curve's time over the measured time (above 1: faster than priced)."""
        return None if not self.measured_seconds else self.curve_seconds / self.measured_seconds


def gemm_curve_seconds(gpu: GpuSpec, g: Gemm) -> float:
    """The estimate's time for one BF16 GEMM on ``gpu``: its FLOPs at the achievable fraction
    of the BF16 peak, over its shape's efficiency."""
    rate = gpu.peak_bf16_tflops * 1e12 * achievable_fraction(gpu.name, "bf16").fraction
    efficiency = gemm_efficiency(
        g.m,
        g.n,
        g.k,
        sms=gpu.streaming_multiprocessors,
        flop_rate=rate,
        hbm_bytes_per_s=gpu.hbm_gb_per_s * 1e9,
        operand_bytes=OPERAND_BYTES["bf16"],
    )
    return 2.0 * g.m * g.n * g.k / (rate * efficiency)


def attention_curve_seconds(gpu: GpuSpec, a: Attention) -> tuple[float, float]:
    """The estimate's (forward, backward) seconds for one BF16 attention call on ``gpu``."""
    return attention_seconds(
        3 * a.forward_flops,
        keys=a.keys,
        cp_size=1,
        head_dim=a.head_dim,
        gpu_generation=generation(gpu),
        peak=gpu.peak_bf16_tflops * 1e12,
    )


def median_seconds(
    torch: Any,
    fn: Callable[[Any], object],
    device: str,
    timed: int,
    prepare: Callable[[], Any] = lambda: None,
) -> float:
    """Median seconds of ``fn(prepare())`` over ``timed`` calls after :data:`WARMUP`; only
    ``fn`` is timed (``prepare`` runs and finishes before the clock starts)."""
    samples = []
    for i in range(WARMUP + timed):
        arg = prepare()
        if device == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(arg)
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            fn(arg)
            seconds = time.perf_counter() - t0
        if i >= WARMUP:
            samples.append(seconds)
    return statistics.median(samples)


def time_gemm(torch: Any, g: Gemm, device: str, timed: int) -> float:
    """Median seconds of ``torch.matmul`` on BF16 operands of ``g``'s shape."""
    a = torch.randn(g.m, g.k, device=device, dtype=torch.bfloat16)
    b = torch.randn(g.k, g.n, device=device, dtype=torch.bfloat16)
    return median_seconds(torch, lambda _: torch.matmul(a, b), device, timed)


def time_forward_backward(
    torch: Any, call: Callable[..., Any], inputs: list[Any], device: str, timed: int
) -> tuple[float, float]:
    """(forward, backward) median seconds of ``call(*inputs)``; the backward is timed on its
    own, after an untimed forward."""
    grad = torch.randn_like(call(*inputs))

    def forward() -> Any:
        for t in inputs:
            t.grad = None
        return call(*inputs)

    fwd = median_seconds(torch, lambda _: call(*inputs), device, timed)
    bwd = median_seconds(torch, lambda out: out.backward(grad), device, timed, prepare=forward)
    return fwd, bwd


def _qkv(torch: Any, a: Attention, device: str, layout: str, heads_kv: int) -> list[Any]:
    """Q, K, V of ``a`` in ``layout`` ("bhsd" or "bshd"), BF16, requiring gradients."""

    def tensor(heads: int) -> Any:
        shape = (
            (a.batch, heads, a.seq, a.head_dim)
            if layout == "bhsd"
            else (a.batch, a.seq, heads, a.head_dim)
        )
        return torch.randn(*shape, device=device, dtype=torch.bfloat16, requires_grad=True)

    return [tensor(a.heads), tensor(heads_kv), tensor(heads_kv)]


def time_torch_sdpa(torch: Any, a: Attention, device: str, timed: int) -> tuple[str, float, float]:
    """(backend, forward, backward) of PyTorch's causal ``scaled_dot_product_attention`` (K and
    V as many heads as Q: the kernel's FLOPs are the same) on its cuDNN backend where it has
    one on CUDA, else its flash backend; on the CPU, whatever PyTorch picks."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    inputs = _qkv(torch, a, device, "bhsd", a.heads)

    def call(q: Any, k: Any, v: Any) -> Any:
        return scaled_dot_product_attention(q, k, v, is_causal=True)

    if device != "cuda":
        return ("torch sdpa (cpu)", *time_forward_backward(torch, call, inputs, device, timed))
    for backend, name in (
        (getattr(SDPBackend, "CUDNN_ATTENTION", None), "torch sdpa cudnn"),
        (SDPBackend.FLASH_ATTENTION, "torch sdpa flash"),
    ):
        if backend is None:
            continue
        try:
            with sdpa_kernel(backend):
                return (name, *time_forward_backward(torch, call, inputs, device, timed))
        except RuntimeError:
            continue
    raise RuntimeError(
        "neither the cuDNN nor the flash backend of scaled_dot_product_attention runs"
    )


def time_te_attention(torch: Any, a: Attention, device: str, timed: int) -> tuple[float, float]:
    """(forward, backward) of Transformer Engine's ``DotProductAttention`` on ``a``."""
    from transformer_engine.pytorch import DotProductAttention

    options: dict[str, Any] = {"qkv_format": "bshd", "attn_mask_type": "causal"}
    if a.window is not None:
        options["window_size"] = a.window
    if a.softmax_type != "vanilla":
        options["softmax_type"] = a.softmax_type
    module = DotProductAttention(a.heads, a.head_dim, num_gqa_groups=a.groups, **options)
    module = module.to(device=device, dtype=torch.bfloat16)
    inputs = _qkv(torch, a, device, "bshd", a.groups)
    return time_forward_backward(torch, module, inputs, device, timed)


def _attention_shape(a: Attention) -> str:
    window = "" if a.window is None else f" window {a.window}"
    return (
        f"b{a.batch} h{a.heads}/{a.groups} s{a.seq} d{a.head_dim}{window} softmax {a.softmax_type}"
    )


def attention_rows(
    a: Attention,
    backend: str,
    measured: tuple[float, float] | None,
    curve: tuple[float, float],
    reason: str | None = None,
) -> list[Row]:
    """The forward and backward rows of one attention call (the backward's FLOPs as the curves
    count them: twice the forward's model FLOPs times
    :data:`~megatron.bridge.training.estimate.attention.BACKWARD_FLOPS_PER_MODEL_FLOP`, 2.5 x
    the forward's)."""
    shape = _attention_shape(a)
    fwd, bwd = measured or (None, None)
    return [
        Row("attention forward", a.label, backend, shape, a.forward_flops, fwd, curve[0], reason),
        Row(
            "attention backward",
            a.label,
            backend,
            shape,
            2 * BACKWARD_FLOPS_PER_MODEL_FLOP * a.forward_flops,
            bwd,
            curve[1],
            reason,
        ),
    ]


def quick(gemms: tuple[Gemm, ...], attention: tuple[Attention, ...]) -> tuple[tuple, tuple]:
    """Small shapes of the same kinds, for a run on the CPU."""
    small_gemms = tuple(
        replace(g, label=f"{g.label} (quick)", m=max(g.m // 16, 16), n=g.n // 16, k=g.k // 16)
        for g in gemms
    )
    small_attention = tuple(
        replace(a, label=f"{a.label} (quick)", batch=1, heads=a.heads // 8, groups=1, seq=256)
        for a in attention
    )
    return small_gemms, small_attention


def measure(gpu: GpuSpec, *, device: str, is_quick: bool, timed: int = TIMED) -> list[Row]:
    """Every kernel of :data:`GEMMS` and :data:`ATTENTION` (small ones with ``is_quick``)
    timed on ``device`` beside ``gpu``'s curves."""
    import torch

    gemms, attention = quick(GEMMS, ATTENTION) if is_quick else (GEMMS, ATTENTION)
    rows = []
    for g in gemms:
        rows.append(
            Row(
                "gemm bf16",
                g.label,
                "torch.matmul",
                f"{g.m} x {g.n} x {g.k}",
                2.0 * g.m * g.n * g.k,
                time_gemm(torch, g, device, timed),
                gemm_curve_seconds(gpu, g),
            )
        )
    te_missing = importlib.util.find_spec("transformer_engine") is None
    for a in attention:
        curve = attention_curve_seconds(gpu, a)
        if a.window is None and a.softmax_type == "vanilla":
            backend, fwd, bwd = time_torch_sdpa(torch, a, device, timed)
            rows += attention_rows(a, backend, (fwd, bwd), curve)
        if te_missing:
            reason = "Transformer Engine is not installed here (the 'te' extra)"
            rows += attention_rows(a, "te DotProductAttention", None, curve, reason)
            continue
        try:
            measured = time_te_attention(torch, a, device, timed)
        except (RuntimeError, TypeError, ValueError, AssertionError) as err:
            reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            rows += attention_rows(a, "te DotProductAttention", None, curve, reason)
        else:
            rows += attention_rows(a, "te DotProductAttention", measured, curve)
    return rows


def versions(device: str) -> dict[str, Any]:
    """The device and the software the timings ran on."""
    import torch

    found: dict[str, Any] = {"torch": torch.__version__, "device": device}
    if device == "cuda":
        found["device_name"] = torch.cuda.get_device_name()
        found["cuda"] = torch.version.cuda
        found["cudnn"] = torch.backends.cudnn.version()
    if importlib.util.find_spec("transformer_engine") is not None:
        import transformer_engine

        found["transformer_engine"] = getattr(transformer_engine, "__version__", "unknown")
    return found


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(rows: list[Row]) -> str:
    """The rows as a markdown table."""
    lines = [
        "| kernel | case | backend | shape | measured TFLOP/s | curve TFLOP/s | measured / curve |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        ratio = _cell(r.ratio, 2) if r.reason is None else f"not run: {r.reason}"
        lines.append(
            f"| {r.kernel} | {r.label} | {r.backend} | {r.shape} | "
            f"{_cell(r.measured_tflops, 0)} | {r.curve_tflops:.0f} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", help="the catalogue GPU whose curves to compare with")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="small shapes (a check run)")
    parser.add_argument("--out", type=Path, help="write the rows and versions as JSON here")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here: run on a GPU, or pass --device cpu --quick")
    name = args.gpu or (device_gpu(torch.cuda.get_device_name()) if args.device == "cuda" else None)
    if name is None:
        parser.error(f"name the GPU whose curves to compare with: --gpu one of {list(GPUS)}")
    gpu = gpu_spec(name)
    rows = measure(gpu, device=args.device, is_quick=args.quick)
    record = {
        "gpu": gpu.name,
        "versions": versions(args.device),
        "rows": [
            {
                **asdict(r),
                "measured_tflops": r.measured_tflops,
                "curve_tflops": r.curve_tflops,
                "ratio": r.ratio,
            }
            for r in rows
        ],
    }
    print(f"curves of {gpu.name}; {json.dumps(record['versions'])}")
    print(markdown(rows))
    if args.out is not None:
        args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


if __name__ == "__main__":
    main()
