"""One GPU of a pipeline stage's compute per step, before communication and the schedule.

:func:`stage_compute` prices a stage's executed FLOPs (model FLOPs plus recomputed forwards) at
the achievable fraction of each part's peak (:func:`_seconds_per_flop`: the GEMMs at the compute
dtype's, core attention, the Mamba scans, the output heads and the unquantized linear layers at
theirs), its memory-bound kernels' bytes at the HBM peak, and the MoE and hybrid kernels' terms
beyond their FLOPs (:func:`kernel_seconds`, from the formulas and fitted constants of
:mod:`.kernels`, which :class:`KernelFits` can replace). The step estimate and the search's
throughput bound both price a stage through it.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron.bridge.training.estimate.attention import a2a_share, attention_seconds
from megatron.bridge.training.estimate.gemm import layer_gemm_efficiency
from megatron.bridge.training.estimate.kernels import (
    cross_entropy_bytes_per_token,
    fused_expert_kernel,
    generation,
    grouped_gemm_efficiency,
    routed_elements_per_token,
    rows_per_expert,
    sparse_attention_rate,
    ssd_flops_per_token,
    ssm_scan_rate,
    tensor_core_format,
    unfused_expert_bytes,
)
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.stage import Stage, mtp_rank
from megatron.bridge.training.hardware import GpuSpec
from megatron.bridge.training.job import JobDescription

__all__ = [
    "FITTED_KERNELS",
    "KernelFits",
    "KernelSeconds",
    "StageCompute",
    "kernel_seconds",
    "stage_compute",
]


@dataclass(frozen=True)
class KernelFits:
    """Figures that replace :mod:`.kernels`' fitted constants (the fit's bisection,
    ``benchmarks/predict_published.py --fit``); each None keeps the fitted figure."""

    ssm_scan_fraction: float | None = None
    """Share of the BF16 peak the Mamba scan kernels run at (:func:`~.kernels.ssm_scan_rate`)."""
    unfused_bytes: float | None = None
    """Bytes per routed token element of the experts outside the fused grouped MLP
    (:func:`~.kernels.unfused_expert_bytes`)."""
    sparse_attention_fraction: float | None = None
    """Share of the BF16 peak DeepSeek-V4's attention kernels run at
    (:func:`~.kernels.sparse_attention_rate`)."""


FITTED_KERNELS = KernelFits()
"""Every kernel constant as fitted."""


@dataclass(frozen=True)
class StageCompute:
    """One GPU of a stage's compute per step, as :func:`estimate_step` prices it before
    communication and the schedule (:func:`stage_compute`)."""

    seconds_per_flop: float
    """Seconds per executed FLOP at peak (:func:`_seconds_per_flop`)."""
    mixer_share: float
    """Share of the FLOPs' time in the token mixers (core attention included)."""
    core_share: float
    """Share of the FLOPs' time in core attention."""
    model_flops: float
    """The stage's model FLOPs on this GPU."""
    executed: float
    """Model FLOPs plus the recomputed forwards'."""
    memory_forward: float
    """Seconds of the forward's memory-bound kernels at the HBM peak."""
    memory: float
    """Seconds of every memory-bound kernel at the HBM peak (recompute included)."""
    kernels: KernelSeconds
    """The kernel terms (:func:`kernel_seconds`)."""
    fraction: float
    """The achievable fraction of peak the GEMMs run at."""
    flops_forward: float = 0.0
    """Seconds of the forward's FLOPs: GEMMs at the achievable fraction, core attention at its
    kernel's curve (:mod:`.attention`)."""
    flops_backward: float = 0.0
    """Seconds of the backward's FLOPs and the recomputed forwards'."""
    attention: float = 0.0
    """Of the FLOPs' seconds, core attention's at its kernel's curve (0: priced with the GEMMs)."""

    @property
    def flop_seconds(self) -> float:
        """The executed FLOPs' seconds."""
        return self.flops_forward + self.flops_backward

    @property
    def forward(self) -> float:
        """The forward passes' seconds: FLOPs, memory-bound kernels and kernel terms."""
        return self.flops_forward + self.memory_forward + self.kernels.forward

    @property
    def backward(self) -> float:
        """The backward passes' seconds, recompute included."""
        return self.flops_backward + self.memory - self.memory_forward + self.kernels.backward

    @property
    def seconds(self) -> float:
        """The executed FLOPs at their rates, the memory-bound kernels and the kernel terms."""
        return self.forward + self.backward


