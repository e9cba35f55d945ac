"""TP overlap needs every TP group inside one NVLink domain.

Transformer Engine's userbuffers reach a TP group's peers through CUDA IPC or fabric memory
handles, which only the GPUs of one NVLink domain can open, so a TP group that spans two DGX
nodes (or two NVL72 racks) blocks TP overlap: a request is refused before launch, and "auto"
plans the layout without it. No GPU is needed: the rule reads the job's cluster (its
``nvlink_domain`` and ``gpus_per_node``, else the GPU catalogue's), as the step estimate, the
search's bound and HybridEP's launch variables do.
"""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.recipes import plan_recipe
from megatron.bridge.search.bound import throughput_ceiling
from megatron.bridge.training.comm_overlap import (
    CommOverlapConfig,
    JobDescription,
    ModelDescription,
    OverlapRefusedError,
    plan_comm_overlap,
)
from megatron.bridge.training.comm_overlap.rules.tp import (
    tp_group_domain_crossed,
    tp_overlap_blockers,
)
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.hardware import GPUS, gpu_spec, nvlink_ranks
from megatron.bridge.training.launch_env import plan_launch_env_for


def _job(tp: int, world: int, gpu: str | None, **cluster: int) -> JobDescription:
    return JobDescription(
        **cluster,
        model=ModelDescription(
            tensor_model_parallel_size=tp, sequence_parallel=True, seq_length=4096, bf16=True
        ),
        world_size=world,
        micro_batch_size=1,
        gpu=gpu,
        te_available=True,
    )


def _crossing_by_enumeration(tp: int, world: int, domain: int) -> bool:
    """Whether some TP group [g TP, (g + 1) TP) holds ranks of two domains, rank by rank."""
    return any(
        len({rank // domain for rank in range(g * tp, (g + 1) * tp)}) > 1
        for g in range(world // tp)
    )


def test_the_domain_is_the_catalogues_nvlink_domain_else_its_node():
    assert nvlink_ranks(gpu_spec("h100")) == 8
    assert nvlink_ranks(gpu_spec("b200")) == 8
    assert nvlink_ranks(gpu_spec("gb200")) == nvlink_ranks(gpu_spec("gb300")) == 72
    assert nvlink_ranks(gpu_spec("h100"), gpus_per_node=4) == 4
    assert nvlink_ranks(gpu_spec("gb200"), nvlink_domain=36) == 36


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_the_rule_matches_the_rank_by_rank_enumeration(gpu):
    domain = nvlink_ranks(gpu_spec(gpu))
    for tp, groups in itertools.product((2, 4, 8, 12, 16, 24, 32, 48, 64, 96), (1, 2, 3, 5, 9)):
        crossed = tp_group_domain_crossed(_job(tp, tp * groups, gpu))
        expected = _crossing_by_enumeration(tp, tp * groups, domain)
        assert (crossed == domain) is expected and (crossed is None) is not expected, (tp, groups)


@pytest.mark.parametrize(
    ("gpu", "tp", "world", "crossed"),
    [
        ("h100", 8, 1024, None),
        ("h100", 16, 1024, 8),
        ("b200", 16, 16, 8),
        ("gb200", 16, 64, None),  # 64 GPUs of one NVL72 rack
        ("gb200", 16, 144, 72),  # ranks 64-79 span two racks
        ("gb300", 8, 144, None),  # 8 divides 72
        (None, 16, 1024, None),  # no GPU named: nothing to check against
    ],
)
def test_which_layouts_cross(gpu, tp, world, crossed):
    assert tp_group_domain_crossed(_job(tp, world, gpu)) == crossed


def test_a_request_across_domains_is_refused_with_the_field_and_the_fix():
    job = _job(16, 1024, "h100")
    (blocker,) = tp_overlap_blockers(job)
    assert "tensor_model_parallel_size=16" in blocker and "tp_comm_overlap=False" in blocker
    plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=True), job)
    decision = plan.decision("tp_comm_overlap")
    assert (decision.value, decision.source) == (False, "refused")
    assert any("NVLink domain" in w for w in plan.warnings)
    with pytest.raises(OverlapRefusedError, match="NVLink domain"):
        plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=True, strict=True), job)


