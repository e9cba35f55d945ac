"""TP overlap needs every TP group inside one NVLink domain.

Transformer Engine's userbuffers reach a TP group's peers through CUDA IPC or fabric memory
handles, which only the GPUs of one NVLink domain can open, so a TP group that spans two DGX
nodes (or two NVL72 racks) blocks TP overlap: a request is refused before launch, and "auto"
plans the layout without it. No GPU is needed: the rule reads the GPU catalogue.
"""

from __future__ import annotations

import itertools

import pytest

from megatron.bridge.recipes import plan_recipe
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
from megatron.bridge.training.hardware import GPUS, gpu_spec, nvlink_ranks


def _job(tp: int, world: int, gpu: str | None) -> JobDescription:
    return JobDescription(
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
