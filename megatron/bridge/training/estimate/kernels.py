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

- **DeepSeek-V4's attention** (:func:`sparse_attention_rate`): its core attention (sliding
  window, compressed keys, the DSA indexer's scoring and top-k) runs in sparse-attention
  kernels, not in a dense flash-attention kernel: one fitted share of the BF16 peak per GPU
  generation (:data:`SPARSE_ATTENTION`), fitted on the named row of
  :data:`SPARSE_ATTENTION_FIT_ROWS`.
- **the routed experts outside the fused grouped MLP** (:func:`unfused_expert_bytes`): in
  FP8 or FP4 without Transformer Engine's fused grouped MLP the experts run as a multi-stream
  grouped GEMM with separate permutation, quantization, scaling-factor and activation kernels,
  launched from the host after the dispatcher's device-host synchronization. Their time beyond
  the priced GEMMs and memory-bound kernels grows with the routed token elements (top-k copies
  of the dispatched token): one fitted constant per GPU generation (:data:`UNFUSED_EXPERTS`),
  fitted on the named rows of :data:`UNFUSED_FIT_ROWS`.

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
from megatron.bridge.training.model_rules import fused_grouped_mlp
from megatron.bridge.training.precisions import PRECISIONS

__all__ = [
    "GEMM_ROW_TILE",
    "OPERAND_BYTES",
    "SPARSE_ATTENTION",
    "SPARSE_ATTENTION_FIT_ROWS",
    "SSM_FIT_ROWS",
    "SSM_SCAN",
    "UNFUSED_EXPERTS",
    "UNFUSED_FIT_ROWS",
    "FittedConstant",
    "cross_entropy_bytes_per_token",
    "fused_expert_kernel",
    "gemm_roofline_efficiency",
    "generation",
    "grouped_gemm_efficiency",
    "padded_rows",
    "quantization_row_alignment",
    "routed_elements_per_token",
    "rows_per_expert",
    "sparse_attention_rate",
    "ssd_flops_per_token",
    "ssm_scan_rate",
    "tensor_core_format",
    "unfused_expert_bytes",
]

GEMM_ROW_TILE = 128
"""Rows of one grouped-GEMM tile: each expert's rows are computed in tiles of 128. Source:
megatron-core ``fp4_utils.get_fp4_align_size`` (grouped kernels want the token dimension in
multiples of 128, "128 multiple will bring even faster"), the tile of CUTLASS's Hopper and
Blackwell grouped GEMMs."""

_OUTPUT_BYTES = 2
"""Bytes per element a GEMM writes (bf16 activations and gradients)."""

OPERAND_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
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
    operand = OPERAND_BYTES[tensor_cores]
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
class FittedConstant:
    """One kernel class's constant on one GPU generation, and where it comes from."""

    value: float
    """The constant (its unit is the kernel class's: a share of a peak, bytes per element)."""
    source: str
    """How it was chosen."""


def _fitted(
    values: Mapping[str, float], rows: Mapping[str, FitRow]
) -> Mapping[str, FittedConstant]:
    """Each generation's fitted ``values`` with the row it was fitted on as its source."""
    return MappingProxyType(
        {
            gen: FittedConstant(value, f"fitted on {rows[gen].source}")
            for gen, value in values.items()
        }
    )


def _by_generation(
    table: Mapping[str, FittedConstant], gpu: GpuSpec, *, fallback: str, override: float | None
) -> tuple[float, str]:
    """(constant, source) of ``gpu``'s generation in ``table``: ``override`` when given (the
    fit's bisection), else the generation's, else the ``fallback`` generation's, saying so."""
    if override is not None:
        return override, "bisection"
    gen = generation(gpu)
    if gen in table:
        return table[gen].value, table[gen].source
    found = table[fallback]
    return found.value, f"no fitted row for {gen}: the {fallback} figure ({found.source})"


_CURRENT_RELEASE = "26.08"
"""The release Megatron-Bridge's ``docs/performance-summary.md`` publishes; the rows of every
earlier release are in ``docs/performance-summary-archive.md``."""


def _published_row(
    model: str, gpu: str, precision: str, release: str, tokens: float, label: str
) -> FitRow:
    """The row of ``release`` on the DGX system of ``gpu`` that Megatron-Bridge's docs list as
    ``label``: ``model`` in ``precision`` at ``tokens`` tokens/s/GPU."""
    page = "performance-summary" if release == _CURRENT_RELEASE else "performance-summary-archive"
    return FitRow(
        model=model,
        gpu=gpu,
        precision=precision,
        release=release,
        tokens_per_s_per_gpu=tokens,
        source=f"Megatron-Bridge docs/{page}.md, {release}, DGX-{gpu.upper()}, {label}",
    )


#: The rows the scan fractions are fitted on, one per GPU generation.
SSM_FIT_ROWS: Mapping[str, FitRow] = MappingProxyType(
    {
        "blackwell": _published_row(
            "nemotron_3_nano", "gb300", "fp8_mx", "26.08", 39936.0, "Nemotron_3_Nano MXFP8"
        ),
    }
)

