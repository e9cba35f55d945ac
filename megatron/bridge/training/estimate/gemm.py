"""A dense layer's GEMMs by shape: tile and wave quantization and the roofline.

The achievable fraction (:mod:`.efficiency`) is what a large GEMM reaches. A layer's GEMMs are
M x N x K per rank, set by the micro-batch, the sequence, CP, TP and the model's widths, and a
small or oddly sized one reaches less:

- **tiles**: a GEMM runs as thread blocks over output tiles of :data:`TILE` rows x columns; a
  dimension that is not a multiple of the tile computes the padded tile anyway;
- **waves**: the tiles run in waves of one per SM (:attr:`GpuSpec.streaming_multiprocessors`);
  the last wave, part-filled, takes a whole wave's time. DeepGEMM's README works the example (M
  256, N 7168 with 128 x 128 blocks on 132 SMs: 112 SMs busy, "wave quantization");
- **roofline**: its operands and output at the HBM peak against its FLOPs at the achievable
  rate, added as :func:`~.kernels.gemm_roofline_efficiency` does for the grouped GEMMs.

:func:`layer_gemm_efficiency` is the FLOP-weighted efficiency of a transformer layer's dense
GEMMs (the attention's query-key-value and output projections, a dense MLP's fc1 and fc2, each
split over TP) against the same FLOPs of an unquantized, compute-bound GEMM; the step prices
those FLOPs at the fraction over it. The backward's dgrad and wgrad GEMMs take the forward's
share. Multi-latent attention's and DeepSeek-V4's projections, Mamba's and the routed experts'
(:mod:`.kernels`) are not shaped here.

Pure arithmetic: no torch.
"""

from __future__ import annotations

import math

from megatron.bridge.training.estimate.kernels import OPERAND_BYTES, gemm_roofline_efficiency
from megatron.bridge.training.hardware import GpuSpec
from megatron.bridge.training.job import JobDescription

__all__ = ["TILE", "gemm_efficiency", "layer_gemm_efficiency"]

TILE = (128, 128)
"""Rows x columns of one output tile: the 128 x 128 blocks of DeepGEMM's FP8 kernels (its
README's wave-quantization example) and of CUTLASS's Hopper warp-specialized GEMM
(``examples/48_hopper_warp_specialized_gemm``)."""


def gemm_efficiency(
    m: float,
    n: float,
    k: float,
    *,
    sms: int,
    flop_rate: float,
    hbm_bytes_per_s: float,
    operand_bytes: float,
) -> float:
    """Useful share of an M x N x K GEMM's time: its FLOPs over the padded tiles' in whole waves
    of ``sms`` at ``flop_rate`` plus the roofline's bytes (see the module docstring)."""
    if min(m, n, k) <= 0:
        return 1.0
    rows, cols = TILE
    tiles_m, tiles_n = math.ceil(m / rows), math.ceil(n / cols)
    padding = (m * n) / (tiles_m * rows * tiles_n * cols)
    tiles = tiles_m * tiles_n
    waves = tiles / sms if sms else 1.0
    wave = waves / math.ceil(waves) if sms else 1.0
    roofline = gemm_roofline_efficiency(
        m,
        int(k),
        int(n),
        flop_rate=flop_rate,
        hbm_bytes_per_s=hbm_bytes_per_s,
        operand_bytes=operand_bytes,
    )
    return padding * wave * roofline


def layer_gemm_efficiency(
    job: JobDescription, gpu: GpuSpec, *, flop_rate: float, tensor_cores: str
) -> float:
    """FLOP-weighted :func:`gemm_efficiency` of one transformer layer's dense GEMMs on one rank
    (1.0 where they are not shaped here, see the module docstring)."""
    model = job.model
    if model.multi_latent_attention or model.experimental_attention_variant is not None:
        return 1.0
    tp = job.tp_size
    h = model.hidden_size
    m = job.micro_batch_size * model.seq_length / job.cp_size
    q = model.num_attention_heads * model.head_dim
    kv = model.query_groups * model.head_dim
    shapes = [((q + 2 * kv) / tp, h), (h, q / tp)]
    if not model.moe:
        gated = 2 if model.gated_linear_unit else 1
        shapes += [(model.ffn_size * gated / tp, h), (h, model.ffn_size / tp)]
    flops = spent = 0.0
    for n, k in shapes:
        f = 2.0 * m * n * k
        flops += f
        spent += f / gemm_efficiency(
            m,
            n,
            k,
            sms=gpu.streaming_multiprocessors,
            flop_rate=flop_rate,
            hbm_bytes_per_s=gpu.hbm_gb_per_s * 1e9,
            operand_bytes=OPERAND_BYTES[tensor_cores],
        )
    return flops / spent