def stage_compute(
    job: JobDescription,
    gpu: GpuSpec,
    dims: ModelCost,
    stage: Stage,
    *,
    tokens: float,
    fraction: float,
    fits: KernelFits = FITTED_KERNELS,
) -> StageCompute:
    """One GPU of ``stage``'s compute per step for ``tokens`` tokens of its DP rank (split over
    TP and CP here): its executed FLOPs at the achievable ``fraction`` of peak, core attention at
    its kernel's measured curve for the keys its calls see (:func:`~.attention.attention_seconds`;
    DeepSeek-V4's sparse attention with the GEMMs, its kernels being :mod:`.kernels`' term), its
    memory-bound bytes at the HBM peak and its kernel terms (``fits`` replaces the kernels'
    fitted constants). A recomputed forward runs at the rate of what it recomputes: its core
    attention (full recompute's, or selective ``core_attn``) at the attention forward's, the
    rest (GEMMs, full recompute's other FLOPs) at the mean rate of the forward's other FLOPs. A
    stage without layers or output heads (a layout's embedding-only stage) computes nothing
    priced: all zero."""
    if not stage.flops_per_token:
        return StageCompute(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, KernelSeconds(), fraction)
    peak = _seconds_per_flop(job, gpu, dims, stage)
    split = job.tp_size * job.cp_size  # a micro-batch's work over TP, its tokens over CP
    model_flops = tokens * stage.flops_per_token / split
    executed = model_flops + tokens * stage.recompute_flops_per_token / split
    core_model = model_flops * peak.core
    # The FLOPs other than core attention at the achievable fraction of their peaks, the dense
    # layers' GEMMs slower by their shape (:mod:`.gemm`).
    rest = model_flops * (peak.per_flop - peak.core_per_flop) / fraction
    gemm_peak = gpu.peak_tflops(job.compute_dtype) * 1e12
    shaped = _shaped_gemm_flops(job, dims, stage) * tokens / split
    if shaped:
        efficiency = layer_gemm_efficiency(
            job,
            gpu,
            flop_rate=gemm_peak * fraction,
            tensor_cores=tensor_core_format(job.compute_dtype),
        )
        rest += shaped / (gemm_peak * fraction) * (1 / efficiency - 1)
    if dims.dsv4_hybrid or core_model <= 0:
        attention_fwd = model_flops * peak.core_per_flop / fraction / 3
        attention_bwd = 2 * attention_fwd
        curve = False
    else:
        attention_fwd = attention_bwd = 0.0
        core_peak = _core_peak(job, gpu)
        by_keys = dims.core_attention_by_keys()
        total = sum(by_keys.values())
        a2a = a2a_share(job.model)
        for keys, flops in by_keys.items():
            f, b = attention_seconds(
                core_model * flops / total,
                keys=keys,
                cp_size=job.cp_size,
                head_dim=_attention_head_dim(job.model),
                gpu_generation=generation(gpu),
                peak=core_peak,
                a2a=a2a,
            )
            attention_fwd += f
            attention_bwd += b
        curve = True
    forward = rest / 3 + attention_fwd
    recomputed = executed - model_flops
    # Core attention's forward is a third of its model FLOPs (core_model).
    core_recomputed = min(recomputed, core_model / 3 * stage.core_attention_recomputed)
    core_recompute = core_recomputed * attention_fwd / (core_model / 3) if core_model > 0 else 0.0
    other_model = model_flops - core_model
    other_recompute = (
        (recomputed - core_recomputed) * (rest / 3) / (other_model / 3) if other_model > 0 else 0.0
    )
    flops_forward = forward
    flops_backward = rest * 2 / 3 + attention_bwd + core_recompute + other_recompute
    flop_time = flops_forward + flops_backward
    core_time = attention_fwd + attention_bwd + core_recompute
    mixers = model_flops * peak.mixers_per_flop / fraction * executed / model_flops
    # The stage's memory-bound bytes are per TP rank already: the tokens split over CP.
    memory_forward, memory = _memory_seconds(gpu, stage, tokens / job.cp_size)
    kernels = kernel_seconds(
        job,
        gpu,
        dims,
        stage,
        tokens=tokens / split,
        fraction=fraction,
        fits=fits,
    )
    return StageCompute(
        peak.per_flop,
        min(1.0, (mixers + core_time) / flop_time),
        min(1.0, core_time / flop_time),
        model_flops,
        executed,
        memory_forward,
        memory,
        kernels,
        fraction,
        flops_forward,
        flops_backward,
        core_time if curve else 0.0,
    )