#: The SSD scan kernels' share of the peak dense BF16 tensor-core FLOP/s, fitted by bisection
#: (``benchmarks/predict_published.py --fit``) on :data:`SSM_FIT_ROWS`.
SSM_SCAN: Mapping[str, FittedConstant] = _fitted({"blackwell": 0.0228}, SSM_FIT_ROWS)


def ssm_scan_rate(gpu: GpuSpec, *, fraction: float | None = None) -> tuple[float, str]:
    """(FLOP/s the SSD scan kernels run at on ``gpu``, its source): the generation's fitted
    share of the BF16 peak; a generation without a fitted row takes Blackwell's, and says so.
    ``fraction`` replaces the fitted share (the fit's bisection)."""
    return _bf16_share_rate(SSM_SCAN, gpu, fraction)


def _bf16_share_rate(
    table: Mapping[str, FittedConstant], gpu: GpuSpec, fraction: float | None
) -> tuple[float, str]:
    """(FLOP/s at the generation's fitted share of ``gpu``'s BF16 peak in ``table``, its
    source); a generation without a fitted row takes Blackwell's, and says so."""
    share, source = _by_generation(table, gpu, fallback="blackwell", override=fraction)
    return gpu.peak_bf16_tflops * 1e12 * share, source


# --- DeepSeek-V4's sparse attention ----------------------------------------------------------
#
# A dsv4_hybrid layer's core attention does not run in the dense flash-attention kernel the
# achievable fraction is fitted on. Megatron-LM's ``csa_utils/fused_sparse_attention.py`` (dev
# branch) runs it in FlashMLA's sparse forward kernel and cuDNN frontend's DeepSeek sparse
# attention (a CuTe DSL backward, the indexer's score kernels and a radix top-k); under the
# recipes' dsa_indexer_use_sparse_loss the indexer's loss is fused with the attention and shares
# its backward (``fused_csa_indexer_sparse_attn``). Each query attends to keys of its own (its
# window, every 128-fold compressed key, or the indexer's top-k of the 4-fold compressed keys),
# gathered by index; the top-k and the indexer's loss are work upstream's ``transformer_flops``
# does not count. No benchmark of that training path is published: the FLOPs upstream counts
# for it (:meth:`~.model_cost.ModelCost.core_attention_flops_per_token`) run at one fitted share
# of the BF16 peak per GPU generation, fitted on the named row of
# :data:`SPARSE_ATTENTION_FIT_ROWS`, as the Mamba scan's are. DeepSeek-V4 Flash is the only
# model with published rows that runs these kernels, on one generation, so its other row is the
# only measured one.

#: The rows the sparse-attention shares are fitted on, one per GPU generation.
SPARSE_ATTENTION_FIT_ROWS: Mapping[str, FitRow] = MappingProxyType(
    {
        "blackwell": _published_row(
            "deepseek_v4_flash", "gb200", "fp8_mx", "26.08", 7776.0, "DeepSeekV4 Flash MXFP8"
        ),
    }
)

#: DeepSeek-V4's attention kernels' share of the peak dense BF16 tensor-core FLOP/s, fitted by
#: bisection (``benchmarks/predict_published.py --fit``) on :data:`SPARSE_ATTENTION_FIT_ROWS`.
SPARSE_ATTENTION: Mapping[str, FittedConstant] = _fitted(
    {"blackwell": 0.0546}, SPARSE_ATTENTION_FIT_ROWS
)


def sparse_attention_rate(gpu: GpuSpec, *, fraction: float | None = None) -> tuple[float, str]:
    """(FLOP/s DeepSeek-V4's attention kernels run at on ``gpu``, its source): the generation's
    fitted share of the BF16 peak; a generation without a fitted row takes Blackwell's, and says
    so. ``fraction`` replaces the fitted share (the fit's bisection)."""
    return _bf16_share_rate(SPARSE_ATTENTION, gpu, fraction)


