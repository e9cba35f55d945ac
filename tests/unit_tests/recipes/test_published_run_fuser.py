"""Whether a published MoE run's experts ran Transformer Engine's fused grouped MLP
(``published_runs.csv``'s ``fuser`` column), held to the published row of the run's source
release (``published_rows.yaml``'s ``fused_grouped_mlp``, read from that release's perf
configuration)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from megatron.bridge.recipes import RECIPES, recipe_spec
from megatron.bridge.training import hardware
from megatron.bridge.training.precisions import published_precision

ROWS = yaml.safe_load(
    (Path(__file__).parent / "data" / "published_rows.yaml").read_text(encoding="utf-8")
)


def _source_row(name: str, published) -> dict | None:
    """The published row of the run's source release, system, precision and GPU count; None
    for a run whose source names no release."""
    release = re.search(r"\b(\d\d\.\d\d(?:\.\d\d)?)\b", published.source)
    if release is None:
        return None
    found = [
        r
        for r in ROWS
        if r["model"] == name
        and r["release"] == release.group(1)
        and hardware.system_gpu(r["system"]).name == published.gpu
        and published_precision(r["precision"]) == published.precision
        and r["gpus"] == published.changes["world_size"]
    ]
    assert len(found) == 1, (name, published.key, release.group(1))
    return found[0]


def _moe_runs() -> list:
    params = []
    for name in sorted(RECIPES):
        spec = recipe_spec(name)
        if spec is None or not spec.job.model.moe:
            continue
        params += [
            pytest.param(name, published, id=f"{name}-{published.gpu}-{published.precision}")
            for published in spec.published
        ]
    return params


@pytest.mark.parametrize(("name", "published"), _moe_runs())
def test_each_moe_run_says_whether_its_experts_ran_the_fused_grouped_mlp(name, published):
    row = _source_row(name, published)
    assert row is not None, f"{name} {published.key}: the source names no release"
    assert published.changes["model.use_transformer_engine_op_fuser"] == row["fused_grouped_mlp"]
