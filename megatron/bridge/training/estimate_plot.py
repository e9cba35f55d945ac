"""Draw one training step of an :class:`~megatron.bridge.training.estimate.Estimate` as lanes.

Two panels share a time axis: the predicted step with the plan's overlap, and with every overlap
knob off. Each has a compute lane (the pipeline bubble, each micro-batch's forward and backward
or combined 1F1B pair, stalls waiting for parameters, the exposed tail) and one lane per link
(NVLink, network) with the intervals each stream occupies it, as the schedule model placed them.

matplotlib is imported when :func:`plot_step` runs (the ``plot`` extra), never on import.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from megatron.bridge.training.estimate.result import Estimate, Prediction

__all__ = ["plot_step"]

_COLOURS = {
    "bubble": "#bbbbbb",
    "forward": "#4c72b0",
    "backward": "#2a4a80",
    "1f1b": "#6a5acd",
    "stall": "#c44e52",
    "tail": "#c44e52",
    "tp": "#dd8452",
    "cp": "#8172b3",
    "pp": "#55a868",
    "dp": "#c44e52",
    "dp-expert": "#da8bc3",
    "ep": "#937860",
}


def _draw(ax, prediction: Prediction) -> None:
    """The compute lane (row 0) and one lane per link."""
    for kind, start, seconds in prediction.timeline:
        ax.barh(
            0,
            seconds * 1e3,
            left=start * 1e3,
            height=0.6,
            color=_COLOURS[kind],
            edgecolor="white",
            linewidth=0.2,
        )
    links = sorted({link for link, *_ in prediction.link_intervals})
    for row, link in enumerate(links, start=1):
        for lnk, label, start, seconds in prediction.link_intervals:
            if lnk == link:
                mode = label.split(":")[0]
                ax.barh(
                    row,
                    seconds * 1e3,
                    left=start * 1e3,
                    height=0.6,
                    color=_COLOURS.get(mode, "#999999"),
                    alpha=0.7,
                    linewidth=0,
                )
    ax.set_yticks(range(1 + len(links)), ["compute", *links], fontsize=7)
    ax.invert_yaxis()


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
    import matplotlib.patches
    import matplotlib.pyplot as plt

    panels = [
        (estimate.prediction, "with the plan's overlap"),
        (estimate.without_overlap, "all overlap off"),
    ]
    if any(p is None for p, _name in panels):
        raise ValueError("plot_step needs an estimate with its predictions.")
    end = max(p.step_seconds for p, _name in panels)
    fig, axes = plt.subplots(2, 1, figsize=(11, 4.2), sharex=True)
    for ax, (prediction, name) in zip(axes, panels, strict=True):
        _draw(ax, prediction)
        ax.axvline(prediction.step_seconds * 1e3, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(
            f"{name}: step {prediction.step_seconds * 1e3:.0f} ms (compute "
            f"{prediction.compute_seconds * 1e3:.0f}, bubble {prediction.bubble_seconds * 1e3:.0f}, "
            f"exposed {prediction.exposed_seconds * 1e3:.0f}), "
            f"{prediction.tokens_per_s_per_gpu:.0f} tokens/s/GPU",
            fontsize=9,
            loc="left",
        )
        ax.set_xlim(0, end * 1e3 * 1.02)
        ax.tick_params(axis="x", labelsize=7)
    handles = [
        matplotlib.patches.Patch(color=c, label=k) for k, c in _COLOURS.items() if k != "tail"
    ]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=6, frameon=False)
    axes[-1].set_xlabel(
        "ms (compute at the achievable fraction of peak; link lanes: when each stream runs)",
        fontsize=8,
    )
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