# --- the routed experts outside the fused grouped MLP ----------------------------------------
#
# Where the routed experts do not run Transformer Engine's fused grouped MLP (megatron-core's
# TEGroupedMLP under use_transformer_engine_op_fuser, the cuteDSL kernel), each MoE layer runs
# them as TE's GroupedLinear (a multi-stream cuBLAS grouped GEMM) between separate permutation,
# MXFP8 quantization, scaling-factor swizzle and activation kernels, many of them small and
# launched from the host after the dispatcher's device-host synchronization of the tokens per
# expert, which keeps that part out of CUDA graphs. Megatron-LM's "Optimizing DeepSeek-V3
# Training Performance on NVIDIA GB200 NVL72" (docs/discussions/deepseek-v3-gb200-optimization,
# sections 2.1 to 2.3 and 3.1) measures these kernels and the host overhead of the routed
# experts step by step; Megatron-LM PR 5728 measures the fused path against it on the same
# layouts (Qwen3-30B-A3B on 8 GB200, MXFP8: 480.3 TFLOP/s/GPU with partial CUDA graphs, 598.1
# with the fused grouped MLP, paged stash and full-iteration graphs), and the release tables show
# the same step on unchanged layouts (Qwen3-30B-A3B GB200 MXFP8: 26,112 tokens/s/GPU in 26.04.01,
# 40,706 in 26.06, the first release whose configuration turns the fused MLP on).
#
# It is the FP8/FP4 path's: the quantization, scaling-factor and swizzle kernels are most of the
# kernels it adds (the guide's sections 2.1.2 and 2.1.3), and a BF16 run of the unfused path
# leaves the GPU busy: Megatron-Bridge PR 5094's Nsight capture (Qwen3-30B-A3B, 16 x H100, BF16,
# HybridEP) has the GPU idle 1.9 s of a 24.7 s step, and its compute kernels take 14.6 s, under
# this estimate's compute. So BF16 experts carry no such term.
#
# What that path adds beyond the GEMMs and memory-bound kernels the estimate prices grows with
# the routed token elements, the top-k copies of each dispatched token's width, not with the
# GEMMs' FLOPs: on the rows of the last release without the fused MLP (26.04.01) it is 1.0 to
# 1.6 x 10^-5 us per routed element per MoE layer across Qwen3-30B-A3B, Qwen3-235B-A22B,
# DeepSeek-V3 and Kimi-K2 on GB200 and GB300, whose expert widths and counts differ. It is priced
# as that many elements times a fitted number of bytes at the HBM peak, forward and backward
# together: one constant per GPU generation, fitted on the named row of a MoE model with neither
# Mamba layers nor MLA whose 26.04.01 rows cover both generations (:data:`UNFUSED_FIT_ROWS`).


def fused_expert_kernel(model: ModelDescription, gpu: GpuSpec) -> bool:
    """Whether the routed experts run Transformer Engine's fused grouped MLP kernel: the op
    fuser on grouped-GEMM experts (:func:`~megatron.bridge.training.model_rules.fused_grouped_mlp`),
    an MXFP8 or NVFP4 recipe, and a Blackwell GPU. Transformer Engine's ``fuse_grouped_mlp_ops``
    (``pytorch/ops/fused``) fuses the experts' fc1, activation and fc2 only under an MXFP8 or
    NVFP4 recipe and where the fused op's ``is_supported()`` holds, its CuTe DSL kernels being
    SM100 ones; elsewhere the op fuser runs the same operations unfused."""
    block_scaled = (model.fp8 is not None and model.fp8_recipe == "mxfp8") or (
        model.fp4 is not None and model.fp4_recipe == "nvfp4"
    )
    return fused_grouped_mlp(model) and block_scaled and generation(gpu) == "blackwell"


def routed_elements_per_token(model: ModelDescription) -> int:
    """Routed token elements one MoE layer handles per token: top-k copies of the token as the
    experts take it (moe_latent_size wide with a latent, else hidden_size)."""
    if not model.num_moe_experts:
        return 0
    return model.moe_router_topk * (model.moe_latent_size or model.hidden_size)


#: The rows the unfused-expert constants are fitted on, one per GPU generation: Qwen3-30B-A3B
#: (48 MoE layers, no Mamba, no MLA) in 26.04.01, the last release whose runs all had the
#: unfused experts, on the systems the release table publishes for both generations.
UNFUSED_FIT_ROWS: Mapping[str, FitRow] = MappingProxyType(
    {
        "blackwell": _published_row(
            "qwen3_30b_a3b", "gb200", "fp8_mx", "26.04.01", 26112.0, "Qwen3_30B_a3B MXFP8"
        ),
        "hopper": _published_row(
            "qwen3_30b_a3b", "h100", "fp8_cs", "26.04.01", 8960.0, "Qwen3_30B_a3B FP8"
        ),
    }
)

#: Bytes at the HBM peak per routed token element per MoE layer, forward and backward, fitted by
#: bisection (``benchmarks/predict_published.py --fit``) on :data:`UNFUSED_FIT_ROWS`.
UNFUSED_EXPERTS: Mapping[str, FittedConstant] = _fitted(
    {"blackwell": 105.8, "hopper": 154.7}, UNFUSED_FIT_ROWS
)


def unfused_expert_bytes(
    gpu: GpuSpec, *, bytes_per_element: float | None = None
) -> tuple[float, str]:
    """(bytes per routed token element the unfused experts add on ``gpu``, its source): the
    generation's fitted figure; a generation without a fitted row takes Hopper's, and says so.
    ``bytes_per_element`` replaces the fitted figure (the fit's bisection)."""
    return _by_generation(UNFUSED_EXPERTS, gpu, fallback="hopper", override=bytes_per_element)
