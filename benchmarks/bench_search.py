"""Measure how long ``bridge-overlap search`` takes on one core.

    uv run python benchmarks/bench_search.py [--recipe NAME [--world-size N]] [--write]

Runs the searches the goal names (:data:`GOALS`: a 671B MoE on 256 GPUs, a 70B dense model on
16384), or the one ``--recipe`` names, as the CLI runs them (the recipe's published GPU,
precision and global batch; the published layout costed beside them where its GPU count is the
one searched), and prints each one's CPU time (``time.process_time``: one core's work, whatever
else the machine runs), its wall time, the ratio of CPU time to the 60 s goal, and what the
search counted (layouts generated, pruned by their weights, refused by a rule, not fitting,
skipped by the throughput bound, costed). ``--write`` records the goal searches in
:data:`RESULTS_FILE`, from which ``scripts/render_docs.py`` generates the docs' sentence.
Nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from megatron.bridge.recipes import recipe_spec
from megatron.bridge.search import search
from megatron.bridge.search.report import layout_label

#: The goal for each search, in seconds of one core.
GOAL_SECONDS = 60.0

#: The searches the goal names: (recipe, GPU count; None: the recipe's published count).
GOALS: tuple[tuple[str, int | None], ...] = (("deepseek_v3", None), ("llama3_70b", 16384))

RESULTS_FILE = Path(__file__).resolve().with_suffix(".json")
"""The goal searches' rows, written by ``--write``."""


def measure(recipe: str, world_size: int | None) -> dict[str, Any]:
    """Run one search; its figures."""
    spec = recipe_spec(recipe)
    world_size = world_size or spec.job.world_size
    cpu, wall = time.process_time(), time.perf_counter()
    result = search(
        spec,
        world_sizes=[world_size],
        global_batch_size=spec.job.global_batch_size,
        published=spec if world_size == spec.job.world_size else None,
    )
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    top = result.ranked[0] if result.ranked else None
    return {
        "recipe": recipe,
        "gpu": spec.job.gpu,
        "precision": spec.precision,
        "world_size": world_size,
        "cpu_seconds": round(cpu, 1),
        "wall_seconds": round(wall, 1),
        "counts": dict(result.counts),
        "top": None if top is None else layout_label(top),
        "published_rank": result.published_rank,
        "published_band": result.published_band,
    }


def sentence(rows: list[dict[str, Any]]) -> str:
    """The recorded searches in words, as the docs cite them."""
    parts = []
    for r in rows:
        c = r["counts"]
        part = (
            f"{r['recipe']} on {r['world_size']} {r['gpu'].upper()} ({r['precision']}): "
            f"{r['cpu_seconds']:.1f} s of one core's CPU time, {r['cpu_seconds'] / GOAL_SECONDS:.2f} "
            f"of the {GOAL_SECONDS:.0f} s goal; {c['layouts']:,} layouts tried, {c['pruned']:,} "
            f"pruned by the weights floor, {c['no_fit']:,} above the memory, {c['skipped']:,} "
            f"skipped by the bound, {c['costed']:,} costed"
        )
        if r["published_rank"] is not None:
            part += (
                f"; the published layout ranks {r['published_rank']} (band {r['published_band']})"
            )
        parts.append(part)
    return "Measured with `benchmarks/bench_search.py --write`: " + ". ".join(parts) + ".\n"


def main() -> None:
    """Run the searches and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", help="one search of this recipe instead of the goal's")
    parser.add_argument("--world-size", type=int, help="with --recipe: the GPU count")
    parser.add_argument(
        "--write", action="store_true", help=f"record the goal searches in {RESULTS_FILE.name}"
    )
    args = parser.parse_args()
    if args.write and args.recipe:
        parser.error("--write records the goal's searches: leave out --recipe")
    if args.world_size and not args.recipe:
        parser.error("--world-size goes with --recipe")
    runs = [(args.recipe, args.world_size)] if args.recipe else list(GOALS)
    rows = []
    for recipe, world_size in runs:
        row = measure(recipe, world_size)
        rows.append(row)
        print(
            f"search {recipe} on {row['world_size']} {row['gpu']}: cpu {row['cpu_seconds']:.1f} s, "
            f"wall {row['wall_seconds']:.1f} s; cpu / goal ({GOAL_SECONDS:.0f} s): "
            f"{row['cpu_seconds'] / GOAL_SECONDS:.2f}"
        )
        print("  counts: " + ", ".join(f"{k} {v}" for k, v in row["counts"].items()))
        print(f"  top pick: {row['top']}")
        if row["published_rank"] is not None:
            print(f"  published: rank {row['published_rank']}, band {row['published_band']}")
    if args.write:
        RESULTS_FILE.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
