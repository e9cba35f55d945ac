"""Pipeline rules: p2p overlap for an interleaved pipeline, batched p2p otherwise."""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.rules.planner import Planner

__all__ = ["decide_pp"]


#: Why megatron-core cannot batch an interleaved PP=2 pipeline's p2p without overlap.
_TWO_RANK_BATCH = (
    "batch_p2p_comm=True on an interleaved pipeline with PP=2 and overlap_p2p_comm=False sends "
    "activations and gradients to the same neighbour in one batch_isend_irecv, which pairs "
    "sends with receives by order and so swaps them (megatron-core's unbatched p2p gives a "
    "two-rank group a second communicator for this; Megatron-LM's argument check forbids "
    "interleaving at PP=2 without p2p overlap)."
)


def decide_pp(planner: Planner) -> None:
    """Decide overlap_p2p_comm and batch_p2p_comm from the request and the pipeline layout."""
    f, user = planner.job, planner.user
    overlap, batch = user.overlap_p2p_comm, user.batch_p2p_comm
    if overlap and batch:
        raise ValueError(
            "overlap_p2p_comm=True and batch_p2p_comm=True are mutually exclusive at run time: "
            "choose one (overlap_p2p_comm for an interleaved pipeline)."
        )
    if overlap and not f.interleaved:
        raise ValueError(
            f"overlap_p2p_comm=True needs an interleaved pipeline (PP > 1 and VPP > 1), got "
            f"PP={f.pp_size} VPP={f.vpp_size}: megatron-core's non-interleaved schedule rejects "
            "it. Set virtual_pipeline_model_parallel_size or drop overlap_p2p_comm."
        )
    if f.interleaved:
        layout = f"interleaved pipeline (PP={f.pp_size}, VPP={f.vpp_size})"
        d_overlap, d_batch = True, False
    elif f.pp_size > 1:
        layout = f"PP={f.pp_size} without VPP: p2p overlap needs an interleaved pipeline"
        d_overlap, d_batch = False, True
    else:
        layout = "no pipeline parallelism"
        d_overlap, d_batch = False, False

    if overlap is not None:
        planner.set("overlap_p2p_comm", overlap, "user", "set in CommOverlapConfig")
    elif batch:
        planner.set(
            "overlap_p2p_comm",
            False,
            "derived",
            "batch_p2p_comm=True was set; the two are exclusive",
        )
    else:
        planner.set("overlap_p2p_comm", d_overlap, "derived", layout)

    two_rank_ring = f.interleaved and f.pp_size == 2 and not planner.value("overlap_p2p_comm")
    if batch and two_rank_ring:
        raise ValueError(_TWO_RANK_BATCH + " Set batch_p2p_comm=False or overlap_p2p_comm=True.")
    if batch is not None:
        planner.set("batch_p2p_comm", batch, "user", "set in CommOverlapConfig")
    elif planner.value("overlap_p2p_comm"):
        planner.set("batch_p2p_comm", False, "derived", "exclusive with overlap_p2p_comm")
    elif two_rank_ring:
        planner.set(
            "batch_p2p_comm",
            False,
            "derived",
            "interleaved PP=2 without p2p overlap: a batch would pair both directions' sends to "
            "the one neighbour by order",
        )
    else:
        value = f.pp_size > 1
        planner.set(
            "batch_p2p_comm",
            value,
            "derived",
            layout if value == d_batch else "PP > 1 without p2p overlap",
        )
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
