"""CUDA_DEVICE_MAX_CONNECTIONS and the LayerNorm margins: required values warn, tuned ones pass.

Each accepted row is a value an upstream Megatron-Bridge performance recipe exports for that
layout (``src/megatron/bridge/perf_recipes/<model>/<system>/<file>.py``, the function named);
each refused row breaks what an enabled feature needs.
"""

from __future__ import annotations

import pytest

from megatron.bridge.training.launch_env import (
    DEFAULT_LAYERNORM_SM_MARGIN,
    check_live_environment,
    launch_layout,
    plan_launch_env,
    plan_launch_env_for,
)
from tests.unit_tests.conftest import h100_job
from tests.unit_tests.jobs import dense_model


def _problems(env, *, tp=1, cp=1, dp=8, pp=1, ep=1, backend=None, a2a=False):
    return check_live_environment(
        tp_size=tp,
        cp_size=cp,
        dp_size=dp,
        pp_size=pp,
        ep_size=ep,
        a2a_overlap=a2a,
        moe_flex_dispatcher_backend=backend,
        megatron_fsdp=False,
        env=env,
    )


@pytest.mark.parametrize(
    ("layout", "cdmc"),
    [
        # qwen/h100/qwen3_moe.py qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config: TP2, EP32,
        # alltoall with EP overlap, 8 (the plan says 32)
        (dict(tp=2, pp=8, ep=32, a2a=True), "8"),
        # glm_moe_dsa/h100/glm5.py glm51_sft_416gpu_h100_bf16_config: CP32, deepep, 1
        (dict(cp=32, pp=13, ep=32, backend="deepep"), "1"),
        # llama/h100/llama3.py llama3_70b_pretrain_64gpu_h100_fp8cs_config: TP4 (TP overlap), 1
        (dict(tp=4, pp=8), "1"),
        # llama/b200/llama3.py llama3_8b_pretrain_8gpu_b200_bf16_config: TP1, 32
        (dict(), "32"),
        # qwen/h100/qwen3_moe.py qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config: hybridep EP16, 32
        (dict(ep=16, backend="hybridep"), "32"),
    ],
)
def test_upstream_tuned_values_pass(layout, cdmc):
    assert _problems({"CUDA_DEVICE_MAX_CONNECTIONS": cdmc}, **layout) == []


@pytest.mark.parametrize("env", [{}, {"CUDA_DEVICE_MAX_CONNECTIONS": "2"}])
def test_ep_overlap_passes_with_more_than_one_queue(env):
    assert _problems(env, tp=2, ep=8, a2a=True) == []


def test_ep_overlap_with_one_queue_is_the_requirement_that_warns():
    problems = _problems({"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, tp=2, ep=8, a2a=True)
    assert len(problems) == 1
    assert "EP all-to-all overlap is on" in problems[0] and "must be above 1" in problems[0]


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("tp", [1, 2])
def test_plan_never_breaks_ep_overlap(gpu, tp):
    plan = plan_launch_env(gpu_sm100_or_newer=gpu, tp_size=tp, ep_size=8, a2a_overlap=True)
    assert int(plan.env["CUDA_DEVICE_MAX_CONNECTIONS"]) > 1


def test_layernorm_margin_is_upstreams_tuned_twenty_and_any_margin_passes():
    # Every upstream system folder's recipes export 20 (e.g. deepseek/gb200/deepseek_v3.py
    # deepseek_v3_pretrain_256gpu_gb200_bf16_config); some keep 16 or 0, which TE accepts.
    assert DEFAULT_LAYERNORM_SM_MARGIN == 20
    assert plan_launch_env(gpu_sm100_or_newer=True).env["NVTE_FWD_LAYERNORM_SM_MARGIN"] == "20"
    for margin in ("0", "16", "20"):
        env = {"NVTE_FWD_LAYERNORM_SM_MARGIN": margin, "NVTE_BWD_LAYERNORM_SM_MARGIN": margin}
        assert _problems(env, tp=2, a2a=False) == []


@pytest.mark.parametrize(("tp", "cp"), [(2, 1), (1, 2), (4, 2)])
def test_a_megatron_fsdp_job_never_gets_the_one_queue_megatron_bridge_refuses(tp, cp):
    # Hopper with a TP/CP split would take 1; Megatron-FSDP refuses it (Megatron-Bridge's
    # ConfigContainer._validate_and_apply_megatron_fsdp_v1_configs).
    dense = h100_job(dense_model(), tp_size=tp, cp_size=cp, dp_size=2, sequence_parallel=tp > 1)
    fsdp = dense.replace(use_megatron_fsdp=True)
    assert plan_launch_env_for(dense, a2a_overlap=False).env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    plan = plan_launch_env_for(fsdp, a2a_overlap=False)
    assert plan.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    assert "Megatron-FSDP" in plan.entry("CUDA_DEVICE_MAX_CONNECTIONS").reason
    layout = launch_layout(fsdp)
    assert check_live_environment(**layout, a2a_overlap=False, env=plan.env) == []
    refused = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert len(check_live_environment(**layout, a2a_overlap=False, env=refused)) == 1
