"""The plan data model: one :class:`Decision` per knob (value, source, reason) for one job.

:class:`OverlapPlan` holds the :class:`~megatron.bridge.training.job.JobDescription` it was
made for, the decisions, and warnings and notes. It is frozen and serializes to JSON
(``OverlapPlan.to_dict``/``from_dict``); the JSON Schema of that layout ships as
``megatron/bridge/explain.schema.json`` (``$defs/plan``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from megatron.bridge.training.comm_overlap.knobs import KNOBS, Area
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.userbuffers import published_name_for

__all__ = ["Decision", "OverlapPlan", "OverlapRefusedError", "Source"]

Source = Literal["default", "derived", "user", "refused"]
"""Where a decision came from."""


class OverlapRefusedError(ValueError):
    """A requested overlap cannot run with this layout and ``strict=True`` forbids falling back."""


class Decision(NamedTuple):
    """One knob's resolved value, where it came from and why."""

    knob: str
    """Knob name (the megatron-core field it is written to has the same name)."""
    value: Any
    """Resolved value."""
    source: Source
    """default, derived (from the layout), user (set by the user) or refused (request turned down)."""
    reason: str
    """One line saying why."""

    @property
    def area(self) -> Area:
        """tp, pp, dp, ep or wgrad."""
        return KNOBS[self.knob].area


@dataclass(frozen=True)
class OverlapPlan:
    """The resolved overlap settings of one layout, each with its reason.

    ``preset_names`` are the published names of the userbuffers preset in use (empty for a custom
    preset or TE defaults). ``warnings`` are refusals and likely mistakes, each with its fix;
    ``notes`` are informational.
    """

    job: JobDescription
    decisions: tuple[Decision, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    preset_names: tuple[str, ...] = ()

    def decision(self, knob: str) -> Decision:
        """The decision for ``knob``; ``KeyError`` naming the known knobs otherwise."""
        for d in self.decisions:
            if d.knob == knob:
                return d
        raise KeyError(f"No decision for {knob!r}; knobs are {[d.knob for d in self.decisions]}.")

    def value(self, knob: str) -> Any:
        """The resolved value of ``knob``."""
        return self.decision(knob).value

    @property
    def preset_name(self) -> str | None:
        """The published name of the userbuffers preset in use that describes this run.

        Presets with equal values are published under several names; the one whose GPU family,
        precision, hidden size and TP size fit the facts is chosen. None when TP overlap is off
        or the preset is custom (or TE's defaults).
        """
        if not self.value("tp_comm_overlap") or not self.preset_names:
            return None
        f = self.job
        return published_name_for(
            self.preset_names,
            gpu=f.gpu,
            precision=f.precision,
            hidden_size=f.model.hidden_size,
            tp_size=f.tp_size,
        )

    @property
    def a2a_overlap(self) -> bool:
        """Whether EP all-to-all overlap runs in this plan (the launch environment reads it)."""
        return bool(self.value("overlap_moe_expert_parallel_comm"))

    @property
    def refused(self) -> tuple[Decision, ...]:
        """Requests the layout turned down."""
        return tuple(d for d in self.decisions if d.source == "refused")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with stable keys: job, derived, decisions, preset_names, warnings, notes."""
        return {
            "job": self.job.to_dict(),
            "derived": {
                "data_parallel_size": self.job.dp_size,
                "expert_data_parallel_size": self.job.expert_data_parallel_size,
            },
            "decisions": [
                {
                    "knob": d.knob,
                    "area": d.area,
                    "value": d.value,
                    "source": d.source,
                    "reason": d.reason,
                }
                for d in self.decisions
            ],
            "preset_names": list(self.preset_names),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OverlapPlan:
        """Rebuild a plan from :meth:`to_dict` output."""
        return cls(
            job=JobDescription.from_dict(data["job"]),
            decisions=tuple(
                Decision(d["knob"], d["value"], d["source"], d["reason"]) for d in data["decisions"]
            ),
            warnings=tuple(data["warnings"]),
            notes=tuple(data["notes"]),
            preset_names=tuple(data["preset_names"]),
        )

    def render(self) -> str:
        """The plan as aligned text, one line per knob, grouped by area, warnings last."""
        titles = {
            "tp": "Tensor parallel (TE userbuffers)",
            "pp": "Pipeline parallel",
            "dp": "Data parallel",
            "ep": "Expert parallel",
            "wgrad": "Embedding wgrad deferral",
        }
        lines: list[str] = []
        width = max(len(d.knob) for d in self.decisions)
        for area, title in titles.items():
            rows = [d for d in self.decisions if d.area == area]
            lines.append(f"{title}:")
            for d in rows:
                shown = _short_value(d.knob, d.value, self.preset_names)
                lines.append(f"  {d.knob:<{width}}  {shown:<14} [{d.source}] {d.reason}")
        for note in self.notes:
            lines.append(f"note: {note}")
        for warning in self.warnings:
            lines.append(f"WARNING: {warning}")
        return "\n".join(lines)


def _short_value(knob: str, value: Any, preset_names: tuple[str, ...]) -> str:
    if knob == "tp_comm_overlap_cfg" and value is not None:
        return f"{len(value)} GEMMs" if not preset_names else "preset"
    if knob == "bucket_size" and isinstance(value, int):
        return f"{value // (1024 * 1024)}Mi params" if value % (1024 * 1024) == 0 else str(value)
    return str(value)
