"""The published layouts as a test of the search: where each one ranks.

    uv run python benchmarks/search_published.py [--recipe NAME ...] [--markdown] [--write]

For every published (model, GPU, precision, GPU count) group (``recipes/published_runs.csv``,
``bridge-overlap recipes``) it runs the search on that GPU, precision, GPU count and global
batch, costs the published layout beside it (with the overlap choices the search tries on every
layout), and prints the published layout's rank and band, how far its predicted tokens/s/GPU is
below the top pick, and the top pick; then the two headline figures: the share of groups whose
published layout is within :data:`WITHIN` of the top pick (the goal: at least 80%), and the
share whose published layout is in the top band (the estimate cannot tell it from the fastest:
found by the search). ``--markdown`` prints the table as the docs show it; ``--write`` (every
recipe) writes the rows to :data:`RESULTS_FILE`, from which ``scripts/render_docs.py`` generates
that table. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from megatron.bridge.recipes import available_recipes, recipe_spec
from megatron.bridge.search import search
from megatron.bridge.search.report import layout_label

#: A published layout within this share of the top pick counts as close to it.
WITHIN = 0.10
#: The share of groups the goal asks to be within :data:`WITHIN` of the top pick.
GOAL = 0.80

RESULTS_FILE = Path(__file__).resolve().with_suffix(".json")
"""Every group's row, written by ``--write``."""


def groups(names: list[str]) -> list[tuple[str, Any]]:
    """Each published (recipe, GPU, precision, GPU count) group of the recipes ``names``: the
    recipe's name and its published run as a job."""
    out = []
    for name in names:
        spec = recipe_spec(name)
        if spec is None:
            continue
        for run in spec.published:
            out.append((name, spec.with_overrides(gpu=run.gpu, precision=run.precision)))
    return out


def group_name(name: str, spec: Any) -> str:
    """``recipe gpu precision GPUs`` of a group."""
    return f"{name} {spec.job.gpu} {spec.precision} {spec.job.world_size}"


def published_search(spec: Any, *, top: int = 1) -> Any:
    """The search at the GPU count and global batch of ``spec``'s job, its layout costed as the
    published one; the ``top`` layouts ranked."""
    job = spec.job
    return search(
        spec,
        world_sizes=[job.world_size],
        global_batch_size=job.global_batch_size,
        top=top,
        published=spec,
    )


def group_row(name: str, spec: Any) -> dict[str, Any]:
    """The search of one published group: where its published layout ranks, in which band, and
    the top pick."""
    job = spec.job
    result = published_search(spec)
    top = result.ranked[0] if result.ranked else None
    return {
        "group": group_name(name, spec),
        "world_size": job.world_size,
        "rank": result.published_rank,
        "band": result.published_band,
        "band_width": result.band_width,
        "gap": result.published_gap,
        "published": None if result.published is None else layout_label(result.published),
        "note": result.published_note,
        "top": None if top is None else layout_label(top),
    }


def summary(rows: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(groups whose published layout is within :data:`WITHIN` of the top pick, groups whose
    published layout is in the top band, groups)."""
    within = sum(r["gap"] is not None and r["gap"] <= WITHIN for r in rows)
    return within, sum(r["band"] == 1 for r in rows), len(rows)


def summary_sentence(rows: list[dict[str, Any]]) -> str:
    """The two headline figures of the rows, in words."""
    within, banded, total = summary(rows)
    return (
        f"Within {WITHIN:.0%} of the top pick: {within} of the {total} groups "
        f"({within / max(1, total):.0%}; the goal is {GOAL:.0%}). In the top band (within the "
        f"estimate's measured error of the fastest layout: found by the search): {banded} of "
        f"the {total} ({banded / max(1, total):.0%})."
    )


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table of the rows and the headline figures, as the docs show them."""
    lines = [
        "| group (recipe, GPU, precision, GPUs) | published rank | band | below top pick "
        "| top pick |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rows:
        gap = "not ranked: " + (r["note"] or "") if r["gap"] is None else f"{r['gap']:.1%}"
        lines.append(
            f"| {r['group']} | {r['rank'] or '-'} | {r['band'] or '-'} | {gap} "
            f"| {r['top'] or '-'} |"
        )
    lines += ["", summary_sentence(rows)]
    return "\n".join(lines) + "\n"


def far_groups(rows: list[dict[str, Any]]) -> str:
    """The groups whose published layout is more than :data:`WITHIN` below the top pick, or
    not ranked: a Markdown list, each with its published layout and the top pick."""
    far = [r for r in rows if r["gap"] is None or r["gap"] > WITHIN]
    if not far:
        return f"Every published layout is within {WITHIN:.0%} of its top pick.\n"
    lines = [f"The groups more than {WITHIN:.0%} below the top pick, or not ranked:", ""]
    for r in far:
        where = (
            f"not ranked ({r['note']})"
            if r["gap"] is None
            else f"{r['gap']:.1%} below, band {r['band']}"
        )
        lines.append(f"- {r['group']}: published `{r['published']}` {where}; top pick `{r['top']}`")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Search every published group and print where its published layout ranks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", action="append", help="only these recipes (repeatable)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--write", action="store_true", help=f"write every group's row to {RESULTS_FILE.name}"
    )
    args = parser.parse_args()
    if args.write and args.recipe:
        parser.error("--write records every recipe's groups: leave out --recipe")
    names = args.recipe or sorted(available_recipes())
    rows = []
    for name, spec in groups(names):
        cpu = time.process_time()
        row = group_row(name, spec)
        cpu = time.process_time() - cpu
        rows.append(row)
        if not args.markdown:
            gap = "-" if row["gap"] is None else f"{row['gap']:.1%}"
            print(
                f"{row['group']:<40} rank {row['rank']!s:>5}  band {row['band']!s:>3}  "
                f"gap {gap:>6}  top {row['top']}  ({cpu:.0f} s cpu)"
                + (f"  [{row['note']}]" if row["note"] else ""),
                flush=True,
            )
    if args.write:
        RESULTS_FILE.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        print(markdown(rows), end="")
    else:
        print("\n" + summary_sentence(rows))


if __name__ == "__main__":
    main()
