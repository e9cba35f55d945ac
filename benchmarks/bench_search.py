"""Measure how long ``bridge-overlap search`` takes on one core.

    uv run python benchmarks/bench_search.py [--recipe deepseek_v3] [--world-size 256]

Runs the search the CLI runs (the recipe's published GPU, precision and global batch) once and
prints its CPU time (``time.process_time``: one core's work, whatever else the machine runs),
its wall time, the ratio of CPU time to the 60 s goal, and what the search counted (layouts
generated, pruned by their weights, refused by a rule, not fitting, skipped by the throughput
bound, costed). Nothing here asserts.
"""

from __future__ import annotations

import argparse
import time

from megatron.bridge.recipes import recipe_spec
from megatron.bridge.search import search

#: The goal for a DeepSeek-V3 search on 256 GPUs, in seconds of one core.
GOAL_SECONDS = 60.0


def main() -> None:
    """Run one search and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="deepseek_v3")
    parser.add_argument("--world-size", type=int)
    args = parser.parse_args()
    spec = recipe_spec(args.recipe)
    world_size = args.world_size or spec.job.world_size
    cpu, wall = time.process_time(), time.perf_counter()
    result = search(
        spec,
        world_sizes=[world_size],
        global_batch_size=spec.job.global_batch_size,
        published=spec,
    )
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        f"search {args.recipe} on {world_size} {spec.job.gpu}: cpu {cpu:.1f} s, wall {wall:.1f} s"
    )
    print(f"cpu / goal ({GOAL_SECONDS:.0f} s): {cpu / GOAL_SECONDS:.2f}")
    print("counts: " + ", ".join(f"{k} {v}" for k, v in result.counts.items()))
    if result.ranked:
        top = result.ranked[0]
        print(f"top: {top.tokens_per_s_per_gpu:.0f} tokens/s/GPU")
    if result.published is not None:
        print(f"published: rank {result.published_rank}, {result.published_gap:.1%} below the top")


if __name__ == "__main__":
    main()
