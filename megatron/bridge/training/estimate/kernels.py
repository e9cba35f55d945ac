"""What the MoE and hybrid layers' own kernels and the loss cost beyond GEMMs at the fitted fraction.

The step estimate prices every GEMM at the achievable fraction of peak fitted on a dense model
(:mod:`.efficiency`) and every memory-bound kernel at the HBM peak. The MoE and hybrid layers'
own kernels run differently, each priced here by one named function:

- **grouped GEMMs** of the routed experts (:func:`grouped_gemm_efficiency`): an expert's GEMM
  is narrow (moe_ffn_hidden_size wide) and each expert sees only its share of the tokens, so its
  operands and output weigh more against its FLOPs than a dense layer's do. Each expert's rows
  are first padded to the grouped GEMM's row tile (:func:`padded_rows`). The roofline model
  (Williams, Waterman and Patterson, "Roofline: an insightful visual performance model",
  CACM 2009) gives the time: the FLOPs at the fitted rate plus the bytes at the HBM peak
  (:func:`gemm_roofline_efficiency`), added rather than overlapped, as a small GEMM's
  prologue and epilogue do not overlap its main loop.
- **the loss over the vocabulary** (:func:`cross_entropy_bytes_per_token`): megatron-core's
  vocab-parallel cross-entropy runs over the logits in fp32, memory-bound: its passes' bytes at
  the HBM peak, on the stage with the output layer and the one with the MTP heads.
- **the Mamba scan** (:func:`ssd_flops_per_token`, :func:`ssm_scan_rate`): megatron-core's
  MambaMixer runs the selective state space as the chunked SSD algorithm
  (``mamba_chunk_scan_combined``, chunks of 128 tokens), whose executed FLOPs are counted here
  from Dao and Gu, "Transformers are SSMs" (arXiv 2405.21060, section 6). Its Triton kernels
  reach a small share of the BF16 peak: one fitted constant per GPU generation
  (:data:`SSM_SCAN`), fitted on the named row of :data:`SSM_FIT_ROWS`.

The EP all-to-alls run at a measured share of link peak (:mod:`.comm`,
:data:`~.efficiency.ALLTOALL_ACHIEVED`).

Pure arithmetic: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from megatron.bridge.training.estimate.efficiency import FitRow
from megatron.bridge.training.hardware import GpuSpec
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.precisions import PRECISIONS

__all__ = [
    "GEMM_ROW_TILE",
    "SSM_FIT_ROWS",
    "SSM_SCAN",
    "SsmScan",
    "cross_entropy_bytes_per_token",
    "gemm_roofline_efficiency",
    "generation",
    "grouped_gemm_efficiency",
    "padded_rows",
    "quantization_row_alignment",
    "rows_per_expert",
    "ssd_flops_per_token",
    "ssm_scan_rate",
    "tensor_core_format",
]

GEMM_ROW_TILE = 128
"""Rows of one grouped-GEMM tile: each expert's rows are computed in tiles of 128. Source:
megatron-core ``fp4_utils.get_fp4_align_size`` (grouped kernels want the token dimension in
multiples of 128, "128 multiple will bring even faster"), the tile of CUTLASS's Hopper and
Blackwell grouped GEMMs."""

_OUTPUT_BYTES = 2
"""Bytes per element a GEMM writes (bf16 activations and gradients)."""

_OPERAND_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
"""Bytes per element a GEMM reads, by tensor-core format (scales not counted)."""


def generation(gpu: GpuSpec) -> str:
    """The GPU's generation by compute capability: hopper (SM90), blackwell (SM100 and newer),
    else ampere."""
    major = gpu.compute_capability[0]
    if major >= 10:
        return "blackwell"
    if major == 9:
        return "hopper"
    return "ampere"


# --- grouped GEMM --------------------------------------------------------------------------


def quantization_row_alignment(model: ModelDescription) -> int:
    """Rows each expert's input is padded to with moe_router_padding_for_quantization (0: none).

    megatron-core ``moe_utils.get_align_size_for_quantization``: FP8 16 rows, MXFP8 32
    (``fp8_utils.get_fp8_align_size``), FP4 ``fp4_utils.get_fp4_align_size``'s 128.
    """
    if not (model.moe_router_padding_for_quantization or model.moe_router_padding_for_fp8):
        return 0
    if model.fp8:
        return 32 if model.fp8_recipe == "mxfp8" else 16
    if model.fp4:
        return 128
    return 0


def padded_rows(rows: float, multiple: int) -> int:
    """``rows`` rounded up to a multiple of ``multiple`` (at least one row; 0 or 1: no rounding
    beyond whole rows)."""
    whole = max(1, math.ceil(rows))
    if multiple <= 1:
        return whole
    return math.ceil(whole / multiple) * multiple


def rows_per_expert(model: ModelDescription, *, tokens: float, ep_size: int) -> float:
    """Rows one local expert's GEMM takes per micro-batch under uniform routing.

    ``tokens``: the tokens one EP rank routes per micro-batch. The EP group's tokens, each
    copied to top-k experts, spread over the routed experts: tokens x EP x topk / experts.
    """
    experts = model.num_moe_experts or 0
    if experts == 0:
        return 0.0
    return tokens * ep_size * model.moe_router_topk / experts


def gemm_roofline_efficiency(
    rows: float, k: int, n: int, *, flop_rate: float, hbm_bytes_per_s: float, operand_bytes: float
) -> float:
    """Share of a (rows x k) by (k x n) GEMM's time spent on its FLOPs: the FLOPs at
    ``flop_rate`` over those plus its bytes (inputs and weights at ``operand_bytes`` per
    element, the bf16 output) at the HBM peak."""
    flops = 2.0 * rows * k * n
    nbytes = operand_bytes * (rows * k + k * n) + _OUTPUT_BYTES * rows * n
    compute = flops / flop_rate
    return compute / (compute + nbytes / hbm_bytes_per_s)


def grouped_gemm_efficiency(
    model: ModelDescription,
    *,
    rows: float,
    etp_size: int,
    flop_rate: float,
    hbm_bytes_per_s: float,
    tensor_cores: str,
) -> float:
    """Useful share of the routed experts' GEMM time against the same FLOPs at ``flop_rate``.

    One expert's fc1 ((rows x width) by (width x moe_ffn, doubled when gated)) and fc2, each
    ETP-split on its ffn side, with the rows padded to :data:`GEMM_ROW_TILE` (and to the
    quantization alignment, a divisor of it): the unpadded FLOPs over the padded GEMMs'
    roofline time. The backward's dgrad and wgrad GEMMs have the forward's shapes transposed
    and take the forward's share.
    """
    if rows <= 0:
        return 1.0
    width = model.moe_latent_size or model.hidden_size
    ffn = (model.moe_ffn_hidden_size or model.ffn_size) // max(1, etp_size)
    fc1_n = ffn * (2 if model.gated_linear_unit else 1)
    padded = padded_rows(rows, max(GEMM_ROW_TILE, quantization_row_alignment(model)))
    operand = _OPERAND_BYTES[tensor_cores]
    useful = 0.0
    spent = 0.0
    for k, n in ((width, fc1_n), (ffn, width)):
        flops = 2.0 * rows * k * n
        useful += flops / flop_rate
        padded_flops = 2.0 * padded * k * n
        eff = gemm_roofline_efficiency(
            padded,
            k,
            n,
            flop_rate=flop_rate,
            hbm_bytes_per_s=hbm_bytes_per_s,
            operand_bytes=operand,
        )
        spent += padded_flops / flop_rate / eff
    return useful / spent


def tensor_core_format(precision: str | None) -> str:
    """The tensor-core format a compute dtype's GEMMs run in (bf16 for None)."""
    return "bf16" if precision is None else PRECISIONS[precision].tensor_cores


