"""The published layouts as a test of the search: where each one ranks.

    uv run python benchmarks/search_published.py [--recipe NAME ...] [--markdown]

For every published (model, GPU, precision, GPU count) group (``recipes/published_runs.csv``,
``bridge-overlap recipes``) it runs the search on that GPU, precision, GPU count and global
batch, costs the published layout beside it, and prints the published layout's rank, how far
its predicted tokens/s/GPU is below the top one, and the top layout; then the fraction of groups
whose published layout is within 10% of the top (the goal: at least 80%). ``--markdown`` prints
the table as the docs show it. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import time

from megatron.bridge.recipes import available_recipes, recipe_spec
from megatron.bridge.search import search
from megatron.bridge.search.report import layout_label

#: A published layout within this share of the top one counts as found by the search.
WITHIN = 0.10


def _groups(names: list[str]) -> list[tuple[str, object]]:
    out = []
    for name in names:
        spec = recipe_spec(name)
        if spec is None:
            continue
        for run in spec.published:
            out.append((name, spec.with_overrides(gpu=run.gpu, precision=run.precision)))
    return out


def main() -> None:
    """Search every published group and print where its published layout ranks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", action="append", help="only these recipes (repeatable)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    names = args.recipe or sorted(available_recipes())
    rows = []
    for name, spec in _groups(names):
        job = spec.job
        cpu = time.process_time()
        result = search(
            spec,
            world_sizes=[job.world_size],
            global_batch_size=job.global_batch_size,
            top=1,
            published=spec,
        )
        cpu = time.process_time() - cpu
        top = result.ranked[0] if result.ranked else None
        rows.append(
            {
                "group": f"{name} {job.gpu} {spec.precision} {job.world_size}",
                "rank": result.published_rank,
                "gap": result.published_gap,
                "published": None
                if result.published is None
                else f"{layout_label(result.published)}",
                "note": result.published_note,
                "top": None if top is None else layout_label(top),
                "top_speed": None if top is None else top.tokens_per_s_per_gpu,
                "cpu": cpu,
            }
        )
        row = rows[-1]
        if not args.markdown:
            gap = "-" if row["gap"] is None else f"{row['gap']:.1%}"
            print(
                f"{row['group']:<40} rank {row['rank']!s:>5}  gap {gap:>6}  top {row['top']}"
                f"  ({cpu:.0f} s cpu)" + (f"  [{row['note']}]" if row["note"] else ""),
                flush=True,
            )
    ranked = [r for r in rows if r["gap"] is not None]
    within = sum(r["gap"] <= WITHIN for r in ranked)
    if args.markdown:
        print("| group (recipe, GPU, precision, GPUs) | published rank | below top | top layout |")
        print("|---|---:|---:|---|")
        for r in rows:
            gap = "not ranked: " + (r["note"] or "") if r["gap"] is None else f"{r['gap']:.1%}"
            print(f"| {r['group']} | {r['rank'] or '-'} | {gap} | {r['top'] or '-'} |")
    print(
        f"\npublished layout within {WITHIN:.0%} of the top: {within} of {len(rows)} groups "
        f"({within / max(1, len(rows)):.0%}; goal >= 80%)"
    )


if __name__ == "__main__":
    main()