def test_auto_plans_it_off_without_a_warning_and_on_inside_the_domain():
    across = plan_comm_overlap(
        CommOverlapConfig(tp_comm_overlap="auto", strict=True), _job(16, 1024, "h100")
    )
    decision = across.decision("tp_comm_overlap")
    assert (decision.value, decision.source) == (False, "derived") and across.warnings == ()
    assert "NVLink domain" in decision.reason
    inside = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap="auto"), _job(16, 64, "gb200"))
    assert inside.decision("tp_comm_overlap").value is True


def test_a_recipe_at_tp16_on_h100_is_planned_without_tp_overlap():
    plan = plan_recipe(
        "llama3_70b",
        gpu="h100",
        changes={"model.tensor_model_parallel_size": 16, "world_size": 1024},
    )
    assert plan.job.tp_size == 16
    decision = plan.decision("tp_comm_overlap")
    assert decision.value is False and "NVLink domain" in decision.reason


def test_the_jobs_cluster_replaces_the_catalogues_domain():
    # An H100 cluster whose NVLink joins 16 GPUs: TP16 fits a domain and may overlap.
    assert _job(16, 1024, "h100").nvlink_ranks == 8
    wide = _job(16, 1024, "h100", nvlink_domain=16)
    assert wide.nvlink_ranks == 16
    assert tp_group_domain_crossed(wide) is None and tp_overlap_blockers(wide) == ()
    plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=True, strict=True), wide)
    assert plan.decision("tp_comm_overlap").value is True
    # Nodes of 4 GPUs without a domain beyond them: TP8 crosses two.
    small = _job(8, 64, "h100", gpus_per_node=4)
    assert small.nvlink_ranks == 4 and tp_group_domain_crossed(small) == 4
    assert _job(8, 64, "h100", gpus_per_node=4, nvlink_domain=8).nvlink_ranks == 8


def test_explain_plans_and_prices_one_domain(capsys):
    flags = ["--recipe", "llama31_405b", "--gpu", "h100", "--tp", "16", "--pp", "8"]

    def explained(*extra: str) -> dict:
        capsys.readouterr()
        assert main(["explain", *flags, *extra, "--json"]) == EXIT_OK
        return json.loads(capsys.readouterr().out)

    def tp(doc: dict) -> tuple[bool, set[str]]:
        (decision,) = [d for d in doc["overlap"]["decisions"] if d["knob"] == "tp_comm_overlap"]
        links = {c["link"] for c in doc["estimate"]["communication"] if c["mode"] == "tp"}
        return decision["value"], links

    assert tp(explained()) == (False, {"network"})
    wide = explained("--nvlink-domain", "16")
    assert wide["overlap"]["job"]["nvlink_domain"] == 16
    assert tp(wide) == (True, {"nvlink"})


def test_the_search_bound_reads_the_jobs_domain():
    plan = plan_recipe("llama3_70b", gpu="h100")
    assert plan.job.tp_size > 1
    apart = dataclasses.replace(plan, job=plan.job.replace(nvlink_domain=1))
    # One GPU per domain: every TP collective crosses the network, so both the bound and the
    # estimate fall.
    assert throughput_ceiling(apart) < throughput_ceiling(plan)
    assert (
        estimate_step(apart).prediction.tokens_per_s_per_gpu
        < estimate_step(plan).prediction.tokens_per_s_per_gpu
    )


def test_hybridep_exports_the_jobs_domain():
    plan = plan_recipe("qwen3_30b_a3b", gpu="h100", precision="bf16")
    job = plan.job.replace(
        model=dataclasses.replace(
            plan.job.model,
            moe_token_dispatcher_type="flex",
            moe_flex_dispatcher_backend="hybridep",
        )
    )

    def exported(job: JobDescription) -> dict[str, str | None]:
        env = plan_launch_env_for(job, a2a_overlap=False)
        return {e.name: e.value for e in env.entries}

    assert exported(job)["NVLINK_DOMAIN_SIZE"] == "8" and exported(job)["USE_MNNVL"] == "0"
    wide = exported(job.replace(nvlink_domain=32))
    assert (wide["NVLINK_DOMAIN_SIZE"], wide["USE_MNNVL"]) == ("32", "1")
    one_node = exported(job.replace(nvlink_domain=16, gpus_per_node=16))
    assert (one_node["NVLINK_DOMAIN_SIZE"], one_node["USE_MNNVL"]) == ("16", "0")
