"""The step estimate: :func:`estimate_step` reads a plan's job and assembles an :class:`Estimate`.

It checks the job has what the estimate needs, sizes the batch, picks the busiest pipeline stage
(:mod:`.stage`), prices its compute at the GPU's peak and its communication per mode
(:mod:`.comm`), places both on megatron-core's schedule (:mod:`.schedule`) with the FLOPs at
the achievable fraction of peak (:mod:`.efficiency`) plus the memory-bound kernels' bytes at
the HBM peak and EP overlap hiding its measured share (:mod:`.efficiency`), once with the plan's
overlap and once with all of it off, and states the assumptions behind the numbers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from megatron.bridge.training.estimate.accuracy import measured_accuracy
from megatron.bridge.training.estimate.comm import (
    FSDP_GATHER,
    FSDP_REDUCE,
    cp_transfers,
    dp_transfers,
    ep_transfers,
    pp_transfers,
    price,
    tp_transfers,
)
from megatron.bridge.training.estimate.efficiency import EP_OVERLAP, Achievable, achievable_fraction
from megatron.bridge.training.estimate.kernels import (
    cross_entropy_bytes_per_token,
    fused_expert_kernel,
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
from megatron.bridge.training.estimate.result import (
    CP_RING,
    FSDP_PREFETCH,
    CommEntry,
    Estimate,
    Prediction,
    StepCost,
)
from megatron.bridge.training.estimate.schedule import (
    GradStream,
    LayerStream,
    ParamStream,
    ScheduleInput,
    simulate,
)
from megatron.bridge.training.estimate.stage import Stage, busiest_stage, mtp_rank, stage_params
from megatron.bridge.training.hardware import GpuSpec, gpu_spec
from megatron.bridge.training.job import JobDescription, check_micro_batch_chunks
from megatron.bridge.training.precisions import PRECISIONS
from megatron.bridge.training.validators import LIMITS, LimitError

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import OverlapPlan

__all__ = ["KernelSeconds", "estimate_step", "kernel_seconds"]


def estimate_step(
    plan: OverlapPlan,
    *,
    gpus_per_node: int | None = None,
    nvlink_domain: int | None = None,
    achievable: Achievable | None = None,
    ssm_scan_fraction: float | None = None,
    unfused_bytes: float | None = None,
    sparse_attention_fraction: float | None = None,
) -> Estimate:
    """The cost of one training step on one GPU of the busiest pipeline stage of ``plan``.

    Everything comes from the plan's job description: the model (:class:`ModelCost`), the
    layout, the GPU, the batch sizes (the global batch defaults to the smallest that fills the
    pipeline, micro-batch x DP x PP) and whether gradients are reduced in fp32.
    ``nvlink_domain`` is how many consecutive ranks NVLink connects (default: the GPU
    catalogue's domain, e.g. 72 on GB200 NVL72, else ``gpus_per_node``, which defaults to the
    catalogue's GPUs per node). ``achievable`` replaces the fitted fraction of peak the compute
    runs at (:func:`~.efficiency.achievable_fraction`); ``ssm_scan_fraction`` the fitted share
    of the BF16 peak the Mamba scan kernels run at (:func:`~.kernels.ssm_scan_rate`);
    ``unfused_bytes`` the fitted bytes per routed token element of the experts outside the fused
    grouped MLP (:func:`~.kernels.unfused_expert_bytes`); ``sparse_attention_fraction`` the
    fitted share of the BF16 peak DeepSeek-V4's attention kernels run at
    (:func:`~.kernels.sparse_attention_rate`). Raises ``ValueError`` when the job lacks what the
    estimate needs (GPU, micro-batch size, the model's shape).
    """
    f = plan.job
    dims = ModelCost(f.model)
    if f.gpu is None:
        raise ValueError("estimate_step needs the GPU model: set JobDescription.gpu (e.g. 'h100').")
    if f.micro_batch_size is None:
        raise ValueError("estimate_step needs JobDescription.micro_batch_size.")
    check_micro_batch_chunks(f)
    gpu = gpu_spec(f.gpu)
    dp = f.dp_size
    mbs = f.micro_batch_size
    micro_batches = f.micro_batches
    gbs = micro_batches * mbs * dp
    tokens = gbs * f.model.seq_length
    tokens_per_dp_rank = tokens // dp
    domain = nvlink_domain or gpu.nvlink_domain or gpus_per_node or gpu.gpus_per_node
    achievable = achievable or achievable_fraction(gpu.name, f.compute_dtype)
    # Each candidate stage's compute, priced once: the busiest stage's is the step's.
    computed: dict[int, StageCompute] = {}

    def seconds(candidate: Stage) -> float:
        found = stage_compute(
            f,
            gpu,
            dims,
            candidate,
            tokens=tokens_per_dp_rank,
            fraction=achievable.fraction,
            ssm_scan_fraction=ssm_scan_fraction,
            unfused_bytes=unfused_bytes,
            sparse_attention_fraction=sparse_attention_fraction,
        )
        computed[candidate.rank] = found
        return found.seconds

    stage = busiest_stage(
        f, dims, micro_batch_size=mbs, micro_batches=micro_batches, seconds=seconds
    )
    compute = computed[stage.rank]
    seconds_per_flop, model_flops, executed = (
        compute.seconds_per_flop,
        compute.model_flops,
        compute.executed,
    )
    memory_forward, memory, kernels = compute.memory_forward, compute.memory, compute.kernels
    step = StepCost(
        tokens=tokens,
        flops_per_gpu=model_flops,
        compute_seconds_at_peak=executed * seconds_per_flop,
        memory_seconds_at_peak=memory,
    )

    dense_params, expert_params = stage_params(f, dims, stage)
    entries, knobs_off = price(
        [
            *tp_transfers(f, stage),
            *cp_transfers(f, dims, stage),
            *pp_transfers(f, stage),
            *dp_transfers(f, dense_params=dense_params, expert_params=expert_params),
            *ep_transfers(f, stage),
        ],
        plan=plan,
        gpu=gpu,
        nvlink_domain=domain,
    )

    rate = achievable.fraction / seconds_per_flop
    segments = micro_batches * stage.vpp
    shape = _Shape(
        forward=(model_flops / 3 / rate + memory_forward + kernels.forward) / segments,
        backward=((executed - model_flops / 3) / rate + memory - memory_forward + kernels.backward)
        / segments,
        attention_share=compute.mixer_share,
        core_attention_share=compute.core_share,
    )
    with_plan = _predict(
        plan, entries, stage, shape, achievable, tokens, dense_params, expert_params, overlap=True
    )
    without = _predict(
        plan, entries, stage, shape, achievable, tokens, dense_params, expert_params, overlap=False
    )
    timeline, prediction = with_plan
    entries = [
        dataclasses.replace(
            c,
            hidden_seconds=timeline[i].hidden,
            exposed_seconds=timeline[i].exposed,
            window_seconds=timeline[i].window,
        )
        for i, c in enumerate(entries)
    ]

    flops_per_token = dims.flops_per_token(f.tp_size)
    return Estimate(
        model_flops_per_token=flops_per_token,
        step=step,
        communication=tuple(entries),
        prediction=prediction,
        without_overlap=without[1],
        assumptions=_assumptions(
            f,
            gpu,
            dims,
            stage,
            global_batch_size=gbs,
            nvlink_domain=domain,
            ep_overlap=_ep_overlap(plan),
            kernels=kernels,
        ),
        executed_flops_per_gpu=executed,
        average_flops_per_gpu=tokens * flops_per_token / f.world_size,
        dense_params_per_gpu=dense_params,
        expert_params_per_gpu=expert_params,
        pipeline_rank=stage.rank,
        knobs_off=tuple(knobs_off),
        accuracy=measured_accuracy(f.model),
    )


@dataclass(frozen=True)
class StageCompute:
    """One GPU of a stage's compute per step, as :func:`estimate_step` prices it before
    communication and the schedule (:func:`stage_compute`)."""

    seconds_per_flop: float
    """Seconds per executed FLOP at peak (:func:`_seconds_per_flop`)."""
    mixer_share: float
    """Share of the time at peak in the token mixers."""
    core_share: float
    """Share of the time at peak in core attention."""
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
    """The achievable fraction of peak the FLOPs run at."""

    @property
    def seconds(self) -> float:
        """The executed FLOPs at the achievable rate, the memory-bound kernels and the kernel
        terms."""
        flops = self.executed * self.seconds_per_flop / self.fraction
        return flops + self.memory + self.kernels.total


def stage_compute(
    job: JobDescription,
    gpu: GpuSpec,
    dims: ModelCost,
    stage: Stage,
    *,
    tokens: float,
    fraction: float,
    ssm_scan_fraction: float | None = None,
    unfused_bytes: float | None = None,
    sparse_attention_fraction: float | None = None,
) -> StageCompute:
    """One GPU of ``stage``'s compute per step for ``tokens`` tokens of its DP rank (split over
    TP and CP here): its executed FLOPs at the achievable ``fraction`` of peak, its memory-bound
    bytes at the HBM peak and its kernel terms. A stage without layers or output heads (a
    layout's embedding-only stage) computes nothing priced: all zero."""
    if not stage.flops_per_token:
        return StageCompute(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, KernelSeconds(), fraction)
    seconds_per_flop, mixer_share, core_share = _seconds_per_flop(job, gpu, dims, stage)
    split = job.tp_size * job.cp_size  # a micro-batch's work over TP, its tokens over CP
    model_flops = tokens * stage.flops_per_token / split
    executed = model_flops + tokens * stage.recompute_flops_per_token / split
    # The stage's memory-bound bytes are per TP rank already: the tokens split over CP.
    memory_forward, memory = _memory_seconds(gpu, stage, tokens / job.cp_size)
    kernels = kernel_seconds(
        job,
        gpu,
        dims,
        stage,
        tokens=tokens / split,
        fraction=fraction,
        ssm_scan_fraction=ssm_scan_fraction,
        unfused_bytes=unfused_bytes,
        sparse_attention_fraction=sparse_attention_fraction,
    )
    return StageCompute(
        seconds_per_flop,
        mixer_share,
        core_share,
        model_flops,
        executed,
        memory_forward,
        memory,
        kernels,
        fraction,
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
    ssm_scan_fraction: float | None,
    unfused_bytes: float | None = None,
    sparse_attention_fraction: float | None = None,
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
    FLOPs do.
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
        scan_rate, source = ssm_scan_rate(gpu, fraction=ssm_scan_fraction)
        layers = stage.layers * mamba / m.num_layers
        counted_rate = min(gemm_rate / fraction, gpu.peak_bf16_tflops * 1e12) * fraction
        counted = stage.layers * dims.scan_flops_per_token() * tokens / counted_rate
        scan = max(0.0, layers * ssd_flops_per_token(m) * tokens / scan_rate - counted)
    sparse = 0.0
    sparse_source = ""
    if dims.dsv4_hybrid and stage.layers:
        sparse_rate, sparse_source = sparse_attention_rate(gpu, fraction=sparse_attention_fraction)
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
        per_element, unfused_source = unfused_expert_bytes(gpu, bytes_per_element=unfused_bytes)
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
) -> tuple[float, float, float]:
    """Seconds per executed FLOP at peak, and the shares of the time at peak of the token
    mixers (attention, or a hybrid model's mixers) and of core attention.

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
    mixer_time = (mixers - core - scan) / gemm + core / core_peak + scan / sixteen_bit
    return per_flop, mixer_time / per_flop, core / core_peak / per_flop


def _assumptions(
    job: JobDescription,
    gpu: GpuSpec,
    dims: ModelCost,
    stage: Stage,
    *,
    global_batch_size: int,
    nvlink_domain: int,
    ep_overlap: bool,
    kernels: KernelSeconds,
) -> tuple[str, ...]:
    """What the estimate's numbers assume and leave out, for :attr:`Estimate.assumptions`."""
    peak = gpu.peak_format(job.compute_dtype)
    first, last = stage.first, stage.last
    assumptions = [
        "times are lower bounds: bytes / peak per-direction link bandwidth and FLOPs / peak "
        f"dense {peak} tensor-core FLOP/s ({gpu.name}: "
        f"{gpu.peak_tflops(job.compute_dtype):.0f} TFLOP/s, NVLink {gpu.nvlink_gb_per_s:.0f} GB/s, "
        f"network {gpu.network_gb_per_s:.0f} GB/s per GPU); no latency, no congestion",
        *(
            []
            if peak == "BF16" or job.model.fp8_dot_product_attention
            else [
                f"core attention at the BF16 peak ({gpu.peak_bf16_tflops:.0f} TFLOP/s): its dot "
                f"products stay 16-bit unless fp8_dot_product_attention; the GEMMs at the {peak} "
                "peak"
            ]
        ),
        *(
            []
            if peak == "BF16"
            else [
                "output heads (logits) at the BF16 peak: megatron-core's output layer is not a "
                f"Transformer Engine module, so the {peak} recipe leaves it 16-bit"
            ]
        ),
        f"ring collectives: each GPU sends (n-1)/n of the tensor; NVLink domain of {nvlink_domain} "
        "consecutive ranks (megatron-core rank order tp-cp-dp-pp, experts tp-ep-dp-pp); a "
        "group spanning more crosses the network",
        f"global batch {global_batch_size} ({stage.micro_batches} micro-batches of "
        f"{stage.micro_batch_size} per DP rank)"
        + ("" if job.global_batch_size is not None else ": default micro-batch x DP x PP"),
        f"busiest pipeline stage = rank {stage.rank} ({stage.layers} transformer layers"
        + (", logits" if last else "")
        + (", embedding" if first else "")
        + ")",
        "activations on the wire in bf16 (FP8 all-gathers not modelled); params gathered in "
        f"bf16; grads reduced in {'fp32' if job.grad_reduce_in_fp32 else 'bf16'}",
        "CP's K/V ring exchange is overlapped by the attention kernels themselves (TE ring "
        "attention), whatever the overlap knobs say",
        "model FLOPs: Megatron's definition (no norms, softmax, router or loss); "
        "recomputed forwards count only in compute_seconds_at_peak",
        "memory-bound kernels (norms, rotary, attention I/O, activations, router, permutation, "
        "residual adds; 16-bit activations, backward twice the forward) at the HBM peak "
        f"({gpu.hbm_gb_per_s:.0f} GB/s), added to the compute without the achievable fraction; "
        "split over CP, and over TP except the hidden-wide tensors without sequence parallelism; "
        "MTP layers and the output layer's not counted",
    ]
    if stage.bf16_gemm_flops_per_token:
        title = PRECISIONS[job.compute_dtype].title
        kept = (
            [
                f"{stage.bf16_layers} decoder layer(s) kept out of the {title} recipe "
                "(first_last_layers_bf16)"
            ]
            if stage.bf16_layers
            else []
        )
        unquantized = (
            [
                "DeepSeek-V4's grouped output, compressor and indexer-weight projections, which "
                f"megatron-core runs outside the {title} recipe"
            ]
            if dims.dsv4_hybrid
            else []
        )
        assumptions.append(
            f"{stage.bf16_gemm_flops_per_token / stage.flops_per_token:.1%} of the stage's model "
            "FLOPs in linear layers at the BF16 peak: " + "; ".join(kept + unquantized)
        )
    if job.model.moe:
        assumptions.append(
            "MoE: uniform routing (no imbalance, no dropped tokens); MoE layers spread evenly "
            "over stages; expert-TP traffic not modelled"
        )
    if kernels.grouped_gemm:
        assumptions.append(
            f"grouped expert GEMMs at {kernels.grouped_gemm_efficiency:.0%} of the dense GEMM "
            f"rate (+{kernels.grouped_gemm:.3g} s): rows per expert padded to the GEMM tile, "
            "operands and output at the HBM peak beside the FLOPs (roofline)"
        )
    if kernels.loss:
        assumptions.append(
            f"cross-entropy over the vocabulary +{kernels.loss:.3g} s: megatron-core's "
            "vocab-parallel loss passes over fp32 logits (58 bytes per logit) at the HBM peak"
        )
    if kernels.unfused_experts:
        assumptions.append(
            f"routed experts outside Transformer Engine's fused grouped MLP "
            f"+{kernels.unfused_experts:.3g} s: FP8/FP4 grouped GEMM, permutation, quantization "
            "and activation kernels launched apart, priced per routed token element "
            f"({kernels.unfused_source})"
        )
    if kernels.sparse_attention:
        assumptions.append(
            f"DeepSeek-V4 attention kernels +{kernels.sparse_attention:.3g} s: the sparse "
            "attention and the DSA indexer's scoring (upstream's core-attention FLOPs) at the "
            f"fitted share of the BF16 peak ({kernels.sparse_source})"
        )
    if kernels.ssm_scan:
        assumptions.append(
            f"Mamba SSD scan kernels +{kernels.ssm_scan:.3g} s: the chunked scan's executed "
            f"FLOPs at the fitted share of the BF16 peak ({kernels.ssm_source})"
        )
    if job.use_megatron_fsdp:
        assumptions.append(
            "Megatron-FSDP shards with optim_grads_params: each layer's parameters gathered in "
            "bf16 before its forward and its backward and its gradients reduce-scattered, every "
            "micro-batch, hidden under the segment's compute but for each chunk's first layer"
            + (
                f"; across its {job.num_distributed_optimizer_instances} HSDP groups once per step"
                if job.num_distributed_optimizer_instances > 1
                else ""
            )
        )
    if ep_overlap:
        assumptions.append(
            "overlap_moe_expert_parallel_comm hides "
            f"{EP_OVERLAP.hidden_share:.0%} of the EP all-to-all time its combined 1F1B slots "
            f"could hide: the share measured in {EP_OVERLAP.source}"
        )
    return tuple(assumptions)


@dataclass(frozen=True)
class _Shape:
    """One micro-batch of one chunk on the busiest stage, in seconds at the achievable rate."""

    forward: float
    backward: float
    attention_share: float
    core_attention_share: float


def _knob(plan: OverlapPlan, knob: str) -> object:
    try:
        return plan.value(knob)
    except KeyError:
        return None


def _ep_overlap(plan: OverlapPlan) -> bool:
    """The plan runs EP all-to-all overlap: the knob is on and there is an EP group."""
    return plan.job.ep_size > 1 and bool(_knob(plan, "overlap_moe_expert_parallel_comm"))


def _check_bucket_count(buckets: int, *, size: int, n_params: int) -> None:
    """``LimitError`` for more gradient buckets than the simulation places one by one."""
    limit = LIMITS["buckets"]
    if buckets > limit.maximum:
        raise LimitError(
            f"bucket_size={size}: the stage's {n_params} parameters make {buckets} gradient "
            f"buckets per step, above the bound {limit.maximum} ({limit.why}); raise "
            "bucket_size (cfg.ddp.bucket_size / comm_overlap.bucket_size)."
        )


def _predict(
    plan: OverlapPlan,
    entries: list[CommEntry],
    stage: Stage,
    shape: _Shape,
    achievable: Achievable,
    tokens: int,
    dense_params: int,
    expert_params: int,
    *,
    overlap: bool,
) -> tuple[dict, Prediction]:
    """Simulate the step with the plan's overlap (``overlap``) or with every knob off."""
    job = plan.job
    segments = stage.micro_batches * stage.vpp
    f, b = shape.forward, shape.backward

    def on(knob: str) -> bool:
        return overlap and bool(_knob(plan, knob))

    bucket = _knob(plan, "bucket_size")
    layer: list[LayerStream] = []
    grads: list[GradStream] = []
    params: list[ParamStream] = []
    for i, c in enumerate(entries):
        t = c.seconds_at_achieved_bandwidth
        if c.mode in ("tp", "cp"):
            per = t / segments
            fwd, bwd = per * f / (f + b), per * b / (f + b)
            if c.mode == "tp":
                hide = (job.tp_size - 1) / job.tp_size if c.hidden_by and on(c.hidden_by) else 0.0
                layer.append(LayerStream(i, c.link, fwd, bwd, hide, "gemm"))
            else:
                layer.append(
                    LayerStream(i, c.link, fwd, bwd, 1.0 if c.hidden_by == CP_RING else 0.0, "core")
                )
        elif c.mode == "pp":
            per = t / segments / 2
            layer.append(
                LayerStream(i, c.link, per, per, 1.0 if on("overlap_p2p_comm") else 0.0, "all")
            )
        elif c.mode == "ep":
            fwd_share = 2 / (4 + 2 * stage.moe_forward_recomputed)
            layer.append(
                LayerStream(
                    i,
                    c.link,
                    t * fwd_share / segments,
                    t * (1 - fwd_share) / segments,
                    EP_OVERLAP.hidden_share if overlap and _ep_overlap(plan) else 0.0,
                    "a2a",
                )
            )
        elif c.collective in (FSDP_GATHER, FSDP_REDUCE):
            # Megatron-FSDP: per layer in every segment. The gathers prefetch the next layer
            # under the current one, so only a chunk's first layer waits for its own (1/layers
            # of the gather exposed); the reduce-scatters run asynchronously.
            per = t / segments
            if c.collective == FSDP_GATHER:
                units = max(1, round(stage.layers / stage.vpp))
                hide = (units - 1) / units if overlap else 0.0
                layer.append(LayerStream(i, c.link, per / 2, per / 2, hide, "all"))
            else:
                layer.append(LayerStream(i, c.link, 0.0, per, 1.0 if overlap else 0.0, "all"))
        else:
            # Across Megatron-FSDP's groups (HSDP): asynchronous whatever the knobs say.
            fsdp = overlap and c.hidden_by == FSDP_PREFETCH
            n_params = dense_params if c.mode == "dp" else expert_params
            group = (
                job.dp_size * job.cp_size
                if c.mode == "dp"
                else max(1, job.world_size // (job.etp_size * job.ep_size * job.pp_size))
            )
            if "all-gather" in c.collective:
                size = (
                    bucket
                    if isinstance(bucket, int) and bucket > 0
                    else max(40_000_000, 1_000_000 * group)
                )
                per_chunk = max(1, math.ceil(n_params / stage.vpp / size))
                params.append(
                    ParamStream(
                        i,
                        c.link,
                        t,
                        per_chunk,
                        fsdp or on("overlap_param_gather"),
                        bool(_knob(plan, "align_param_gather")),
                        bool(_knob(plan, "overlap_param_gather_with_optimizer_step")),
                    )
                )
            else:
                grad_on = fsdp or on("overlap_grad_reduce")
                # megatron-core: one bucket without overlap_grad_reduce, else bucket_size
                # (default max(40M, 1M x DP group) parameters).
                size = (
                    bucket
                    if isinstance(bucket, int) and bucket > 0
                    else max(40_000_000, 1_000_000 * group)
                )
                per_chunk = max(1, math.ceil(n_params / stage.vpp / size)) if grad_on else 1
                _check_bucket_count(per_chunk * stage.vpp, size=size, n_params=n_params)
                grads.append(GradStream(i, c.link, t, per_chunk, grad_on))
    timeline = simulate(
        ScheduleInput(
            forward=f,
            backward=b,
            attention_share=shape.attention_share,
            core_attention_share=shape.core_attention_share,
            micro_batches=stage.micro_batches,
            vpp=stage.vpp,
            pp=job.pp_size,
            rank=stage.rank,
            ep_overlap=overlap and _ep_overlap(plan),
            layer_streams=tuple(layer),
            grad_streams=tuple(grads),
            param_streams=tuple(params),
        )
    )
    labels = {i: (c.link, f"{c.mode}: {c.collective}") for i, c in enumerate(entries)}
    prediction = Prediction(
        step_seconds=timeline.step,
        compute_seconds=timeline.compute,
        bubble_seconds=timeline.bubble,
        exposed_seconds=max(0.0, timeline.step - timeline.compute - timeline.bubble),
        tokens_per_s_per_gpu=tokens / timeline.step / job.world_size,
        achievable_fraction=achievable.fraction,
        achievable_source=achievable.source,
        timeline=tuple(timeline.segments),
        link_intervals=tuple(
            (labels[key][0], labels[key][1], start, secs)
            for key, st in timeline.streams.items()
            for start, secs in st.intervals
        ),
    )
    return timeline.streams, prediction
