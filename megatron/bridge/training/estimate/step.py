"""The step estimate: :func:`estimate_step` reads a plan's job and assembles an :class:`Estimate`.

It checks the job has what the estimate needs, sizes the batch, picks the busiest pipeline stage
(:mod:`.stage`), prices its compute at the GPU's peak and its communication per mode
(:mod:`.comm`), and states the assumptions behind the numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from megatron.bridge.training.estimate.comm import (
    cp_transfers,
    dp_transfers,
    ep_transfers,
    pp_transfers,
    price,
    tp_transfers,
)
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.result import Estimate, StepCost
from megatron.bridge.training.estimate.stage import Stage, busiest_stage, stage_params
from megatron.bridge.training.hardware import GpuSpec, gpu_spec
from megatron.bridge.training.job import JobDescription

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import OverlapPlan

__all__ = ["estimate_step"]


def estimate_step(
    plan: OverlapPlan,
    *,
    gpus_per_node: int = 8,
    nvlink_domain: int | None = None,
) -> Estimate:
    """The cost of one training step on one GPU of the busiest pipeline stage of ``plan``.

    Everything comes from the plan's job description: the model (:class:`ModelCost`), the
    layout, the GPU, the batch sizes (the global batch defaults to the smallest that fills the
    pipeline, micro-batch x DP x PP) and whether gradients are reduced in fp32.
    ``nvlink_domain`` is how many consecutive ranks NVLink connects (default: the GPU
    catalogue's domain, e.g. 72 on GB200 NVL72, else ``gpus_per_node``). Raises ``ValueError``
    when the job lacks what the estimate needs (GPU, micro-batch size, the model's shape).
    """
    f = plan.job
    dims = ModelCost(f.model)
    if f.gpu is None:
        raise ValueError("estimate_step needs the GPU model: set JobDescription.gpu (e.g. 'h100').")
    if f.micro_batch_size is None:
        raise ValueError("estimate_step needs JobDescription.micro_batch_size.")
    gpu = gpu_spec(f.gpu)
    tp, cp, pp, dp = f.tp_size, f.cp_size, f.pp_size, f.dp_size
    mbs = f.micro_batch_size
    gbs = f.global_batch_size if f.global_batch_size is not None else mbs * dp * pp
    if gbs % (mbs * dp):
        raise ValueError(
            f"global_batch_size {gbs} is not a multiple of micro_batch_size x DP = {mbs * dp}."
        )
    micro_batches = gbs // (mbs * dp)
    tokens = gbs * f.model.seq_length
    tokens_per_dp_rank = tokens // dp
    domain = nvlink_domain or gpu.nvlink_domain or gpus_per_node

    stage = busiest_stage(f, dims, micro_batch_size=mbs, micro_batches=micro_batches)

    split = tp * cp  # a micro-batch's work is split over TP and its tokens over CP
    model_flops = tokens_per_dp_rank * stage.flops_per_token / split
    executed = model_flops + tokens_per_dp_rank * stage.recompute_flops_per_token / split
    step = StepCost(
        tokens=tokens,
        flops_per_gpu=model_flops,
        compute_seconds_at_peak=executed / (gpu.peak_tflops(f.compute_dtype) * 1e12),
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

    flops_per_token = dims.flops_per_token(tp)
    return Estimate(
        model_flops_per_token=flops_per_token,
        step=step,
        communication=tuple(entries),
        assumptions=_assumptions(f, gpu, stage, global_batch_size=gbs, nvlink_domain=domain),
        executed_flops_per_gpu=executed,
        average_flops_per_gpu=tokens * flops_per_token / f.world_size,
        dense_params_per_gpu=dense_params,
        expert_params_per_gpu=expert_params,
        pipeline_rank=stage.rank,
        knobs_off=tuple(knobs_off),
    )


def _assumptions(
    job: JobDescription, gpu: GpuSpec, stage: Stage, *, global_batch_size: int, nvlink_domain: int
) -> tuple[str, ...]:
    """What the estimate's numbers assume and leave out, for :attr:`Estimate.assumptions`."""
    peak = gpu.peak_format(job.compute_dtype)
    first, last = stage.first, stage.last
    assumptions = [
        "times are lower bounds: bytes / peak per-direction link bandwidth and FLOPs / peak "
        f"dense {peak} tensor-core FLOP/s ({gpu.name}: "
        f"{gpu.peak_tflops(job.compute_dtype):.0f} TFLOP/s, NVLink {gpu.nvlink_gb_per_s:.0f} GB/s, "
        f"network {gpu.network_gb_per_s:.0f} GB/s per GPU); no latency, no congestion",
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
    ]
    if job.model.moe:
        assumptions.append(
            "MoE: uniform routing (no imbalance, no dropped tokens); MoE layers spread evenly "
            "over stages; expert-TP traffic not modelled"
        )
    return tuple(assumptions)
