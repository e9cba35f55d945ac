"""Upstream's two measured EP-overlap A/Bs on Qwen3-30B-A3B beside what the step estimate predicts.

    uv run python benchmarks/ep_overlap_ab.py

Both ran Qwen3-30B-A3B on 16 x H100 in BF16 at TP1 PP1 CP1 EP16, micro-batch 1, global batch
1024, sequence 4096, with ``overlap_moe_expert_parallel_comm`` off and then on, all else held:

- Megatron-Bridge PR 5094 (HybridEP through the flex dispatcher, forced load balancing, CUDA
  graphs): the estimate's EP-overlap share is measured on it (``efficiency.EP_OVERLAP``), so it
  checks the schedule's slots, not the share;
- Megatron-Bridge PR 3862 (``docs/training/communication-overlap.md`` upstream: the ``alltoall``
  dispatcher, CUDA graphs and fused permutation off; steady steps 41.25 s without and 31.31 s
  with the overlap): a different dispatcher with four times HybridEP's network bytes, on which
  nothing is fitted.

Each job is the Qwen3-30B-A3B recipe's model in BF16 with the run's dispatcher and EP16, its
experts outside the fused grouped MLP (an H100 run; the recipe's GB300 run has it). Prints the
measured and predicted steps and ratios as a markdown table; ``tests/unit_tests/training/
test_step_model.py`` holds the ratios within 15 % and ``scripts/render_docs.py`` writes the table
into the docs. Nothing here asserts.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.estimate import Estimate, efficiency, estimate_step
from megatron.bridge.training.job import JobDescription, ModelDescription


@dataclass(frozen=True)
class MeasuredAB:
    """One of upstream's EP-overlap A/Bs: its dispatcher and its measured steps."""

    label: str
    """The A/B as the docs' table names it."""
    dispatch: Mapping[str, str]
    """The model fields that set the run's dispatcher."""
    step_without: float
    """Measured seconds per step with the overlap off."""
    step_with: float
    """Measured seconds per step with the overlap on."""

    @property
    def ratio(self) -> float:
        """The measured speed-up."""
        return self.step_without / self.step_with


HYBRIDEP = MeasuredAB(
    label="HybridEP (PR 5094; the share is measured here)",
    dispatch=MappingProxyType(
        {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}
    ),
    step_without=efficiency.EP_OVERLAP.step_without,
    step_with=efficiency.EP_OVERLAP.step_with,
)
"""Megatron-Bridge PR 5094's profiled A/B (its timed runs, ``efficiency.EP_OVERLAP``)."""

ALLTOALL = MeasuredAB(
    label="`alltoall`, CUDA graphs and fused permutation off (PR 3862)",
    dispatch=MappingProxyType({"moe_token_dispatcher_type": "alltoall"}),
    step_without=41.25,
    step_with=31.31,
)
"""Megatron-Bridge PR 3862's A/B (upstream ``docs/training/communication-overlap.md``)."""

MEASURED = (HYBRIDEP, ALLTOALL)
"""Both A/Bs, in the docs' order."""


@functools.cache
def qwen3_30b_a3b() -> ModelDescription:
    """The Qwen3-30B-A3B recipe's model as the A/Bs ran it: BF16, EP16, the experts outside the
    fused grouped MLP; the dispatcher is each A/B's."""
    model = recipe_spec("qwen3_30b_a3b", precision="bf16").job.model
    return dataclasses.replace(
        model, expert_model_parallel_size=16, use_transformer_engine_op_fuser=False
    )


def estimate(ab: MeasuredAB, *, ep_overlap: bool) -> Estimate:
    """The step estimate of ``ab``'s run with the overlap on or off."""
    job = JobDescription(
        model=dataclasses.replace(qwen3_30b_a3b(), **ab.dispatch),
        world_size=16,
        gpu="h100",
        micro_batch_size=1,
        global_batch_size=1024,
        use_distributed_optimizer=True,
    )
    request = CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=ep_overlap)
    return estimate_step(plan_comm_overlap(request, job))


def predicted(ab: MeasuredAB) -> tuple[float, float]:
    """Predicted seconds per step (without, with) the overlap."""
    off, on = (estimate(ab, ep_overlap=knob) for knob in (False, True))
    return off.prediction.step_seconds, on.prediction.step_seconds


def table() -> str:
    """The measured and predicted steps of both A/Bs as a markdown table."""
    lines = [
        "| A/B | Measured (without / with) | Predicted (without / with) |",
        "|---|---|---|",
    ]
    for ab in MEASURED:
        without, with_ = predicted(ab)
        lines.append(
            f"| {ab.label} | {ab.step_without:.2f} s / {ab.step_with:.2f} s, {ab.ratio:.2f}x "
            f"| {without:.2f} s / {with_:.2f} s, {without / with_:.2f}x |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(), end="")
