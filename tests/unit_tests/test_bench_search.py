"""The record of ``benchmarks/bench_search.py --write`` (the goal searches the docs cite): it
holds each search the goal names once, and each one's counts account for every layout tried."""

from __future__ import annotations

import json

from megatron.bridge.recipes import recipe_spec
from tests.unit_tests.repo_scripts import load_script

bench_search = load_script("benchmarks/bench_search.py")


def test_the_record_holds_each_goal_search_once():
    rows = json.loads(bench_search.RESULTS_FILE.read_text(encoding="utf-8"))
    expected = [
        (recipe, size or recipe_spec(recipe).job.world_size) for recipe, size in bench_search.GOALS
    ]
    assert [(r["recipe"], r["world_size"]) for r in rows] == expected, (
        "benchmarks/bench_search.json is stale: run `uv run python benchmarks/bench_search.py "
        "--write`"
    )
    ends = ("pruned", "rejected", "overlap_refused", "no_fit", "skipped", "costed")
    for row in rows:
        counts = row["counts"]
        assert counts["layouts"] == sum(counts[k] for k in ends), row["recipe"]