# --- the loss ------------------------------------------------------------------------------

_CROSS_ENTROPY_PASSES = (
    ("the output layer writes the 16-bit logits", 2),
    ("cast to fp32: read 2, write 4", 6),
    ("max over the vocabulary: read", 4),
    ("subtract the max in place: read, write", 8),
    ("exp in place: read, write", 8),
    ("sum of the exponentials: read", 4),
    ("normalize in place (the saved softmax): read, write", 8),
    ("backward: softmax minus one-hot times the loss gradient: read, write", 8),
    ("cast the gradient to 16 bits: read 4, write 2", 6),
    ("the output layer's dgrad and wgrad GEMMs read it", 4),
)
"""Bytes per logit of each pass of megatron-core's ``VocabParallelCrossEntropy``
(tensor_parallel/cross_entropy.py: ``calculate_logits_max``, ``calculate_predicted_logits``,
``calculate_cross_entropy_loss``, ``calculate_gradients``)."""


def cross_entropy_bytes_per_token(padded_vocab: int, tp_size: int = 1) -> float:
    """HBM bytes one TP rank moves per token for one output head's loss: the passes of
    :data:`_CROSS_ENTROPY_PASSES` over its padded_vocab / TP logits (58 bytes per logit)."""
    return sum(b for _, b in _CROSS_ENTROPY_PASSES) * padded_vocab / tp_size


