"""The collector the rules write to: decisions, warnings, cautions, notes; the user's settings.

:class:`Planner` holds one planning run: the request and the job, each knob's
:class:`~megatron.bridge.training.comm_overlap.plan.Decision`, and the messages. It reads the
user's value of a knob (from ``CommOverlapConfig`` or, where the knob table honours it, straight
from a megatron-core config), reports direct settings the plan replaces or that contradict each
other, and turns the collected decisions into an
:class:`~megatron.bridge.training.comm_overlap.plan.OverlapPlan`. It decides nothing itself.
"""

from __future__ import annotations

from typing import Any

from megatron.bridge.training.comm_overlap.knobs import KNOBS
from megatron.bridge.training.comm_overlap.plan import Decision, OverlapPlan, Source
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.upstream_divergence import differs_from_upstream

__all__ = ["Planner"]


class Planner:
    """Collects decisions, warnings and notes while the rules run."""

    def __init__(self, user: Any, job: JobDescription) -> None:
        self.user = user
        self.job = job
        self.decisions: dict[str, Decision] = {}
        self.warnings: list[str] = []
        # Cautions about a setting the user chose knowingly: shown with the warnings, but strict
        # mode does not turn them into errors (that would forbid the setting outright).
        self.cautions: list[str] = []
        self.notes: list[str] = []
        self.preset_names: tuple[str, ...] = ()

    def set(self, knob: str, value: Any, source: Source, reason: str) -> None:
        """Record ``knob``'s decision; a later call for the same knob replaces it."""
        self.decisions[knob] = Decision(knob, value, source, reason)

    def value(self, knob: str) -> Any:
        """The value decided for ``knob`` (``KeyError`` if no rule has decided it yet)."""
        return self.decisions[knob].value

    def direct_values(self, knob: str) -> tuple[tuple[str, Any], ...]:
        """Each ``(config, value)`` set straight on one of ``knob``'s targets, in table order."""
        settings = self.job.direct_settings
        return tuple((c, v) for c, name, v in settings if name == knob) if settings else ()

    @differs_from_upstream(
        "a DP knob written straight on cfg.ddp or cfg.optimizer is the user's setting (upstream "
        "overwrites it with the derived value)"
    )
    def user_value(self, knob: str) -> tuple[Any, str]:
        """The user's setting of ``knob`` and where it was made, or (None, "").

        A value written straight onto any megatron-core config the knob targets counts when the
        knob table says such a setting is honoured; it must then agree with CommOverlapConfig.
        Two configs that disagree: the first target in the knob table wins (a warning names
        both, see :meth:`report_direct_settings`).
        """
        mine = getattr(self.user, knob)
        found = self.direct_values(knob) if KNOBS[knob].direct == "honoured" else ()
        for config, theirs in found:
            if mine is not None and mine != theirs:
                raise ValueError(
                    f"{knob} is {mine!r} in CommOverlapConfig but {theirs!r} on "
                    f"cfg.{config}.{knob}: choose one, preferably in CommOverlapConfig."
                )
        if mine is not None:
            return mine, "set in CommOverlapConfig"
        if found:
            theirs = found[0][1]
            where = " and ".join(f"cfg.{c}.{knob}" for c, v in found if v == theirs)
            return theirs, f"set on {where}"
        return None, ""

    def report_direct_settings(self) -> None:
        """Warn about each setting made straight on a megatron-core config that the plan overrides.

        A reported knob's direct value that differs from the decision is replaced (and said so);
        an honoured knob set differently on two of its configs keeps the first (and says so).
        """
        # Nothing the user wrote straight onto a megatron-core config is overridden silently: a
        # reported setting the plan replaces is said, and so is an honoured one that another
        # config contradicts (the first target won in user_value; the plan writes every target).
        for knob, spec in KNOBS.items():
            decided = self.decisions[knob]
            found = self.direct_values(knob)
            if spec.direct == "reported":
                for config, value in found:
                    if decided.value != value:
                        self.warnings.append(
                            f"cfg.{config}.{knob}={value!r} is replaced by {decided.value!r} "
                            f"({decided.reason}); set {knob} in CommOverlapConfig to make it a "
                            "request."
                        )
            elif spec.direct == "honoured" and found:
                kept_config, kept = found[0]
                for config, value in found[1:]:
                    if value != kept:
                        self.warnings.append(
                            f"cfg.{kept_config}.{knob}={kept!r} but cfg.{config}.{knob}={value!r}: "
                            f"the plan keeps cfg.{kept_config}'s and writes {decided.value!r} to "
                            f"both (megatron-core reads each); set {knob} in CommOverlapConfig, or "
                            "the same value on both, to choose."
                        )

    def result(self) -> OverlapPlan:
        """The plan collected so far: every knob in table order, warnings before cautions."""
        ordered = tuple(self.decisions[k] for k in KNOBS)
        return OverlapPlan(
            job=self.job,
            decisions=ordered,
            warnings=tuple(self.warnings + self.cautions),
            notes=tuple(self.notes),
            preset_names=self.preset_names,
        )