@dataclass(frozen=True)
class KernelSeconds:
    """Seconds per step the MoE and hybrid kernels add on one GPU of the stage (:mod:`.kernels`)."""

    grouped_gemm: float = 0.0
    """The routed experts' grouped GEMMs beyond their FLOPs at the achievable rate."""
    grouped_gemm_efficiency: float = 1.0
    """Useful share of the grouped GEMMs' time."""
    ssm_scan: float = 0.0
    """The Mamba layers' SSD scan kernels beyond the scan FLOPs the compute already counts."""
    ssm_source: str = ""
    """Where the scan's rate comes from (empty without Mamba layers)."""
    loss: float = 0.0
    """The cross-entropy over the vocabulary of the output heads on the stage."""
    unfused_experts: float = 0.0
    """The routed experts' path outside the fused grouped MLP (:mod:`.kernels`)."""
    unfused_source: str = ""
    """Where its bytes per routed element come from (empty when the experts run fused)."""
    sparse_attention: float = 0.0
    """DeepSeek-V4's attention kernels beyond the core-attention FLOPs the compute already
    counts."""
    sparse_source: str = ""
    """Where their rate comes from (empty without DeepSeek-V4 attention)."""
    forward_share: float = 1 / 3
    """Share of the added time in the forward passes."""

    @property
    def total(self) -> float:
        return (
            self.grouped_gemm
            + self.ssm_scan
            + self.loss
            + self.unfused_experts
            + self.sparse_attention
        )

    @property
    def forward(self) -> float:
        return self.total * self.forward_share

    @property
    def backward(self) -> float:
        return self.total - self.forward


