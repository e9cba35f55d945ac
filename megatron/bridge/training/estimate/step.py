"""The step estimate: :func:`estimate_step` reads a plan's job and assembles an :class:`Estimate`.

It checks the job has what the estimate needs, sizes the batch, picks the busiest pipeline stage
(:mod:`.stage`), prices its compute (:mod:`.compute`: the FLOPs at the achievable fraction of
peak, :mod:`.efficiency`, plus the memory-bound kernels' bytes at the HBM peak and the MoE and
hybrid kernels' terms) and its communication per mode (:mod:`.comm`), places both on
megatron-core's schedule (:mod:`.schedule`) with EP overlap hiding its measured share
(:mod:`.efficiency`), once with the plan's overlap and once with all of it off, and states the
assumptions behind the numbers (:mod:`.step_assumptions`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from megatron.bridge.training.estimate.accuracy import measured_accuracy
from megatron.bridge.training.estimate.attention import attention_source
from megatron.bridge.training.estimate.comm import (
    FSDP_GATHER,
    FSDP_REDUCE,
    bucket_params,
    cp_transfers,
    dp_transfers,
    ep_transfers,
    pp_sends,
    pp_transfers,
    price,
    tp_transfers,
)
from megatron.bridge.training.estimate.compute import (
    KernelFits,
    KernelSeconds,
    StageCompute,
    kernel_seconds,
    stage_compute,
)
from megatron.bridge.training.estimate.efficiency import EP_OVERLAP, Achievable, achievable_fraction
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
from megatron.bridge.training.estimate.stage import Stage, busiest_stage, stage_params
from megatron.bridge.training.estimate.step_assumptions import step_assumptions
from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.job import check_micro_batch_chunks
from megatron.bridge.training.validators import LIMITS, LimitError

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import OverlapPlan

__all__ = ["KernelSeconds", "estimate_step", "kernel_seconds"]


def estimate_step(
    plan: OverlapPlan,
    *,
    achievable: Achievable | None = None,
    ssm_scan_fraction: float | None = None,
    unfused_bytes: float | None = None,
    sparse_attention_fraction: float | None = None,
) -> Estimate:
    """The cost of one training step on one GPU of the busiest pipeline stage of ``plan``.

    Everything comes from the plan's job description: the model (:class:`ModelCost`), the
    layout, the GPU, the batch sizes (the global batch defaults to the smallest that fills the
    pipeline, micro-batch x DP x PP) and whether gradients are reduced in fp32.
    The NVLink domain is the job's (:attr:`JobDescription.nvlink_ranks`: its
    ``nvlink_domain``, else the GPU catalogue's, e.g. 72 on GB200 NVL72, else its
    ``gpus_per_node``, else the catalogue's GPUs per node). ``achievable`` replaces the fitted fraction of peak the compute
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
    domain = f.nvlink_ranks
    achievable = achievable or achievable_fraction(gpu.name, f.compute_dtype)
    fits = KernelFits(
        ssm_scan_fraction=ssm_scan_fraction,
        unfused_bytes=unfused_bytes,
        sparse_attention_fraction=sparse_attention_fraction,
    )
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
            fits=fits,
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
    memory, kernels = compute.memory, compute.kernels
    step = StepCost(
        tokens=tokens,
        flops_per_gpu=model_flops,
        compute_seconds_at_peak=executed * seconds_per_flop,
        memory_seconds_at_peak=memory,
        gemm_seconds=compute.flop_seconds - compute.attention,
        attention_seconds=compute.attention,
        attention_source=attention_source(gpu, f.model.softmax_type) if compute.attention else "",
    )

    dense_params, expert_params = stage_params(f, dims, stage)
    entries, knobs_off = price(
        [
            *tp_transfers(f, stage),
            *cp_transfers(f, dims, stage),
            *pp_transfers(f, stage),
            *dp_transfers(
                f,
                dense_params=dense_params,
                expert_params=expert_params,
                bucket_size=_knob(plan, "bucket_size"),
            ),
            *ep_transfers(f, stage),
        ],
        plan=plan,
        gpu=gpu,
        nvlink_domain=domain,
    )

    segments = micro_batches * stage.vpp
    shape = _Shape(
        forward=compute.forward / segments,
        backward=compute.backward / segments,
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
        assumptions=step_assumptions(
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
    hop = 0.0
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
            hop = t / (stage.micro_batches * pp_sends(stage))
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
                size = bucket_params(bucket, group)
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
                size = bucket_params(bucket, group)
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
            pipeline_hop=hop,
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
