"""Draw one training step of an :class:`~megatron.bridge.training.estimate.Estimate` as lanes.

Two panels share a time axis: the predicted step with the plan's overlap, and with every overlap
knob off. Each has a compute lane (the pipeline bubble, each micro-batch's forward and backward
or combined 1F1B pair as compute only, stalls while the GPU waits on communication: parameter
all-gathers and the TP, CP and EP time a micro-batch leaves exposed, and the exposed tail) and
one lane per link (NVLink, network) with the intervals each stream occupies it, as the schedule
model placed them. Under the title, how sure the estimate is: the error measured on published
rows of the model's family (:attr:`Estimate.accuracy`), the figure ``explain`` prints.

matplotlib is imported when :func:`plot_step` runs (the ``plot`` extra), never on import.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from megatron.bridge.training.estimate.result import Estimate, Prediction

__all__ = ["load_pyplot", "picture_digest", "picture_path", "plot_step", "step_picture"]

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


def _ms(seconds: float) -> float:
    # 0.1 ms: finer than a pixel of any picture, coarse enough to be the same on every platform.
    return round(seconds * 1e3, 1)


def _panel(prediction: Prediction, name: str) -> dict[str, Any]:
    links = sorted({link for link, *_ in prediction.link_intervals})
    return {
        "heading": (
            f"{name}: step {prediction.step_seconds * 1e3:.0f} ms (compute "
            f"{prediction.compute_seconds * 1e3:.0f}, bubble {prediction.bubble_seconds * 1e3:.0f}, "
            f"exposed {prediction.exposed_seconds * 1e3:.0f}), "
            f"{prediction.tokens_per_s_per_gpu:.0f} tokens/s/GPU"
        ),
        "step_ms": _ms(prediction.step_seconds),
        "compute": [
            [kind, _ms(start), _ms(seconds)] for kind, start, seconds in prediction.timeline
        ],
        "links": {
            link: [
                [label.split(":")[0], _ms(start), _ms(seconds)]
                for lnk, label, start, seconds in prediction.link_intervals
                if lnk == link
            ]
            for link in links
        },
    }


def step_picture(estimate: Estimate, *, title: str | None = None) -> dict[str, Any]:
    """Everything :func:`plot_step` draws, as plain JSON-ready data (times in ms, to 0.1 ms).

    The picture is drawn from this and nothing else, so comparing it compares the picture
    without depending on how a matplotlib version encodes the pixels.
    """
    panels = [
        (estimate.prediction, "with the plan's overlap"),
        (estimate.without_overlap, "all overlap off"),
    ]
    if any(p is None for p, _name in panels):
        raise ValueError("plot_step needs an estimate with its predictions.")
    accuracy = None if estimate.accuracy is None else estimate.accuracy.line()
    return {
        "title": title,
        "accuracy": accuracy,
        "panels": [_panel(p, name) for p, name in panels],
    }


def picture_digest(picture: dict[str, Any]) -> str:
    """The SHA-256 of a :func:`step_picture`'s canonical JSON, which :func:`plot_step` writes
    into the file's metadata (``Description``)."""
    text = json.dumps(picture, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def picture_path(path: str | Path, refusal: str) -> Path:
    """``path`` as a ``Path``; a ``ValueError`` (``refusal`` + " .png or .svg, got <name>.")
    unless its suffix names a PNG or an SVG file."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"{refusal} .png or .svg, got {path.name!r}.")
    return path


def load_pyplot(user: str) -> Any:
    """matplotlib's ``pyplot`` on the Agg backend (no display needed); an ``ImportError`` saying
    that ``user`` needs the plot extra where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(
            f"{user} needs matplotlib: install the plot extra "
            "(pip install 'megatron-bridge-overlap[plot]', or uv sync --extra plot)."
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw(ax, panel: dict[str, Any]) -> None:
    """The compute lane (row 0) and one lane per link."""
    for kind, start, ms in panel["compute"]:
        ax.barh(
            0, ms, left=start, height=0.6, color=_COLOURS[kind], edgecolor="white", linewidth=0.2
        )
    links = list(panel["links"])
    for row, link in enumerate(links, start=1):
        for mode, start, ms in panel["links"][link]:
            ax.barh(
                row,
                ms,
                left=start,
                height=0.6,
                color=_COLOURS.get(mode, "#999999"),
                alpha=0.7,
                linewidth=0,
            )
    ax.set_yticks(range(1 + len(links)), ["compute", *links], fontsize=7)
    ax.invert_yaxis()


_HEADING_CHARS = 150
"""Characters of the heading's longest line at 9 points across the 11-inch figure."""


def plot_step(estimate: Estimate, path: str | Path, *, title: str | None = None) -> Path:
    """Write the step picture to ``path`` (PNG or SVG, chosen by the suffix); returns the path.

    The file's ``Description`` metadata holds :func:`picture_digest` of what it draws.
    """
    path = picture_path(path, "plot_step writes")
    picture = step_picture(estimate, title=title)
    plt = load_pyplot("plot_step")
    import matplotlib.patches

    end = max(panel["step_ms"] for panel in picture["panels"])
    fig, axes = plt.subplots(2, 1, figsize=(11, 4.2), sharex=True)
    for ax, panel in zip(axes, picture["panels"], strict=True):
        _draw(ax, panel)
        ax.axvline(panel["step_ms"], color="black", linestyle="--", linewidth=0.8)
        ax.set_title(panel["heading"], fontsize=9, loc="left")
        ax.set_xlim(0, end * 1.02)
        ax.tick_params(axis="x", labelsize=7)
    labels = {"stall": "stall (exposed communication)"}
    handles = [
        matplotlib.patches.Patch(color=c, label=labels.get(k, k))
        for k, c in _COLOURS.items()
        if k != "tail"
    ]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=6, frameon=False)
    axes[-1].set_xlabel(
        "ms (compute at the achievable fraction of peak; link lanes: when each stream runs)",
        fontsize=8,
    )
    # The accuracy line in lines the figure's width holds at this size.
    accuracy = textwrap.wrap(picture["accuracy"] or "", width=_HEADING_CHARS)
    heading = "\n".join(line for line in (title, *accuracy) if line)
    if heading:
        fig.suptitle(heading, fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=80, metadata={"Description": picture_digest(picture)})
    plt.close(fig)
    return path