def kernel_seconds(
    job: JobDescription,
    gpu: GpuSpec,
    dims: ModelCost,
    stage: Stage,
    *,
    tokens: float,
    fraction: float,
    fits: KernelFits = FITTED_KERNELS,
) -> KernelSeconds:
    """What the stage's grouped GEMMs, unfused experts, Mamba scans, DeepSeek-V4 attention and
    loss cost beyond their FLOPs at the fitted rate, for ``tokens`` tokens on one GPU (already
    split over TP and CP).

    Grouped GEMMs: the routed experts' executed FLOPs (their recomputed forward included) at
    the GEMM rate, times 1 / :func:`~.kernels.grouped_gemm_efficiency` - 1, the rows per expert
    of one micro-batch under uniform routing (:func:`~.kernels.rows_per_expert`; benchmarks
    force-balance the routing). Mamba: the SSD kernels' executed FLOPs
    (:func:`~.kernels.ssd_flops_per_token`) at the generation's scan rate, less the scan FLOPs
    the compute already prices. DeepSeek-V4's attention: the decoder layers' core-attention FLOPs
    at the generation's sparse-attention rate (:func:`~.kernels.sparse_attention_rate`), less
    the same FLOPs at the rate the compute prices core attention at. The loss: each output head
    on the stage (the main one on the last, the MTP heads where they are built) moves
    :func:`~.kernels.cross_entropy_bytes_per_token` at the HBM peak. The routed experts in FP8
    or FP4 outside Transformer Engine's fused grouped MLP kernel
    (:func:`~.kernels.fused_expert_kernel` false): the stage's MoE layers' routed token
    elements (:func:`~.kernels.routed_elements_per_token`) times the generation's fitted bytes
    (:func:`~.kernels.unfused_expert_bytes`) at the HBM peak. The forward takes a third, as the
    FLOPs do. ``fits`` replaces the fitted scan and sparse-attention shares and the unfused
    experts' bytes.
    """
    m = job.model
    gemm_rate = gpu.peak_tflops(job.compute_dtype) * 1e12 * fraction
    grouped = 0.0
    efficiency = 1.0
    if stage.moe_layers and m.moe:
        routed = dims.moe_mlp_flops_per_token() - dims.shared_expert_flops_per_token()
        executed = routed * (1 + stage.moe_forward_recomputed / 3) * stage.moe_layers * tokens
        local = (
            stage.micro_batch_size
            * m.seq_length
            / (job.cp_size * (job.tp_size if job.sequence_parallel else 1))
        )
        efficiency = grouped_gemm_efficiency(
            m,
            rows=rows_per_expert(m, tokens=local, ep_size=job.ep_size),
            etp_size=job.etp_size,
            flop_rate=gemm_rate,
            hbm_bytes_per_s=gpu.hbm_gb_per_s * 1e9,
            tensor_cores=tensor_core_format(job.compute_dtype),
        )
        grouped = executed / gemm_rate * (1 / efficiency - 1)
    scan = 0.0
    source = ""
    mamba = dims.num_mamba_layers
    if mamba:
        scan_rate, source = ssm_scan_rate(gpu, fraction=fits.ssm_scan_fraction)
        layers = stage.layers * mamba / m.num_layers
        counted_rate = min(gemm_rate / fraction, gpu.peak_bf16_tflops * 1e12) * fraction
        counted = stage.layers * dims.scan_flops_per_token() * tokens / counted_rate
        scan = max(0.0, layers * ssd_flops_per_token(m) * tokens / scan_rate - counted)
    sparse = 0.0
    sparse_source = ""
    if dims.dsv4_hybrid and stage.layers:
        sparse_rate, sparse_source = sparse_attention_rate(
            gpu, fraction=fits.sparse_attention_fraction
        )
        core = stage.layers * dims.core_attention_flops_per_token() * tokens
        counted = core / (_core_peak(job, gpu) * fraction)
        sparse = max(0.0, core / sparse_rate - counted)
    heads = (1 if stage.last else 0) + (dims.mtp_layers if stage.rank == mtp_rank(job) else 0)
    # Each head's loss runs over its padded_vocab / TP logits of the tokens on this CP rank.
    loss = (
        heads
        * tokens
        * job.tp_size
        * cross_entropy_bytes_per_token(dims.padded_vocab(job.tp_size), job.tp_size)
        / (gpu.hbm_gb_per_s * 1e9)
    )
    unfused = 0.0
    unfused_source = ""
    quantized = tensor_core_format(job.compute_dtype) != "bf16"
    if stage.moe_layers and m.moe and quantized and not fused_expert_kernel(m, gpu):
        per_element, unfused_source = unfused_expert_bytes(
            gpu, bytes_per_element=fits.unfused_bytes
        )
        elements = routed_elements_per_token(m) * stage.moe_layers * tokens
        unfused = elements * per_element / (gpu.hbm_gb_per_s * 1e9)
    return KernelSeconds(
        grouped,
        efficiency,
        scan,
        source,
        loss,
        unfused,
        unfused_source,
        sparse,
        sparse_source,
    )


def _shaped_gemm_flops(job: JobDescription, dims: ModelCost, stage: Stage) -> float:
    """Model FLOPs per token of the stage's dense-layer GEMMs :mod:`.gemm` shapes: the attention
    projections of its layers and the dense MLPs of its non-MoE layers (0 for a hybrid layer
    pattern, whose layers it does not shape)."""
    if job.model.hybrid_layer_pattern is not None or not stage.layers:
        return 0.0
    projections = dims.attention_flops_per_token() - dims.core_attention_flops_per_token()
    dense = dims.dense_mlp_flops_per_token() * (stage.layers - stage.moe_layers)
    return stage.layers * projections + dense


def _attention_head_dim(model) -> int:
    """The head dimension core attention's kernel runs at: MLA's query-key width
    (qk_head_dim + qk_pos_emb_head_dim), else the heads' dimension."""
    if model.multi_latent_attention:
        return model.qk_head_dim + model.qk_pos_emb_head_dim
    return model.head_dim


