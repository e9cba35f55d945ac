"""The search picture: each costed layout's predicted tokens/s/GPU against its memory per GPU,
the GPU's capacity as a line, the best layout and the published one marked (:func:`plot_search`).

matplotlib is imported when :func:`plot_search` runs (the ``plot`` extra), never on import.
"""

from __future__ import annotations

from pathlib import Path

from megatron.bridge.search.engine import SearchResult
from megatron.bridge.search.report import layout_label

__all__ = ["plot_search"]


def plot_search(result: SearchResult, path: str | Path, *, title: str | None = None) -> Path:
    """Write the picture of ``result`` to ``path`` (PNG or SVG, by the suffix); returns the path."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"the search picture is written as .png or .svg, got {path.name!r}.")
    if not result.ranked:
        raise ValueError("the search costed no layout: there is nothing to draw.")
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(
            "the search picture needs matplotlib: install the plot extra "
            "(pip install 'megatron-bridge-overlap[plot]', or uv sync --extra plot)."
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    memory = [c.memory.total_bytes / 1e9 for c in result.ranked]
    speed = [c.tokens_per_s_per_gpu for c in result.ranked]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.scatter(memory, speed, s=10, color="#4c72b0", alpha=0.6, label="costed layouts")
    best = result.ranked[0]
    ax.scatter(
        [best.memory.total_bytes / 1e9],
        [best.tokens_per_s_per_gpu],
        s=80,
        marker="D",
        color="#55a868",
        label=f"top: {layout_label(best)}",
    )
    if result.published is not None:
        ax.scatter(
            [result.published.memory.total_bytes / 1e9],
            [result.published.tokens_per_s_per_gpu],
            s=160,
            marker="*",
            color="#c44e52",
            label=f"published (rank {result.published_rank}): {layout_label(result.published)}",
        )
    ax.axvline(
        best.memory.capacity_bytes / 1e9,
        color="black",
        linestyle="--",
        linewidth=0.8,
        label="GPU capacity",
    )
    ax.set_xlabel("memory per GPU, busiest rank (GB)", fontsize=9)
    ax.set_ylabel("predicted tokens/s/GPU", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    ax.tick_params(labelsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    # No date in the metadata: the same search draws the same file.
    metadata = {"Date": None} if path.suffix.lower() == ".svg" else {}
    fig.savefig(path, dpi=80, metadata=metadata)
    plt.close(fig)
    return path
