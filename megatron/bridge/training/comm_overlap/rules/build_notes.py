"""The note that the installed megatron-core cannot build the planned model."""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.rules.planner import Planner
from megatron.bridge.training.megatron_core_support import cannot_build_reason

__all__ = ["note_megatron_core_support"]


def note_megatron_core_support(planner: Planner) -> None:
    """Say so when the installed megatron-core has no modules for the model: the plan and the
    estimate stand, building the model is refused (``megatron_core_support``)."""
    reason = cannot_build_reason(planner.job.model)
    if reason is not None:
        planner.notes.append(reason)
