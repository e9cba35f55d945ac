"""The resolution entry point: :func:`plan_comm_overlap` runs every area's rules in a fixed order.

The order is part of the contract: later areas read earlier decisions (EP reads
``overlap_grad_reduce``, the Megatron-FSDP and CUDA-graph rules read the DP and EP decisions, the
hardware notes read TP and EP), and the plan's warnings and notes
appear in the order the areas add them.
"""

from __future__ import annotations

from typing import Any

from megatron.bridge.training.comm_overlap.plan import OverlapPlan, OverlapRefusedError
from megatron.bridge.training.comm_overlap.rules.build_notes import note_megatron_core_support
from megatron.bridge.training.comm_overlap.rules.cuda_graphs import note_cuda_graphs
from megatron.bridge.training.comm_overlap.rules.dp import decide_dp
from megatron.bridge.training.comm_overlap.rules.ep import decide_ep
from megatron.bridge.training.comm_overlap.rules.fsdp import note_megatron_fsdp
from megatron.bridge.training.comm_overlap.rules.hardware_notes import note_hardware
from megatron.bridge.training.comm_overlap.rules.layout import check_job
from megatron.bridge.training.comm_overlap.rules.planner import Planner
from megatron.bridge.training.comm_overlap.rules.pp import decide_pp
from megatron.bridge.training.comm_overlap.rules.tp import decide_tp
from megatron.bridge.training.comm_overlap.rules.wgrad import decide_wgrad_deferral
from megatron.bridge.training.job import JobDescription

__all__ = ["plan_comm_overlap"]


def plan_comm_overlap(user: Any, job: JobDescription) -> OverlapPlan:
    """Resolve a ``CommOverlapConfig`` request against a job: the pure core of the rules.

    Runs the request's ``finalize()`` checks, then every rule. Raises ``TypeError``/``ValueError``
    for bad or contradictory input and :class:`OverlapRefusedError` when ``user.strict`` and a
    requested overlap was refused or a likely mistake was found (cautions about a setting the
    user chose, such as ``overlap_param_gather_with_optimizer_step``, stay warnings).
    """
    user.finalize()
    check_job(job)
    planner = Planner(user, job)
    decide_tp(planner)
    decide_pp(planner)
    decide_dp(planner)
    decide_ep(planner)
    decide_wgrad_deferral(planner)
    note_megatron_fsdp(planner)
    note_cuda_graphs(planner)
    planner.report_direct_settings()
    note_hardware(planner)
    note_megatron_core_support(planner)
    plan = planner.result()
    if user.strict and planner.warnings:
        raise OverlapRefusedError(
            "strict comm overlap: "
            + " | ".join(planner.warnings)
            + " (strict=True turns these into errors)"
        )
    return plan
