"""Data-parallel rules: grad-reduce and param-gather overlap, their alignment and the bucketing.

Each knob the user set (in ``CommOverlapConfig`` or, where the knob table honours it, straight on
a megatron-core config) wins, then the combination is checked against the distributed optimizer
and the pipeline layout.
"""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.knobs import DEFAULT_BUCKET_SIZE
from megatron.bridge.training.comm_overlap.rules.planner import Planner
from megatron.bridge.training.upstream_divergence import differs_from_upstream

__all__ = [
    "check_overlap_param_gather",
    "check_param_gather_with_optimizer_step",
    "decide_dp",
    "derive_align_param_gather",
    "derive_overlap_grad_reduce",
    "derive_overlap_param_gather",
    "note_align_without_interleaving",
    "note_defaults_rederived",
]


def decide_dp(planner: Planner) -> None:
    """Decide the DP knobs: grad reduce, param gather, their alignment, buckets, optimizer step."""
    f = planner.job
    many = f.dp_size > 1
    why_dp = f"DP={f.dp_size}"
    if f.distributed_optimizer_note is not None:
        planner.notes.append(f.distributed_optimizer_note)

    derive_overlap_grad_reduce(planner)
    check_overlap_param_gather(planner)
    derive_overlap_param_gather(planner)
    derive_align_param_gather(planner)
    note_defaults_rederived(planner)

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
        check_param_gather_with_optimizer_step(planner)
        planner.set(
            "overlap_param_gather_with_optimizer_step",
            True,
            "user",
            "set in CommOverlapConfig: the first model chunk's all-gather starts in the optimizer "
            "step (megatron-core's ChainedOptimizer._step)",
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


#: DP switches on cfg.ddp that the rules derive when the user left them to the plan.
_DERIVED_DP_SWITCHES = ("overlap_grad_reduce", "overlap_param_gather", "align_param_gather")


def note_defaults_rederived(planner: Planner) -> None:
    """Name each DP switch the plan turned on over megatron-core's default False.

    A cfg.ddp field set in Python to megatron-core's default cannot be told apart from an
    untouched one, so it reads as not set and the rules derive the knob; the note says which
    default was replaced and how to keep it (CommOverlapConfig, or a typed override, is always
    the user's).
    """
    if not planner.job.megatron_ddp:
        return
    for knob in _DERIVED_DP_SWITCHES:
        decided = planner.decisions[knob]
        if decided.source != "derived" or decided.value is not True:
            continue
        planner.notes.append(
            f"cfg.ddp.{knob}=False is megatron-core's default, which cannot be told apart from "
            f"a setting of yours, so the plan derived True ({decided.reason}); to keep False, "
            f"set CommOverlapConfig({knob}=False) or type ddp.{knob}=false as an override."
        )


@differs_from_upstream(
    "overlap_grad_reduce derived at any DP with megatron-core's DDP (upstream: only with the "
    "distributed optimizer), and True next to a param-gather request at DP 1 (upstream: False)"
)
def derive_overlap_grad_reduce(planner: Planner) -> None:
    """Decide overlap_grad_reduce: the user's, else on at DP > 1 or with a param-gather request.

    megatron-core's DDP overlaps the gradient reduction without the distributed optimizer too,
    so the distributed optimizer does not gate it.
    """
    f = planner.job
    grad, where = planner.user_value("overlap_grad_reduce")
    gather, gather_where = planner.user_value("overlap_param_gather")
    if grad is not None:
        planner.set("overlap_grad_reduce", grad, "user", where)
        return
    if f.dp_size > 1:
        value, why = True, f"DP={f.dp_size} > 1: hide the gradient reduction under backward"
    elif gather:
        # megatron-core overlaps the param all-gather only together with the grad reduce, so
        # a param-gather request brings it along (at DP=1 neither has anything to do).
        value, why = True, f"overlap_param_gather=True ({gather_where}) needs it"
    else:
        value, why = False, f"DP={f.dp_size}: nothing to reduce across replicas"
    planner.set("overlap_grad_reduce", value, "derived", why)


@differs_from_upstream(
    "overlap_param_gather=True without the distributed optimizer is refused, and with "
    "overlap_grad_reduce=False kept with a warning (upstream drops or writes both silently)"
)
def check_overlap_param_gather(planner: Planner) -> None:
    """Refuse a param-gather request megatron-core fails on; warn where it hides nothing."""
    f = planner.job
    gather, gather_where = planner.user_value("overlap_param_gather")
    if gather and not f.use_distributed_optimizer and not f.use_megatron_fsdp:
        # megatron-core's bucket all-gather without the distributed optimizer takes the
        # layer-wise optimizer's path, whose per-rank sizes only that optimizer sets: it fails at
        # the first step (param_and_grad_buffer._ParamAndGradBucketGroup.start_param_sync).
        raise ValueError(
            "overlap_param_gather=True needs the distributed optimizer (it overlaps the "
            "all-gather of sharded parameters): set cfg.ddp.use_distributed_optimizer=True "
            "and cfg.optimizer.use_distributed_optimizer=True, or drop "
            f"overlap_param_gather ({gather_where})."
        )
    if gather and not planner.value("overlap_grad_reduce") and f.dp_size > 1:
        # megatron-core runs this: DistributedDataParallel puts every parameter in one bucket
        # when overlap_grad_reduce is False, so the forward pre-hook waits for the whole
        # all-gather before the first layer. Megatron-LM's argument check refuses the pair.
        planner.warnings.append(
            f"overlap_param_gather=True ({gather_where}) with overlap_grad_reduce=False hides "
            "nothing: megatron-core then keeps all parameters in one bucket, so the whole "
            "all-gather runs before the first layer. Set overlap_grad_reduce=True (Megatron-LM "
            "requires it) or drop overlap_param_gather."
        )


@differs_from_upstream(
    "overlap_param_gather is not derived without overlap_grad_reduce (upstream derives it at "
    "every DP > 1 with the distributed optimizer)"
)
def derive_overlap_param_gather(planner: Planner) -> None:
    """Decide overlap_param_gather: the user's, else on at DP > 1 with the distributed optimizer
    and gradient-reduce overlap.

    Without gradient-reduce overlap megatron-core's DDP keeps every parameter in one bucket, so
    a param-gather overlap would prefetch nothing (Megatron-LM's argument check refuses the pair).
    """
    f = planner.job
    gather, gather_where = planner.user_value("overlap_param_gather")
    if gather is not None:
        planner.set("overlap_param_gather", gather, "user", gather_where)
        return
    if f.dp_size <= 1:
        value, why = False, f"DP={f.dp_size}: nothing to gather"
    elif not f.use_distributed_optimizer:
        value, why = (
            False,
            "needs the distributed optimizer (off): only the gradient all-reduce is overlapped",
        )
    elif not planner.value("overlap_grad_reduce"):
        value, why = False, "needs overlap_grad_reduce, which is off"
    else:
        value, why = True, f"DP={f.dp_size} > 1 with the distributed optimizer"
    planner.set("overlap_param_gather", value, "derived", why)


@differs_from_upstream(
    "align_param_gather derived from param-gather overlap on an interleaved pipeline at any DP "
    "(upstream: only at DP > 1)"
)
def derive_align_param_gather(planner: Planner) -> None:
    """Decide align_param_gather: the user's, else on with param-gather overlap and interleaving."""
    f = planner.job
    gather = planner.value("overlap_param_gather")
    align, where = planner.user_value("align_param_gather")
    if align is not None:
        planner.set("align_param_gather", align, "user", where)
        if align and not f.use_megatron_fsdp:
            note_align_without_interleaving(planner, where)
        return
    if f.use_megatron_fsdp:
        value, why = (
            False,
            "Megatron-FSDP does not read it (only megatron-core's DistributedDataParallel does)",
        )
    elif gather and f.interleaved:
        value, why = True, "param-gather overlap with an interleaved pipeline"
    else:
        value = False
        why = "no param-gather overlap" if not gather else "pipeline is not interleaved"
    planner.set("align_param_gather", value, "derived", why)


@differs_from_upstream(
    "align_param_gather=True without megatron-core's interleaved schedule is kept with a warning "
    "or a note (upstream writes it silently)"
)
def note_align_without_interleaving(planner: Planner, where: str) -> None:
    """Say what ``align_param_gather=True`` does where no interleaved schedule dispatches it.

    megatron-core reads the flag in DDP's forward pre-hook only: it stops each bucket from
    prefetching the next one, because the interleaved schedule dispatches every chunk's
    all-gather itself (``schedules.forward_backward_pipelining_with_interleaving`` through
    ``config.param_sync_func``). No other schedule does, so there each bucket is gathered when
    its first layer needs it. Megatron-LM's argument check resets the flag to False there.
    """
    f = planner.job
    if f.interleaved_schedule:
        return
    layout = f"PP={f.pp_size}" + (f" VPP={f.vpp_size}" if f.vpp_size else " without VPP")
    if not planner.value("overlap_param_gather"):
        planner.notes.append(
            f"align_param_gather=True ({where}) has no effect without parameter-gather overlap "
            "(megatron-core reads it only in the param-gather pre-hook)."
        )
        return
    planner.warnings.append(
        f"align_param_gather=True ({where}) on a non-interleaved pipeline ({layout}) is kept, "
        "but only the interleaved schedule dispatches the aligned all-gathers: here each "
        "bucket's all-gather waits until its first layer needs it (no prefetch of the next "
        "bucket). Drop it, or set virtual_pipeline_model_parallel_size."
    )


@differs_from_upstream(
    "overlap_param_gather_with_optimizer_step=True without the distributed optimizer is refused "
    "(upstream drops it silently); without interleaving it is written with a note"
)
def check_param_gather_with_optimizer_step(planner: Planner) -> None:
    """Refuse ``overlap_param_gather_with_optimizer_step`` where megatron-core fails; say the rest.

    megatron-core's ``ChainedOptimizer._step`` starts the first model chunk's all-gather through
    ``optimizer.model_chunks``, which only the distributed optimizer has, so without it the first
    step fails. Without parameter-gather overlap the step's all-gather is synchronous (no
    overlap). Without an interleaved pipeline ``get_megatron_optimizer`` puts the whole model in
    the first chunk: every bucket's all-gather starts in the optimizer step (upstream
    Megatron-Bridge writes this; Megatron-LM's argument check requires a virtual pipeline).
    """
    f = planner.job
    if not f.use_distributed_optimizer:
        raise ValueError(
            "overlap_param_gather_with_optimizer_step=True needs the distributed optimizer: "
            "megatron-core starts the all-gather from the distributed optimizer's step, and "
            "without it the first step fails. Set cfg.ddp.use_distributed_optimizer=True (and "
            "cfg.optimizer.use_distributed_optimizer=True), or drop it."
        )
    if f.use_megatron_fsdp:
        return  # said by the Megatron-FSDP rules (fsdp.note_megatron_fsdp)
    if not planner.value("overlap_param_gather"):
        planner.warnings.append(
            "overlap_param_gather_with_optimizer_step=True has no effect with "
            "overlap_param_gather=False: megatron-core then gathers the parameters synchronously "
            "after the step. Turn overlap_param_gather on, or drop it."
        )
    elif not f.interleaved:
        planner.notes.append(
            "overlap_param_gather_with_optimizer_step=True without an interleaved pipeline: "
            "the first model chunk is the whole model, so megatron-core starts every bucket's "
            "all-gather in the optimizer step and the forward waits for them (Megatron-LM's "
            "argument check requires a virtual pipeline; megatron-core runs it)."
        )
