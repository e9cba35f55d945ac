"""Data-parallel rules: grad-reduce and param-gather overlap, their alignment and the bucketing.

Each knob the user set (in ``CommOverlapConfig`` or, where the knob table honours it, straight on
a megatron-core config) wins, then the combination is checked against the distributed optimizer
and the pipeline layout.
"""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.knobs import DEFAULT_BUCKET_SIZE
from megatron.bridge.training.comm_overlap.rules.planner import Planner

__all__ = ["decide_dp"]


def decide_dp(planner: Planner) -> None:
    """Decide the DP knobs: grad reduce, param gather, their alignment, buckets, optimizer step."""
    f = planner.job
    dist_opt = f.use_distributed_optimizer
    many = f.dp_size > 1
    why_dp = f"DP={f.dp_size}"
    if f.distributed_optimizer_note is not None:
        planner.notes.append(f.distributed_optimizer_note)

    grad, where = planner.user_value("overlap_grad_reduce")
    gather, gather_where = planner.user_value("overlap_param_gather")
    if grad is not None:
        planner.set("overlap_grad_reduce", grad, "user", where)
    elif many:
        planner.set(
            "overlap_grad_reduce",
            True,
            "derived",
            f"{why_dp} > 1: hide the gradient reduction under backward",
        )
    elif gather:
        # megatron-core overlaps the param all-gather only together with the grad reduce, so
        # a param-gather request brings it along (at DP=1 neither has anything to do).
        planner.set(
            "overlap_grad_reduce",
            True,
            "derived",
            f"overlap_param_gather=True ({gather_where}) needs it",
        )
    else:
        planner.set(
            "overlap_grad_reduce",
            False,
            "derived",
            f"{why_dp}: nothing to reduce across replicas",
        )
    grad = planner.value("overlap_grad_reduce")

    if gather:
        if not dist_opt:
            raise ValueError(
                "overlap_param_gather=True needs the distributed optimizer (it overlaps the "
                "all-gather of sharded parameters): set cfg.ddp.use_distributed_optimizer=True "
                "and cfg.optimizer.use_distributed_optimizer=True, or drop "
                f"overlap_param_gather ({gather_where})."
            )
        if not grad:
            raise ValueError(
                "overlap_param_gather=True needs overlap_grad_reduce=True (megatron-core "
                "overlaps the param all-gather only together with the grad reduce-scatter); "
                f"overlap_param_gather was {gather_where}."
            )
    if gather is not None:
        planner.set("overlap_param_gather", gather, "user", gather_where)
    elif not many:
        planner.set("overlap_param_gather", False, "derived", f"{why_dp}: nothing to gather")
    elif not dist_opt:
        planner.set(
            "overlap_param_gather",
            False,
            "derived",
            "needs the distributed optimizer (off): only the gradient all-reduce is overlapped",
        )
    elif not grad:
        planner.set(
            "overlap_param_gather", False, "derived", "needs overlap_grad_reduce, which is off"
        )
    else:
        planner.set(
            "overlap_param_gather",
            True,
            "derived",
            f"{why_dp} > 1 with the distributed optimizer",
        )
    gather = planner.value("overlap_param_gather")

    align, where = planner.user_value("align_param_gather")
    if align and not f.interleaved:
        raise ValueError(
            f"align_param_gather=True only applies to an interleaved pipeline (PP > 1 and VPP > "
            f"1), got PP={f.pp_size} VPP={f.vpp_size}; drop it or set "
            "virtual_pipeline_model_parallel_size."
        )
    if align is not None:
        planner.set("align_param_gather", align, "user", where)
    elif gather and f.interleaved:
        planner.set(
            "align_param_gather",
            True,
            "derived",
            "param-gather overlap with an interleaved pipeline",
        )
    else:
        planner.set(
            "align_param_gather",
            False,
            "derived",
            "no param-gather overlap" if not gather else "pipeline is not interleaved",
        )

    size, where = planner.user_value("bucket_size")
    if size is not None and f.num_buckets is not None:
        raise ValueError(
            f"bucket_size={size!r} ({where}) and cfg.ddp.num_buckets={f.num_buckets} are both "
            "set; megatron-core's DistributedDataParallelConfig takes one: choose one (drop "
            "bucket_size or set cfg.ddp.num_buckets=None)."
        )
    if size is not None:
        if type(size) is not int or size < 1:
            raise TypeError(
                f"bucket_size must be a positive int (parameters), got {size!r} ({where})."
            )
        planner.set("bucket_size", size, "user", f"{where} (parameters, not bytes)")
    elif f.num_buckets is not None:
        planner.set(
            "bucket_size",
            None,
            "derived",
            f"cfg.ddp.num_buckets={f.num_buckets} sets the bucketing (exclusive with bucket_size)",
        )
    elif many:
        planner.set(
            "bucket_size",
            DEFAULT_BUCKET_SIZE,
            "derived",
            f"{why_dp} > 1: 128 Mi parameters per bucket",
        )
    else:
        planner.set("bucket_size", None, "derived", f"{why_dp}: megatron-core's default bucketing")

    step = planner.user.overlap_param_gather_with_optimizer_step
    if step:
        missing = [
            text
            for ok, text in (
                (dist_opt, "the distributed optimizer"),
                (gather, "overlap_param_gather=True"),
                (f.interleaved, "an interleaved pipeline (PP > 1 and VPP > 1)"),
            )
            if not ok
        ]
        if missing:
            raise ValueError(
                "overlap_param_gather_with_optimizer_step=True needs " + ", ".join(missing) + "."
            )
        planner.set(
            "overlap_param_gather_with_optimizer_step", True, "user", "set in CommOverlapConfig"
        )
        planner.cautions.append(
            "overlap_param_gather_with_optimizer_step=True is known to break checkpointing; "
            "check that checkpoints load before relying on it."
        )
    elif step is False:
        planner.set(
            "overlap_param_gather_with_optimizer_step",
            False,
            "user",
            "set in CommOverlapConfig",
        )
    else:
        planner.set(
            "overlap_param_gather_with_optimizer_step",
            False,
            "default",
            "off by default: it breaks checkpointing",
        )

    if not f.megatron_ddp:
        planner.notes.append(
            "DDP is not megatron-core's DistributedDataParallelConfig: the DP decisions above "
            "are not written there; configure that implementation's overlap yourself."
        )
    if not many:
        for knob, idle in (
            ("overlap_grad_reduce", "no gradient is reduced across replicas"),
            ("overlap_param_gather", "no parameter is gathered across replicas"),
        ):
            decided = planner.decisions[knob]
            if decided.source == "user" and decided.value:
                planner.notes.append(
                    f"{knob}=True ({decided.reason}) is kept but has no effect with "
                    f"{why_dp}: {idle}."
                )
