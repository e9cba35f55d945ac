"""The overlap options a search tries on each layout (:func:`overlap_choices`): the two whose
choice changes a ranking, TP communication overlap and EP all-to-all overlap.

- **TP overlap** (``tp_comm_overlap``): on, the userbuffers hide all but 1/TP of the TP
  collectives and take memory; off, the collectives are exposed and the memory is free. A layout
  whose userbuffers do not fit may fit without them, and a layout whose TP traffic is small
  gains little from them.
- **EP overlap** (``overlap_moe_expert_parallel_comm``): megatron-core's combined 1F1B hides a
  share of the all-to-alls. megatron-core's gate (mirrored by
  ``comm_overlap.rules.ep.decide_ep``) refuses it on many layouts (EP 1, PP > 1 without VPP,
  full recompute, ...): a request the gate refuses is a layout refused by that rule, and the
  same layout without the overlap is tried beside it.

Each option takes a :data:`OverlapMode`: ``auto`` searches it (on where the layout's rules
allow it, and off), ``on`` requests it on every layout (the rules decide, as in ``explain``),
``off`` never. The launch environment each choice needs (``CUDA_DEVICE_MAX_CONNECTIONS``) is the
plan's (``RecipeSpec.launch_env``), shown with each row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = [
    "AS_REQUESTED",
    "OVERLAP_MODES",
    "OverlapChoice",
    "OverlapMode",
    "check_overlap_modes",
    "overlap_choices",
]

OverlapMode = Literal["auto", "on", "off"]
"""How a search treats one overlap option: search it, request it on, or leave it off."""

#: The modes, as the command line offers them.
OVERLAP_MODES: tuple[OverlapMode, ...] = get_args(OverlapMode)

#: The request field of EP all-to-all overlap (``CommOverlapConfig``).
EP_OVERLAP_FIELD = "overlap_moe_expert_parallel_comm"


@dataclass(frozen=True)
class OverlapChoice:
    """The overlap request one layout is planned with."""

    tp: bool | Literal["auto"] = "auto"
    """``RecipeSpec.tp_comm_overlap``: "auto" (on where the layout can run it), True or False."""
    ep: bool | None = None
    """``overlap_moe_expert_parallel_comm`` requested True or False; None: the job's own request."""

    def changes(self, overlap: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
        """The ``RecipeSpec.changed`` keys of this choice on a spec whose overlap fields are
        ``overlap`` (kept, but for the EP field when this choice sets it)."""
        out: dict[str, Any] = {"tp_comm_overlap": self.tp}
        if self.ep is not None:
            kept = ((k, v) for k, v in overlap if k != EP_OVERLAP_FIELD)
            out["overlap"] = (*kept, (EP_OVERLAP_FIELD, self.ep))
        return out


#: The job's own overlap request: TP overlap where the layout can run it, EP overlap as asked.
AS_REQUESTED = OverlapChoice()


def check_overlap_modes(*, tp: str, ep: str, moe: bool) -> None:
    """``ValueError`` for a mode that is not one of :data:`OVERLAP_MODES`, or EP overlap
    requested on a model without experts (megatron-core refuses
    ``overlap_moe_expert_parallel_comm`` there: every layout would be refused)."""
    for name, mode in (("tp_comm_overlap", tp), ("ep_overlap", ep)):
        if mode not in OVERLAP_MODES:
            raise ValueError(f"{name}={mode!r}: choose one of {', '.join(OVERLAP_MODES)}.")
    if ep == "on" and not moe:
        raise ValueError(
            "--ep-overlap on: the model has no routed experts (num_moe_experts), and "
            "megatron-core refuses overlap_moe_expert_parallel_comm without them; give a MoE "
            "model or leave --ep-overlap at auto."
        )


def overlap_choices(
    *, tp_size: int, ep_size: int, moe: bool, tp: OverlapMode, ep: OverlapMode
) -> tuple[OverlapChoice, ...]:
    """The overlap requests a search plans a layout of ``tp_size`` and ``ep_size`` with, the
    overlap on first (it hides what the layout without it exposes; round 1 of the search keeps
    the first that fits).

    ``auto`` tries the option on and off only where it can change the step: TP overlap where
    TP > 1, EP overlap where a MoE model has EP > 1; elsewhere the job's own request stands.
    """
    tps: tuple[bool | Literal["auto"], ...] = {
        "auto": ("auto", False) if tp_size > 1 else ("auto",),
        "on": (True,),
        "off": (False,),
    }[tp]
    eps: tuple[bool | None, ...] = {
        "auto": (True, False) if moe and ep_size > 1 else (None,),
        "on": (True,),
        "off": (False,),
    }[ep]
    return tuple(OverlapChoice(tp=t, ep=e) for t in tps for e in eps)
