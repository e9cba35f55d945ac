"""Planning for a cluster assumes a Transformer Engine version, and can be told an older one."""

from __future__ import annotations

import pytest

from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap, te_status
from megatron.bridge.training.comm_overlap.te import (
    ASSUMED_TE_VERSION,
    TE_REQUIREMENTS,
    te_version_at_least,
)
from megatron.bridge.training.job import JobDescription
from tests.unit_tests.conftest import tiny_model


def _moe_job(te_version: str | None) -> JobDescription:
    status = te_status("assume", version=te_version)
    return JobDescription(
        model=tiny_model(
            num_moe_experts=8,
            moe_token_dispatcher_type="alltoall",
            expert_model_parallel_size=8,
            add_bias_linear=False,
            bf16=True,
        ),
        world_size=64,
        use_distributed_optimizer=True,
        te_available=status.available,
        te_version=status.version,
    )


def _request() -> CommOverlapConfig:
    return CommOverlapConfig(
        tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True
    )


def test_assume_plans_with_the_newest_version_any_rule_reads():
    assert "{}.{}".format(*max(TE_REQUIREMENTS.values())) == ASSUMED_TE_VERSION
    status = te_status("assume")
    assert status.available and status.version == ASSUMED_TE_VERSION
    # DP 8 > 1 derives overlap_grad_reduce, which needs TE >= 2.7 with delayed wgrad.
    plan = plan_comm_overlap(_request(), _moe_job(None))
    assert plan.value("delay_wgrad_compute") is True
    assert plan.value("overlap_grad_reduce") is True


def test_an_older_cluster_is_refused_naming_the_version():
    with pytest.raises(ValueError, match=r"needs Transformer Engine >= 2\.7 \(found 2\.6\)"):
        plan_comm_overlap(_request(), _moe_job("2.6"))
    plan = plan_comm_overlap(_request(), _moe_job("2.7.0+abc123"))
    assert plan.value("delay_wgrad_compute") is True


@pytest.mark.parametrize("bad", ["two", "2", "", "x.7"])
def test_a_version_that_is_no_version_is_refused(bad):
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR"):
        te_status("assume", version=bad)


def test_detect_reads_the_installed_version_only():
    with pytest.raises(ValueError, match="te='assume'"):
        te_status("detect", version="2.7")


@pytest.mark.parametrize(
    ("version", "minimum", "expected"),
    [
        ("2.7", (2, 7), True),
        ("2.10.0", (2, 7), True),
        ("2.6.1", (2, 7), False),
        (None, (2, 7), False),
        ("3.0rc1", (2, 12), True),
    ],
)
def test_version_comparison(version, minimum, expected):
    assert te_version_at_least(version, minimum) is expected
