"""One costed layout of a search (:class:`Candidate`): the job, its overlap plan, its memory and
its step estimate, and the band the ranking puts it in (:mod:`.rank`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from megatron.bridge.search.fit import MemoryVerdict
from megatron.bridge.search.space import Layout

if TYPE_CHECKING:
    from megatron.bridge.recipes.spec import RecipeSpec
    from megatron.bridge.training.comm_overlap import OverlapPlan
    from megatron.bridge.training.estimate import Estimate

__all__ = ["SEARCHED_KNOBS", "Candidate", "knob_on", "plan_key"]

#: The overlap knobs whose choice is part of a candidate's identity: the ones a search varies.
SEARCHED_KNOBS = ("tp_comm_overlap", "overlap_moe_expert_parallel_comm")


def knob_on(plan: OverlapPlan, knob: str) -> bool:
    """Whether ``plan`` turns ``knob`` on (False for a knob it does not decide)."""
    try:
        return bool(plan.value(knob))
    except KeyError:
        return False


def plan_key(plan: OverlapPlan) -> tuple:
    """What makes two planned layouts the same job: its GPU count, batch, sharding and model, and
    the overlap the plan runs."""
    job = plan.job
    return (
        job.world_size,
        job.micro_batch_size,
        job.use_distributed_optimizer,
        job.use_megatron_fsdp,
        job.model,
        tuple(knob_on(plan, knob) for knob in SEARCHED_KNOBS),
    )


@dataclass(frozen=True)
class Candidate:
    """One costed layout."""

    spec: RecipeSpec
    """The job, as ``explain`` would plan it."""
    plan: OverlapPlan
    """Its overlap plan."""
    memory: MemoryVerdict
    """Its memory per GPU."""
    estimate: Estimate
    """Its step estimate."""
    layout: Layout | None
    """The searched layout; None for a published layout the search does not generate."""
    published: bool = False
    """This is the published layout of the recipe for this GPU, precision and GPU count."""
    band: int = 0
    """Its band in the ranking, 1 the best (:func:`.rank.banded`); 0 before it is ranked."""

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Predicted tokens/s/GPU (with the plan's overlap)."""
        assert self.estimate.prediction is not None  # estimate_step always predicts
        return self.estimate.prediction.tokens_per_s_per_gpu

    @property
    def key(self) -> tuple:
        """What makes two candidates the same job (:func:`plan_key`)."""
        return plan_key(self.plan)
