"""Pipeline rules: p2p overlap for an interleaved pipeline, batched p2p otherwise."""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.rules.planner import Planner
from megatron.bridge.training.upstream_divergence import differs_from_upstream

__all__ = ["decide_pp", "derive_batch_p2p", "derive_overlap_p2p", "warn_two_rank_batch"]


def decide_pp(planner: Planner) -> None:
    """Decide overlap_p2p_comm and batch_p2p_comm from the request and the pipeline layout."""
    f, user = planner.job, planner.user
    overlap, batch = user.overlap_p2p_comm, user.batch_p2p_comm
    # megatron-core's pipeline schedules raise on these; without a pipeline its schedule
    # (forward_backward_no_pipelining) sends nothing and reads neither flag.
    if overlap and batch and f.pp_size > 1:
        raise ValueError(
            "overlap_p2p_comm=True and batch_p2p_comm=True are mutually exclusive at run time: "
            "choose one (overlap_p2p_comm for an interleaved pipeline)."
        )
    if overlap and f.pp_size > 1 and not f.interleaved_schedule:
        # megatron-core picks the interleaved schedule whenever a VPP size is set (1 included);
        # only the non-interleaved one raises on overlap_p2p_comm.
        raise ValueError(
            f"overlap_p2p_comm=True needs an interleaved pipeline schedule (PP > 1 and "
            f"virtual_pipeline_model_parallel_size set, 1 included), got PP={f.pp_size} "
            f"VPP={f.model.virtual_pipeline_model_parallel_size}: the non-interleaved schedule "
            "rejects it. Set virtual_pipeline_model_parallel_size or drop overlap_p2p_comm."
        )
    layout = _layout(planner)
    derive_overlap_p2p(planner, layout)
    derive_batch_p2p(planner, layout)
    warn_two_rank_batch(planner)
    if f.pp_size == 1 and (overlap or batch):
        planner.notes.append("p2p settings have no effect without pipeline parallelism (PP=1).")
    if f.model.overlap_p2p_comm_warmup_flush and (
        not planner.value("overlap_p2p_comm") or planner.value("batch_p2p_comm")
    ):
        raise ValueError(
            "overlap_p2p_comm_warmup_flush=True on cfg.model needs overlap_p2p_comm=True and "
            f"batch_p2p_comm=False, but the plan has overlap_p2p_comm="
            f"{planner.value('overlap_p2p_comm')}, batch_p2p_comm={planner.value('batch_p2p_comm')} "
            f"({planner.decisions['overlap_p2p_comm'].reason}); megatron-core rejects that. Set "
            "cfg.model.overlap_p2p_comm_warmup_flush=False, or use an interleaved pipeline with "
            "overlap_p2p_comm."
        )


def _layout(planner: Planner) -> str:
    """The pipeline layout in words, as the derived p2p decisions give it for a reason."""
    f = planner.job
    if f.interleaved:
        return f"interleaved pipeline (PP={f.pp_size}, VPP={f.vpp_size})"
    if f.interleaved_schedule:
        return (
            f"PP={f.pp_size} with VPP=1: one model chunk per rank, nothing to interleave "
            "(p2p overlap is yours to ask for)"
        )
    if f.pp_size > 1:
        return f"PP={f.pp_size} without VPP: p2p overlap needs an interleaved pipeline"
    return "no pipeline parallelism"


@differs_from_upstream(
    "batch_p2p_comm=True alone makes overlap_p2p_comm False (upstream derives True and writes both)"
)
def derive_overlap_p2p(planner: Planner, layout: str) -> None:
    """Decide overlap_p2p_comm: the user's, False next to a batch request, else by the layout.

    A ``batch_p2p_comm=True`` request takes the place of p2p overlap: megatron-core's interleaved
    schedule raises when both are on (``forward_backward_pipelining_with_interleaving``).
    """
    f, user = planner.job, planner.user
    if user.overlap_p2p_comm is not None:
        planner.set("overlap_p2p_comm", user.overlap_p2p_comm, "user", "set in CommOverlapConfig")
    elif user.batch_p2p_comm:
        planner.set(
            "overlap_p2p_comm",
            False,
            "derived",
            "batch_p2p_comm=True was set; the two are exclusive",
        )
    else:
        planner.set("overlap_p2p_comm", f.interleaved, "derived", layout)


@differs_from_upstream(
    "interleaved pipeline with overlap_p2p_comm=False: batch_p2p_comm True at PP > 2 "
    "(upstream leaves it False)"
)
def derive_batch_p2p(planner: Planner, layout: str) -> None:
    """Decide batch_p2p_comm: the user's, else batched wherever the pipeline sends without overlap.

    Megatron-LM sets ``batch_p2p_comm = not overlap_p2p_comm`` (``argument_utils.py``). An
    interleaved PP=2 pipeline is the exception: both directions go to the one neighbour, which a
    batch cannot keep apart (:func:`warn_two_rank_batch`).
    """
    f, user = planner.job, planner.user
    if user.batch_p2p_comm is not None:
        planner.set("batch_p2p_comm", user.batch_p2p_comm, "user", "set in CommOverlapConfig")
    elif planner.value("overlap_p2p_comm"):
        planner.set("batch_p2p_comm", False, "derived", "exclusive with overlap_p2p_comm")
    elif f.interleaved and f.pp_size == 2:
        planner.set(
            "batch_p2p_comm",
            False,
            "derived",
            "interleaved PP=2 without p2p overlap: a batch would pair both directions' sends to "
            "the one neighbour by order",
        )
    elif f.pp_size > 1:
        planner.set(
            "batch_p2p_comm",
            True,
            "derived",
            "PP > 1 without p2p overlap" if f.interleaved else layout,
        )
    else:
        planner.set("batch_p2p_comm", False, "derived", layout)


@differs_from_upstream(
    "batch_p2p_comm=True on an interleaved PP=2 pipeline without p2p overlap is planned with a "
    "warning (upstream writes it without one)"
)
def warn_two_rank_batch(planner: Planner) -> None:
    """Warn when an interleaved PP=2 pipeline batches its p2p without overlap.

    megatron-core runs it. Its interleaved schedule then sends the activation to the next rank
    and the gradient to the previous rank in one ``batch_isend_irecv``; with two ranks both are
    the same neighbour, and NCCL runs point-to-point calls to one peer in the order posted (NCCL
    user guide, "Point-to-point communication"), so the first send (the gradient, in
    ``p2p_communication._batched_p2p_ops``' order) lands in the neighbour's activation buffer.
    megatron-core's unbatched ``_p2p_ops`` gives a two-rank group a second communicator for this
    case; Megatron-LM's argument check refuses interleaving at PP=2 without p2p overlap.
    """
    f = planner.job
    if not (
        f.interleaved
        and f.pp_size == 2
        and planner.value("batch_p2p_comm")
        and not planner.value("overlap_p2p_comm")
    ):
        return
    planner.warnings.append(
        f"batch_p2p_comm=True on an interleaved pipeline with PP=2 (VPP={f.vpp_size}) and "
        "overlap_p2p_comm=False is planned as asked, but each batch sends the activation and "
        "the gradient to the one neighbour, and NCCL pairs sends with receives to one peer in "
        "order: the neighbour can receive the gradient as its activation (silently wrong "
        "training). Set batch_p2p_comm=False (megatron-core's unbatched p2p keeps the two "
        "apart) or overlap_p2p_comm=True."
    )
