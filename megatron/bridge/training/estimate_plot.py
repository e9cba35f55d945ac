"""Draw one training step of an :class:`~megatron.bridge.training.estimate.Estimate` as lanes.

Two panels share a time axis: the step with the plan's overlap, and with every overlap knob
off. Each has a compute lane and one lane per communication stream; a hidden stream runs
beside compute, an exposed one after it (lower-bound times, as the estimate gives them).

matplotlib is imported when :func:`plot_step` runs (the ``plot`` extra), never on import.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from megatron.bridge.training.estimate.result import CP_RING

if TYPE_CHECKING:
    from megatron.bridge.training.estimate.result import Estimate

__all__ = ["plot_step"]

_COLOURS = {
    "compute": "#4c72b0",
    "tp": "#dd8452",
    "cp": "#8172b3",
    "pp": "#55a868",
    "dp": "#c44e52",
    "dp-expert": "#da8bc3",
    "ep": "#937860",
}


def _lanes(
    estimate: Estimate, *, overlap: bool
) -> tuple[list[tuple[str, float, float, bool]], float]:
    """(label, start, duration, hidden) per lane, in seconds, and the step's end."""
    compute = estimate.step.compute_seconds_at_peak
    lanes = [("compute", 0.0, compute, False)]
    cursor = compute
    for c in estimate.communication:
        label = f"{c.mode}: {c.collective}"
        hidden = c.hidden_by is not None and (overlap or c.hidden_by == CP_RING)
        if hidden:
            # Hidden streams run beside compute: the param all-gather from the start, the
            # gradient reduction ending with the backward pass, the rest spread over the step.
            start = (
                0.0
                if "all-gather (params)" in c.collective
                else max(0.0, compute - c.seconds_at_link_peak)
            )
            if c.mode in ("tp", "cp", "pp", "ep"):
                start = 0.0
            lanes.append((label, start, c.seconds_at_link_peak, True))
            cursor = max(cursor, start + c.seconds_at_link_peak)
        else:
            lanes.append((label, cursor, c.seconds_at_link_peak, False))
            cursor += c.seconds_at_link_peak
    return lanes, cursor


def plot_step(estimate: Estimate, path: str | Path, *, title: str | None = None) -> Path:
    """Write the step picture to ``path`` (PNG or SVG, chosen by the suffix); returns the path."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"plot_step writes .png or .svg, got {path.name!r}.")
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(
            "plot_step needs matplotlib: install the plot extra "
            "(pip install 'megatron-bridge-overlap[plot]', or uv sync --extra plot)."
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(True, "with the plan's overlap"), (False, "all overlap off")]
    drawn = [(_lanes(estimate, overlap=o), name) for o, name in panels]
    end = max(total for (_lanes_, total), _name in drawn)
    n = len(drawn[0][0][0])
    fig, axes = plt.subplots(2, 1, figsize=(9, 1.2 + 0.55 * n * 2), sharex=True)
    for ax, ((lanes, total), name) in zip(axes, drawn, strict=True):
        for row, (label, start, duration, hidden) in enumerate(lanes):
            mode = label.split(":")[0]
            ax.barh(
                row,
                duration * 1e3,
                left=start * 1e3,
                height=0.6,
                color=_COLOURS.get(mode, "#999999"),
                alpha=0.45 if hidden else 1.0,
                hatch="//" if hidden else None,
                edgecolor="black",
                linewidth=0.4,
            )
        ax.axvline(total * 1e3, color="black", linestyle="--", linewidth=0.8)
        ax.set_yticks(range(len(lanes)), [lane[0] for lane in lanes], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{name}: step >= {total * 1e3:.0f} ms", fontsize=9, loc="left")
        ax.set_xlim(0, end * 1e3 * 1.02)
        ax.tick_params(axis="x", labelsize=7)
    axes[-1].set_xlabel("ms (lower bound at peak; hatched = hidden behind compute)", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