# --- Mamba scan ----------------------------------------------------------------------------


def ssd_flops_per_token(model: ModelDescription, *, chunk: int = 128) -> float:
    """Training FLOPs per token of one Mamba layer's chunked SSD scan, as the kernels run it.

    Dao and Gu, arXiv 2405.21060, section 6 (the SSD algorithm), with chunk length Q
    (megatron-core MambaMixer ``chunk_size=128``), state N, head dim P, H heads, G groups: per
    token, C B^T inside the chunk 2 Q N per group, the chunk states 2 N P per head, the states'
    contribution to the output 2 N P per head and the intra-chunk output 2 Q P per head. The
    backward runs twice the forward.
    """
    n, p, g = model.mamba_state_dim, model.mamba_head_dim, model.mamba_num_groups
    heads = model.mamba_num_heads or 2 * model.hidden_size // p
    forward = g * 2 * chunk * n + heads * (4 * n * p + 2 * chunk * p)
    return 3.0 * forward


@dataclass(frozen=True)
class SsmScan:
    """The share of the BF16 peak the SSD scan kernels reach on one GPU generation."""

    fraction: float
    """Share of the peak dense BF16 tensor-core FLOP/s."""
    source: str
    """How it was chosen."""


#: The rows the scan fractions are fitted on, one per GPU generation.
SSM_FIT_ROWS: Mapping[str, FitRow] = MappingProxyType(
    {
        "blackwell": FitRow(
            model="nemotron_3_nano",
            gpu="gb300",
            precision="fp8_mx",
            release="26.08",
            tokens_per_s_per_gpu=39936.0,
            source="Megatron-Bridge docs/performance-summary.md, 26.08, DGX-GB300, "
            "Nemotron_3_Nano MXFP8",
        ),
    }
)

#: Fitted by bisection (``benchmarks/predict_published.py --fit``) on :data:`SSM_FIT_ROWS`.
SSM_SCAN: Mapping[str, SsmScan] = MappingProxyType(
    {
        gen: SsmScan(fraction, f"fitted on {SSM_FIT_ROWS[gen].source}")
        for gen, fraction in {"blackwell": 0.0099}.items()
    }
)


def ssm_scan_rate(gpu: GpuSpec, *, fraction: float | None = None) -> tuple[float, str]:
    """(FLOP/s the SSD scan kernels run at on ``gpu``, its source): the generation's fitted
    share of the BF16 peak; a generation without a fitted row takes Blackwell's, and says so.
    ``fraction`` replaces the fitted share (the fit's bisection)."""
    gen = generation(gpu)
    if fraction is not None:
        return gpu.peak_bf16_tflops * 1e12 * fraction, "bisection"
    if gen in SSM_SCAN:
        found = SSM_SCAN[gen]
        return gpu.peak_bf16_tflops * 1e12 * found.fraction, found.source
    found = SSM_SCAN["blackwell"]
    return (
        gpu.peak_bf16_tflops * 1e12 * found.fraction,
        f"no fitted row for {gen}: the blackwell share ({found.source})",
    )
