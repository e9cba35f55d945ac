"""What :func:`~megatron.bridge.training.estimate.estimate_step` returns, and how it reads.

:class:`StepCost` (compute), :class:`CommEntry` (one communication stream) and
:class:`Estimate` (the step) are plain results; :class:`Estimate` renders them as a text table,
one line per overlap knob, and the communication time left exposed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from megatron.bridge.training.estimate.accuracy import MeasuredAccuracy
from megatron.bridge.training.estimate.efficiency import EP_OVERLAP

__all__ = ["CP_RING", "FSDP_PREFETCH", "CommEntry", "Estimate", "Link", "Prediction", "StepCost"]

Link = Literal["nvlink", "network"]
"""Where a transfer runs: NVLink inside the NVLink domain, the GPU's network NIC outside it."""


def _fields_dict(result: Any, *, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """A result's fields as a JSON-ready dict, in declaration order, but those in ``leave_out``."""
    return {f.name: getattr(result, f.name) for f in fields(result) if f.name not in leave_out}


@dataclass(frozen=True)
class StepCost:
    """The compute side of one step on one GPU of the busiest pipeline stage."""

    tokens: int
    """Tokens in one global batch (global batch size x sequence length)."""
    flops_per_gpu: float
    """Model FLOPs this GPU computes per step (recompute excluded)."""
    compute_seconds_at_peak: float
    """Executed FLOPs (model + recompute) over the GPU's peak dense tensor-core FLOP/s: the
    compute dtype's peak for the GEMMs, the 16-bit peak for core attention unless
    ``fp8_dot_product_attention``. FLOPs only: the memory-bound kernels are
    :attr:`memory_seconds_at_peak`."""
    memory_seconds_at_peak: float
    """Bytes the memory-bound (non-GEMM, non-core-attention) kernels move, recompute included,
    over the GPU's peak HBM bandwidth (:meth:`ModelCost.elementwise_bytes_per_token`)."""
    gemm_seconds: float = 0.0
    """Executed FLOPs other than core attention at the achievable fraction of their peaks."""
    attention_seconds: float = 0.0
    """Core attention at its fused kernel's measured curve (:mod:`.attention`); 0 where it is
    priced with the GEMMs."""
    attention_source: str = ""
    """The published figures that curve is fitted to."""


@dataclass(frozen=True)
class CommEntry:
    """One communication stream of a step, per GPU."""

    mode: str
    """Parallelism: tp, cp, pp, dp, dp-expert or ep."""
    collective: str
    """The collective(s), in words."""
    bytes_per_gpu_per_step: float
    """Bytes this GPU sends per step (ring collectives: the (n-1)/n share)."""
    link: Link
    """nvlink or network."""
    seconds_at_link_peak: float
    """bytes / the link's peak per-direction bandwidth: a lower bound."""
    hidden_by: str | None
    """The overlap that takes it off the critical path (None: exposed)."""
    seconds_at_achieved_bandwidth: float
    """bytes / the bandwidth the collective reaches on its link: seconds_at_link_peak over the
    measured share of peak (:data:`~.efficiency.ALLTOALL_ACHIEVED` for EP all-to-alls, 1 for the
    rest). The schedule runs this time; hidden_seconds + exposed_seconds never exceed it."""
    formula: str = ""
    """The byte count's formula, in words."""
    hidden_seconds: float = 0.0
    """Of its time, what runs under compute the schedule gives it (with the plan's overlap)."""
    exposed_seconds: float = 0.0
    """Of its time, what stays on the critical path: seconds_at_achieved_bandwidth -
    hidden_seconds."""
    window_seconds: float = 0.0
    """The compute it may hide under in one step (hidden_seconds never exceeds it)."""

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON-ready values (the formula stays out)."""
        return _fields_dict(self, leave_out=("formula",))


@dataclass(frozen=True)
class Prediction:
    """The predicted step of the busiest stage: compute, bubble, what stays exposed."""

    step_seconds: float
    """Predicted step time: compute + bubble + exposed communication."""
    compute_seconds: float
    """Executed FLOPs over peak x achievable fraction, plus the memory-bound kernels' bytes over
    the HBM peak."""
    bubble_seconds: float
    """The pipeline bubble: (PP-1)/(VPP x micro-batches) of the compute."""
    exposed_seconds: float
    """Communication left on the critical path."""
    tokens_per_s_per_gpu: float
    """Global batch tokens / step time / GPUs."""
    achievable_fraction: float
    """Share of the peak FLOP/s the compute runs at."""
    achievable_source: str
    """Where that fraction comes from."""
    timeline: tuple[tuple[str, float, float], ...] = ()
    """(kind, start, seconds) of the compute lane: bubble, forward, backward, 1f1b (compute
    only), stall (waiting on communication: parameter all-gathers, exposed TP/CP/EP), tail
    (exposed communication after the last compute)."""
    link_intervals: tuple[tuple[str, str, float, float], ...] = ()
    """(link, stream label, start, seconds) each stream occupies its link."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (the timeline stays out)."""
        return _fields_dict(self, leave_out=("timeline", "link_intervals"))


CP_RING = "ring attention"
"""hidden_by for CP: TE's ring exchange overlaps the attention kernels themselves, no knob."""

FSDP_PREFETCH = "Megatron-FSDP prefetch"
"""hidden_by for Megatron-FSDP's per-layer collectives: with ``optim_grads_params`` it gathers
the next layer's parameters while the current one computes and reduce-scatters gradients
asynchronously, turning ``overlap_param_gather`` and ``overlap_grad_reduce`` on itself."""


@dataclass(frozen=True)
class Estimate:
    """One training step's cost on one GPU of the busiest pipeline stage."""

    model_flops_per_token: float
    """Model FLOPs per token (:meth:`ModelCost.flops_per_token`)."""
    step: StepCost
    """Compute of one step."""
    communication: tuple[CommEntry, ...]
    """Communication streams, one entry per mode and collective."""
    assumptions: tuple[str, ...]
    """What the numbers assume and leave out."""
    executed_flops_per_gpu: float = 0.0
    """FLOPs this GPU executes per step: model FLOPs plus recomputed forward passes."""
    average_flops_per_gpu: float = 0.0
    """Model FLOPs per step averaged over every GPU (what "Model TFLOP/s/GPU" divides)."""
    dense_params_per_gpu: int = 0
    """Dense (non-expert) parameters held by this GPU: what DP reduces over DP x CP."""
    expert_params_per_gpu: int = 0
    """Expert parameters held by this GPU: what expert-DP reduces."""
    pipeline_rank: int = 0
    """The busiest pipeline stage (the longest compute; the later one on a tie)."""
    knobs_off: tuple[str, ...] = ()
    """Overlap knobs that would hide an entry but the plan left off or refused."""
    prediction: Prediction | None = None
    """The predicted step with the plan's overlap."""
    without_overlap: Prediction | None = None
    """The predicted step with every overlap knob off (CP's ring still overlaps attention)."""
    accuracy: MeasuredAccuracy | None = None
    """How sure the prediction is: the error measured on published rows of the model's family."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: model_flops_per_token, step, communication, prediction(s), accuracy,
        assumptions."""
        return {
            "model_flops_per_token": self.model_flops_per_token,
            "step": _fields_dict(self.step),
            "communication": [c.to_dict() for c in self.communication],
            "prediction": None if self.prediction is None else self.prediction.to_dict(),
            "without_overlap": (
                None if self.without_overlap is None else self.without_overlap.to_dict()
            ),
            "accuracy": None if self.accuracy is None else self.accuracy.to_dict(),
            "assumptions": list(self.assumptions),
        }

    def exposed_seconds(self, *, overlap: bool = True) -> float:
        """Communication time the schedule leaves on the critical path.

        With ``overlap=False``: with every overlap knob off (CP's ring still overlaps attention).
        """
        pred = self.prediction if overlap else self.without_overlap
        return 0.0 if pred is None else pred.exposed_seconds

    def knob_summary(self) -> list[str]:
        """One line per overlap knob: what it hides, or what stays exposed while it is off."""
        by_knob: dict[str, list[CommEntry]] = {}
        for c in self.communication:
            if c.hidden_by is not None:
                by_knob.setdefault(c.hidden_by, []).append(c)
        lines = []
        for knob, entries in by_knob.items():
            ms = sum(c.hidden_seconds for c in entries) * 1e3
            total = sum(c.seconds_at_achieved_bandwidth for c in entries) * 1e3
            what = ", ".join(f"{c.mode} {c.collective}" for c in entries)
            share = (
                f"; {EP_OVERLAP.hidden_share:.0%} of what its slots allow, the measured share"
                if knob == _KNOB_OF_MODE["ep"]
                else ""
            )
            lines.append(f"{knob} hides {ms:.1f} of {total:.1f} ms/step ({what}{share})")
        for knob in self.knobs_off:
            ms = (
                sum(
                    c.seconds_at_achieved_bandwidth
                    for c in self.communication
                    if _knob_for(c) == knob
                )
                * 1e3
            )
            lines.append(f"{knob} is off: {ms:.1f} ms/step at achieved bandwidth stays exposed")
        return lines

    def render(self) -> str:
        """A compact text table of the step, then one line per overlap knob."""
        s = self.step
        lines = [
            f"model FLOPs/token {self.model_flops_per_token:.4g}; step: {s.tokens} tokens, "
            f"{s.flops_per_gpu:.4g} model FLOPs/GPU (pipeline stage {self.pipeline_rank}), "
            f"compute >= {s.compute_seconds_at_peak * 1e3:.1f} ms at peak + "
            f"{s.memory_seconds_at_peak * 1e3:.1f} ms memory-bound at HBM peak",
            f"achieved: GEMMs {s.gemm_seconds * 1e3:.1f} ms at the fitted fraction, core "
            f"attention {s.attention_seconds * 1e3:.1f} ms"
            + (
                f" at the flash-attention curve ({s.attention_source})"
                if s.attention_source
                else ""
            )
            + f", memory-bound {s.memory_seconds_at_peak * 1e3:.1f} ms; communication at "
            "achieved bandwidth below (NCCL's bus shares and latency, the EP all-to-alls' "
            "measured shares)",
        ]
        header = (
            "mode",
            "collective",
            "bytes/GPU/step",
            "link",
            "ms at peak",
            "ms achieved",
            "hidden ms",
            "exposed ms",
            "hidden by",
        )
        rows = [
            (
                c.mode,
                c.collective,
                _bytes(c.bytes_per_gpu_per_step),
                c.link,
                f"{c.seconds_at_link_peak * 1e3:.2f}",
                f"{c.seconds_at_achieved_bandwidth * 1e3:.2f}",
                f"{c.hidden_seconds * 1e3:.2f}",
                f"{c.exposed_seconds * 1e3:.2f}",
                c.hidden_by or "-",
            )
            for c in self.communication
        ]
        widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
        for row in (header, *rows):
            lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        lines.extend(self.knob_summary())
        lines.append(
            f"exposed communication {self.exposed_seconds() * 1e3:.1f} ms with the plan, "
            f"{self.exposed_seconds(overlap=False) * 1e3:.1f} ms with all overlap off"
        )
        p, off = self.prediction, self.without_overlap
        if p is not None and off is not None:
            lines.append(
                f"predicted step {p.step_seconds * 1e3:.1f} ms = compute "
                f"{p.compute_seconds * 1e3:.1f} + bubble {p.bubble_seconds * 1e3:.1f} + exposed "
                f"{p.exposed_seconds * 1e3:.1f}; {p.tokens_per_s_per_gpu:.0f} tokens/s/GPU "
                f"(all overlap off: {off.step_seconds * 1e3:.1f} ms, "
                f"{off.tokens_per_s_per_gpu:.0f} tokens/s/GPU)"
            )
            lines.append(f"compute at {p.achievable_fraction:.0%} of peak: {p.achievable_source}")
        if self.accuracy is not None:
            lines.append(self.accuracy.line())
        return "\n".join(lines)


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


_KNOB_OF_MODE = {
    "tp": "tp_comm_overlap",
    "pp": "overlap_p2p_comm",
    "ep": "overlap_moe_expert_parallel_comm",
}


def _knob_for(entry: CommEntry) -> str | None:
    if entry.mode in ("dp", "dp-expert"):
        return "overlap_param_gather" if "all-gather" in entry.collective else "overlap_grad_reduce"
    return _KNOB_OF_MODE.get(entry.mode)
