"""The published-layouts table of ``docs/training/search.md`` against the search as it runs now.

``benchmarks/search_published.py --write`` records every published group's search (minutes);
the docs generate their table from that record. Here the record covers every published group,
and the groups of 8 GPUs (seconds each) are searched again and must give the recorded rows.
"""

from __future__ import annotations

import json

import pytest

from megatron.bridge.recipes import available_recipes
from tests.unit_tests.repo_scripts import load_script

search_published = load_script("benchmarks/search_published.py")
RECORDED = json.loads(search_published.RESULTS_FILE.read_text(encoding="utf-8"))
GROUPS = search_published.groups(sorted(available_recipes()))


def test_the_record_has_every_published_group_once():
    names = [search_published.group_name(name, spec) for name, spec in GROUPS]
    assert [row["group"] for row in RECORDED] == names, (
        "benchmarks/search_published.json is stale: run "
        "`uv run python benchmarks/search_published.py --write`"
    )


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        pytest.param(name, spec, id=search_published.group_name(name, spec))
        for name, spec in GROUPS
        if spec.job.world_size <= 8
    ],
)
def test_a_group_of_8_gpus_searches_as_recorded(name, spec):
    recorded = {row["group"]: row for row in RECORDED}
    assert (
        search_published.group_row(name, spec) == recorded[search_published.group_name(name, spec)]
    ), "benchmarks/search_published.json is stale: run the benchmark with --write"