def _memory_seconds(gpu: GpuSpec, stage: Stage, tokens: float) -> tuple[float, float]:
    """(forward, forward + backward + recompute) seconds of the stage's memory-bound kernels for
    ``tokens`` tokens on one GPU, their bytes over the GPU's peak HBM bandwidth.

    A lower bound of its own, at the HBM peak: the achievable fraction of the tensor-core peak
    does not apply to it. The forward is a third of the layers' bytes; recompute runs in the
    backward.
    """
    bandwidth = gpu.hbm_gb_per_s * 1e9
    forward = tokens * stage.elementwise_bytes_per_token / 3 / bandwidth
    total = (
        tokens
        * (stage.elementwise_bytes_per_token + stage.recompute_elementwise_bytes_per_token)
        / bandwidth
    )
    return forward, total


def _core_peak(job: JobDescription, gpu: GpuSpec) -> float:
    """FLOP/s at peak of core attention (:func:`_seconds_per_flop`): the 16-bit peak, or the FP8
    peak with ``fp8_dot_product_attention``, never above the GEMMs'."""
    attention_dtype = "fp8_cs" if job.model.fp8_dot_product_attention else "bf16"
    gemm = gpu.peak_tflops(job.compute_dtype) * 1e12
    return min(gemm, gpu.peak_tflops(attention_dtype) * 1e12)


def _seconds_per_flop(
    job: JobDescription, gpu: GpuSpec, dims: ModelCost, stage: Stage
) -> _PeakTime:
    """Seconds per executed FLOP at peak, and its parts in core attention and in the other
    token mixers (attention, or a hybrid model's mixers).

    The GEMMs run at the peak of the compute dtype's tensor cores. Core attention runs at the
    16-bit peak, or at the FP8 peak (never above the GEMMs') with ``fp8_dot_product_attention``:
    megatron-core quantizes the linear layers through TE's FP8/FP4 recipes, and core attention
    only with ``TransformerConfig.fp8_dot_product_attention``. The output heads (the logits of
    the main head on the last stage, of the MTP heads where they are built) run at the 16-bit
    peak: megatron-core's ``GPTModel`` builds its output layer as
    ``tensor_parallel.ColumnParallelLinear``, outside TE's recipes, unless ``fp8_output_proj``
    under MXFP8 (``fp8_utils.is_mxfp8_output_proj_active``), which a job here does not set. A
    hybrid model's Mamba scans run in the SSM kernels, unquantized: at the 16-bit peak. So do
    the linear layers megatron-core runs outside the FP8/FP4 recipe
    (``Stage.bf16_gemm_flops_per_token``: the decoder layers ``first_last_layers_bf16`` keeps
    out, and DeepSeek-V4's unquantized projections).
    """
    gemm = gpu.peak_tflops(job.compute_dtype) * 1e12
    sixteen_bit = min(gemm, gpu.peak_tflops("bf16") * 1e12)
    core_peak = _core_peak(job, gpu)
    # Shares of the stage's model FLOPs: core attention and the scans are parts of the mixers'.
    core = min(1.0, stage.layers * dims.core_attention_flops_per_token() / stage.flops_per_token)
    scan = min(1.0 - core, stage.layers * dims.scan_flops_per_token() / stage.flops_per_token)
    heads = float(stage.last) + (dims.mtp_layers if stage.rank == mtp_rank(job) else 0)
    head = min(
        1.0 - core - scan, heads * dims.logit_flops_per_token(job.tp_size) / stage.flops_per_token
    )
    bf16 = min(1.0 - core - scan - head, stage.bf16_gemm_flops_per_token / stage.flops_per_token)
    mixers = min(
        1.0,
        max(stage.layers * dims.attention_flops_per_token() / stage.flops_per_token, core + scan),
    )
    per_flop = (
        (1 - core - scan - head - bf16) / gemm
        + core / core_peak
        + (scan + head + bf16) / sixteen_bit
    )
    mixer_time = (mixers - core - scan) / gemm + scan / sixteen_bit
    return _PeakTime(per_flop, core, core / core_peak, mixer_time)


@dataclass(frozen=True)
class _PeakTime:
    """Seconds per executed FLOP of a stage at peak (:func:`_seconds_per_flop`), with the part
    of it in core attention and in the rest of the token mixers."""

    per_flop: float
    """Seconds per FLOP at peak, every part."""
    core: float
    """Share of the FLOPs in core attention."""
    core_per_flop: float
    """Of :attr:`per_flop`, core attention's."""
    mixers_per_flop: float
    """Of :attr:`per_flop`, the token mixers' other than core attention."""
