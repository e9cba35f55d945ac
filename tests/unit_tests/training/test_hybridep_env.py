"""HybridEP's launch topology (launch_env.hybrid_ep_environment) against upstream's recipes.

``data/hybridep_recipes.csv`` lists every upstream Megatron-Bridge performance recipe that runs
the HybridEP backend, with the values it exports; the rule, the plan a job resolves to, the
NeMo-Run plugin and ``bridge-overlap explain`` must give the same values for each row whose
system the GPU catalogue has.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from types import MappingProxyType
from unittest import mock

import pytest

from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.training import hardware, launch_env
from megatron.bridge.training.hardware import GPUS
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.launch_env import (
    HYBRID_EP_ENV_NAMES,
    check_live_environment,
    hybrid_ep_environment,
    plan_launch_env,
    plan_launch_env_for,
)

_TABLE = Path(__file__).parent / "data" / "hybridep_recipes.csv"
#: Systems of upstream's recipes the GPU catalogue does not describe yet; their rows are checked
#: as soon as the catalogue gains them.
_NOT_IN_CATALOGUE = {"vr200"}


def _rows() -> list[dict[str, str]]:
    with _TABLE.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


_ROWS = _rows()
_CATALOGUED = [
    pytest.param(row, id=f"{row['system']}-{row['function']}")
    for row in _ROWS
    if row["system"] in GPUS
]


def _expected(row: dict[str, str]) -> dict[str, str]:
    return {name: row[name] for name in HYBRID_EP_ENV_NAMES}


def _job(*, gpu: str, ep: int, etp: int = 1, backend: str = "hybridep") -> JobDescription:
    model = ModelDescription(
        num_layers=4,
        hidden_size=1024,
        num_attention_heads=8,
        seq_length=1024,
        num_moe_experts=ep * 2,
        moe_router_topk=2,
        moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend=backend,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp,
    )
    return JobDescription(model=model, world_size=ep * etp, gpu=gpu, micro_batch_size=1)


def test_the_table_covers_the_issue_examples_and_only_known_systems():
    # GB200 EP64: 64/72/1; GB200 EP8: 8/72/1; H100 EP16: 8/8/0 (the values upstream exports).
    seen = {(r["system"], r["ep"], *(_expected(r).values())) for r in _ROWS}
    assert {
        ("gb200", "64", "64", "72", "1"),
        ("gb200", "8", "8", "72", "1"),
        ("h100", "16", "8", "8", "0"),
    } <= seen
    assert {r["system"] for r in _ROWS} - set(GPUS) <= _NOT_IN_CATALOGUE
    assert len(_CATALOGUED) >= 60


@pytest.mark.parametrize("row", _CATALOGUED)
def test_rule_matches_upstream_recipe(row):
    entries = hybrid_ep_environment(
        ep_size=int(row["ep"]), etp_size=int(row["etp"]), gpu=row["system"]
    )
    assert {e.name: e.value for e in entries} == _expected(row)


@pytest.mark.parametrize("row", _CATALOGUED)
def test_plan_of_the_job_exports_upstreams_values(row):
    job = _job(gpu=row["system"], ep=int(row["ep"]), etp=int(row["etp"]))
    env = plan_launch_env_for(job, a2a_overlap=False).env
    assert {name: env[name] for name in HYBRID_EP_ENV_NAMES} == _expected(row)
    # What the plan exports passes the build-time check.
    problems = check_live_environment(**launch_env.launch_layout(job), a2a_overlap=False, env=env)
    assert problems == []


def test_a_catalogue_entry_needs_no_edit_here():
    # The rule reads only GpuSpec.nvlink_domain: a new multi-node NVLink system is one entry.
    nvl36 = dataclasses.replace(GPUS["gb200"], name="test_nvl36", nvlink_domain=36)
    catalogue = MappingProxyType({**GPUS, "test_nvl36": nvl36})
    with mock.patch.object(hardware, "GPUS", catalogue):
        env = {e.name: e.value for e in hybrid_ep_environment(ep_size=32, gpu="test_nvl36")}
    assert env == {
        "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "32",
        "NVLINK_DOMAIN_SIZE": "36",
        "USE_MNNVL": "1",
    }


@pytest.mark.parametrize(
    ("gpu", "ep", "etp", "ranks"),
    [
        ("h100", 16, 2, "4"),  # EP ranks sit ETP ranks apart: 4 of them per 8-GPU board
        ("h100", 4, 2, "4"),
        ("gb200", 144, 1, "72"),  # two whole 72-GPU domains
        ("gb200", 128, 1, None),  # does not split into 72-rank domains: HybridEP detects
        ("h100", 12, 1, None),
    ],
)
def test_ranks_per_domain_follow_the_expert_layout(gpu, ep, etp, ranks):
    entries = {e.name: e for e in hybrid_ep_environment(ep_size=ep, etp_size=etp, gpu=gpu)}
    entry = entries["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"]
    assert entry.value == ranks
    if ranks is None:
        assert "HybridEP detects" in entry.reason
    else:
        assert int(ranks) <= int(entries["NVLINK_DOMAIN_SIZE"].value) // etp
        assert ep % int(ranks) == 0


def test_without_a_gpu_nothing_is_exported_and_the_plan_says_why():
    plan = plan_launch_env(
        gpu_sm100_or_newer=True, ep_size=8, moe_flex_dispatcher_backend="hybridep"
    )
    for name in HYBRID_EP_ENV_NAMES:
        assert plan.entry(name).value is None
        assert "no GPU named" in plan.entry(name).reason


@pytest.mark.parametrize("backend", [None, "deepep", "ncclep"])
def test_other_backends_export_no_hybridep_variables(backend):
    # DeepEP's Buffer sets the NVSHMEM variables it needs itself; nothing to export for it.
    job = _job(gpu="gb200", ep=8, backend=backend) if backend else None
    plan = (
        plan_launch_env_for(job, a2a_overlap=False)
        if job is not None
        else plan_launch_env(gpu="gb200", ep_size=8)
    )
    assert not set(HYBRID_EP_ENV_NAMES) & {e.name for e in plan.entries}


def test_explain_shows_the_topology(capsys):
    argv = [
        "explain",
        "--json",
        "--gpu",
        "gb200",
        "--tp",
        "1",
        "--pp",
        "2",
        "--world-size",
        "128",
        "--ep",
        "64",
        "--num-moe-experts",
        "256",
        "--moe-token-dispatcher",
        "flex",
        "--moe-flex-backend",
        "hybridep",
        "--num-layers",  # a model small enough to fit: a job that does not fit is exit 1
        "8",
        "--moe-ffn-hidden-size",
        "2048",
    ]
    assert main(argv) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    env = {e["name"]: e["value"] for e in doc["launch_env"]}
    assert {name: env[name] for name in HYBRID_EP_ENV_NAMES} == {
        "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "64",
        "NVLINK_DOMAIN_SIZE": "72",
        "USE_MNNVL": "1",
    }
    assert main(argv[:1] + argv[2:]) == EXIT_OK
    text = capsys.readouterr().out
    assert "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64  # EP=64 fits in one NVLink domain" in text


@pytest.mark.parametrize("value", ["3", "zero", "0"])
def test_live_check_refuses_a_domain_hybridep_would_assert_on(value):
    # 8 GPUs, EP8 through HybridEP: TP1 CP1 PP1 DP8.
    layout = launch_env.launch_layout(_job(gpu="h100", ep=8))
    env = {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": value}
    problems = check_live_environment(**layout, a2a_overlap=False, env=env)
    assert len(problems) == 1
    assert "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN" in problems[0]
