"""The search picture: each costed layout's predicted tokens/s/GPU against its memory per GPU,
the GPU's capacity as a line, the top pick and the published layout marked (:func:`plot_search`).

matplotlib is imported when :func:`plot_search` runs (the ``plot`` extra), never on import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from megatron.bridge.search.candidate import Candidate
from megatron.bridge.search.engine import SearchResult
from megatron.bridge.search.report import layout_label
from megatron.bridge.training.estimate_plot import load_pyplot, picture_digest, picture_path

__all__ = ["plot_search", "search_picture"]


def search_picture(result: SearchResult, *, title: str | None = None) -> dict[str, Any]:
    """What :func:`plot_search` draws for ``result``: every costed layout as (memory GiB,
    tokens/s/GPU), the top pick and the published one with their labels, the GPU's capacity."""
    if not result.ranked:
        raise ValueError("the search costed no layout: there is nothing to draw.")

    def point(candidate: Candidate) -> list[float]:
        return [
            round(candidate.memory.total_bytes / 2**30, 3),
            round(candidate.tokens_per_s_per_gpu, 3),
        ]

    best = result.ranked[0]
    published = result.published
    return {
        "title": title,
        "points": [point(c) for c in result.ranked],
        "top": {"at": point(best), "label": f"top pick: {layout_label(best)}"},
        "published": None
        if published is None
        else {
            "at": point(published),
            "label": f"published (rank {result.published_rank}): {layout_label(published)}",
        },
        "capacity_gib": round(best.memory.capacity_bytes / 2**30, 3),
    }


def plot_search(result: SearchResult, path: str | Path, *, title: str | None = None) -> Path:
    """Write the picture of ``result`` to ``path`` (PNG or SVG, by the suffix); returns the path.

    The file's ``Description`` metadata holds :func:`picture_digest` of :func:`search_picture`.
    """
    path = picture_path(path, "the search picture is written as")
    picture = search_picture(result, title=title)
    plt = load_pyplot("the search picture")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    memory, speed = zip(*picture["points"], strict=True)
    ax.scatter(memory, speed, s=10, color="#4c72b0", alpha=0.6, label="costed layouts")
    top = picture["top"]
    ax.scatter(
        [top["at"][0]], [top["at"][1]], s=80, marker="D", color="#55a868", label=top["label"]
    )
    published = picture["published"]
    if published is not None:
        ax.scatter(
            [published["at"][0]],
            [published["at"][1]],
            s=160,
            marker="*",
            color="#c44e52",
            label=published["label"],
        )
    ax.axvline(
        picture["capacity_gib"],
        color="black",
        linestyle="--",
        linewidth=0.8,
        label="GPU capacity",
    )
    ax.set_xlabel("memory per GPU, busiest rank (GiB)", fontsize=9)
    ax.set_ylabel("predicted tokens/s/GPU", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    ax.tick_params(labelsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    # No date in the metadata: the same search draws the same file.
    metadata: dict[str, str | None] = {"Description": picture_digest(picture)}
    if path.suffix.lower() == ".svg":
        metadata["Date"] = None
    fig.savefig(path, dpi=80, metadata=metadata)
    plt.close(fig)
    return path
