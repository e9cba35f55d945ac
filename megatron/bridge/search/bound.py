"""An upper bound on a planned layout's predicted tokens/s/GPU, without laying its step out
(:func:`throughput_ceiling`).

The step estimate lays the busiest stage's micro-batches out on megatron-core's schedule
(``estimate.schedule.simulate``): the step starts with the pipeline bubble, ``(PP - 1)`` times
one segment's forward and backward, then runs every segment (micro-batches x model chunks).
Each segment lasts its compute plus what its in-layer communication exposes, and a stream
hides at most its ``hideable`` share of its seconds. Hence, summed over the segments::

    step >= compute x (1 + (PP - 1) / segments) + TP x (1 / TP) + EP x (1 - EP share)

- compute: the busiest stage's compute as the estimate prices it and picks the stage by
  (``step.stage_compute``): the executed FLOPs (model FLOPs plus the recomputed forwards) at the
  achievable fraction of the peaks they run at, plus the memory-bound kernels' bytes at the HBM
  peak, plus the estimate's kernel terms (grouped GEMMs, unfused experts, Mamba scans, loss);
- TP: its collectives' seconds at link peak (``comm.tp_transfers`` priced by ``comm.price``);
  with ``tp_comm_overlap`` on, TP overlap hides at most (TP - 1) / TP of them, off none;
- EP: the all-to-alls' seconds; with ``overlap_moe_expert_parallel_comm`` on (and EP > 1, the
  estimate's condition), EP overlap hides at most ``EP_OVERLAP.hidden_share`` of them, off none.

The shares are those of the overlap the plan runs: a search plans each layout with and without
them (:mod:`.overlap`), and the bound of each is its own.
tokens / step / world size then bounds the prediction from above. The search costs layouts best
bound first and skips those whose bound is below what they must beat: a skipped layout could
not have ranked there. ``tests/unit_tests/test_search_bound.py`` holds the bound to the estimate
on every layout of small searches.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from megatron.bridge.search.candidate import knob_on
from megatron.bridge.training.estimate.comm import ep_transfers, price, tp_transfers
from megatron.bridge.training.estimate.efficiency import EP_OVERLAP, achievable_fraction
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.stage import Stage, busiest_stage

# The estimate's compute itself, not a copy of it: the bound must count exactly what the step
# counts, on the stage the step picks.
from megatron.bridge.training.estimate.step import stage_compute
from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.job import ModelDescription

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import OverlapPlan
    from megatron.bridge.training.job import JobDescription

__all__ = ["throughput_ceiling"]


@functools.lru_cache(maxsize=1024)
def _cost(model: ModelDescription) -> ModelCost:
    return ModelCost(model)


#: The overlap-free parts of the bound, by job: a search plans each layout with several overlap
#: choices, whose jobs are one and the same.
_PARTS: dict[JobDescription, tuple[float, float, float, float]] = {}
_PARTS_KEPT = 4096


def _parts(plan: OverlapPlan) -> tuple[float, float, float, float]:
    """(tokens of the step, compute with the bubble, TP seconds at link peak, EP seconds at link
    peak) of ``plan``'s job, none of which depends on the plan's overlap (``comm.price`` reads
    the plan for what it hides, not for what a transfer takes at peak)."""
    job = plan.job
    found = _PARTS.get(job)
    if found is not None:
        return found
    if job.gpu is None or job.micro_batch_size is None:
        raise ValueError("the throughput bound needs the job's GPU and micro-batch size")
    gpu = gpu_spec(job.gpu)
    micro_batches = job.micro_batches
    mbs = job.micro_batch_size
    cost = _cost(job.model)
    dp = job.dp_size
    tokens = micro_batches * mbs * dp * job.model.seq_length
    fraction = achievable_fraction(gpu.name, job.compute_dtype).fraction

    def seconds(stage: Stage) -> float:
        # The stage's executed FLOPs at the fitted rate, its memory-bound bytes at the HBM peak
        # and its kernel terms, on one GPU's tokens: the estimate's own compute, and the
        # stage the estimate picks by it.
        return stage_compute(job, gpu, cost, stage, tokens=tokens / dp, fraction=fraction).seconds

    stage = busiest_stage(
        job, cost, micro_batch_size=mbs, micro_batches=micro_batches, seconds=seconds
    )
    segments = micro_batches * stage.vpp
    compute = seconds(stage) * (1 + (job.pp_size - 1) / segments)
    entries, _ = price(
        [*tp_transfers(job, stage), *ep_transfers(job, stage)],
        plan=plan,
        gpu=gpu,
        nvlink_domain=job.nvlink_ranks,
    )
    tp = sum(e.seconds_at_link_peak for e in entries if e.mode == "tp")
    ep = sum(e.seconds_at_link_peak for e in entries if e.mode == "ep")
    if len(_PARTS) >= _PARTS_KEPT:
        _PARTS.clear()
    _PARTS[job] = found = (float(tokens), compute, tp, ep)
    return found


def throughput_ceiling(plan: OverlapPlan) -> float:
    """An upper bound on ``estimate_step(plan)``'s tokens/s/GPU (see the module docstring).
    ``ValueError`` where the job lacks what the estimate needs."""
    job = plan.job
    if job.gpu is None:
        raise ValueError("the throughput bound needs the job's GPU and micro-batch size")
    tokens, step, tp, ep = _parts(plan)
    tp_exposed = 1 / job.tp_size if knob_on(plan, "tp_comm_overlap") else 1.0
    ep_on = job.ep_size > 1 and knob_on(plan, "overlap_moe_expert_parallel_comm")
    ep_exposed = 1 - EP_OVERLAP.hidden_share if ep_on else 1.0
    return tokens / (step + tp * tp_exposed + ep * ep_exposed) / job.world_size
