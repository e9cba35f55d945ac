"""EP all-to-all bytes on the network: one copy per expert, or one per remote NVLink domain."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.comm import _remote_domain_share
from megatron.bridge.training.job import JobDescription
from tests.unit_tests.jobs import recipe_job_model

#: Qwen3-30B-A3B (128 experts, top-8) at EP16: two 8-GPU nodes, or one 16-GPU NVLink domain.
MOE = recipe_job_model("qwen3_30b_a3b", expert_model_parallel_size=16)


@pytest.mark.parametrize(
    ("group", "local", "experts", "topk"), [(4, 2, 8, 2), (6, 2, 6, 3), (8, 4, 8, 3), (4, 1, 4, 2)]
)
def test_the_share_is_the_mean_of_remote_domains_over_remote_copies(group, local, experts, topk):
    # Counted over every top-k choice from the first GPU of domain 0: experts spread evenly over
    # the group's GPUs, GPU g in domain g // local.
    per_gpu = experts // group
    domains, copies = 0, 0
    for chosen in itertools.combinations(range(experts), topk):
        gpus = [e // per_gpu for e in chosen]
        domains += len({g // local for g in gpus} - {0})
        copies += sum(g // local != 0 for g in gpus)
    assert _remote_domain_share(group, local, (experts, topk)) == pytest.approx(domains / copies)


def _ep_seconds(dispatcher: dict[str, str], nodes: int) -> float:
    job = JobDescription(
        model=dataclasses.replace(MOE, **dispatcher),
        world_size=16,
        gpu="h100",
        gpus_per_node=16 // nodes,
        micro_batch_size=1,
    )
    plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False), job)
    estimate = estimate_step(plan)
    (entry,) = [c for c in estimate.communication if c.mode == "ep"]
    return entry.seconds_at_link_peak


FLEX = {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}
ALLTOALL = {"moe_token_dispatcher_type": "alltoall"}


def test_a_deduplicating_dispatcher_sends_less_over_the_network():
    assert _ep_seconds(FLEX, nodes=2) < _ep_seconds(ALLTOALL, nodes=2)


def test_inside_one_nvlink_domain_the_dispatchers_move_the_same_bytes():
    assert _ep_seconds(FLEX, nodes=1) == _ep_seconds(ALLTOALL, nodes=1)
