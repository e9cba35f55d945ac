"""Launch-time environment rules (megatron/bridge/training/launch_env.py): pure, no NeMo-Run."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megatron.bridge.training import launch_env
from megatron.bridge.training.launch_env import (
    LaunchEnvPlan,
    check_live_environment,
    cuda_device_max_connections,
    plan_launch_env,
)
from tests.unit_tests.conftest import (
    CONNECTION_MATRIX,
    connection_layout,
    connection_rule_inputs,
    modules_loaded_by,
)


@pytest.mark.parametrize(("layout", "expected"), CONNECTION_MATRIX)
def test_cuda_device_max_connections_matrix(layout, expected):
    value, reason = cuda_device_max_connections(**connection_rule_inputs(layout))
    assert value == expected
    assert isinstance(reason, str) and reason and "\n" not in reason


def test_plan_defaults_hopper_tp_layout():
    plan = plan_launch_env(gpu_sm100_or_newer=False, tp_size=4, dp_size=2)
    assert isinstance(plan, LaunchEnvPlan)
    assert plan.env == {
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "NVTE_FWD_LAYERNORM_SM_MARGIN": "20",
        "NVTE_BWD_LAYERNORM_SM_MARGIN": "20",
    }
    assert plan.entry("NCCL_P2P_NET_CHUNKSIZE").value is None
    lines = plan.explain()
    assert lines[0].startswith("CUDA_DEVICE_MAX_CONNECTIONS=1  # Hopper")
    assert any(line.startswith("NCCL_P2P_NET_CHUNKSIZE (not set)") for line in lines)


def test_plan_is_frozen():
    plan = plan_launch_env(gpu_sm100_or_newer=False)
    with pytest.raises(AttributeError):
        plan.entries = ()  # type: ignore[misc]


def test_plan_margins_disabled_and_custom():
    off = plan_launch_env(gpu_sm100_or_newer=False, enable_layernorm_sm_margin=False)
    assert "NVTE_FWD_LAYERNORM_SM_MARGIN" not in off.env
    assert "NVTE_BWD_LAYERNORM_SM_MARGIN" not in off.env
    assert "enable_layernorm_sm_margin=False" in off.entry("NVTE_FWD_LAYERNORM_SM_MARGIN").reason
    zero = plan_launch_env(gpu_sm100_or_newer=False, layernorm_sm_margin=0)
    assert zero.env["NVTE_BWD_LAYERNORM_SM_MARGIN"] == "0"


@pytest.mark.parametrize(
    ("pp", "chunk", "expected"), [(2, 2097152, "2097152"), (1, 2097152, None), (4, None, None)]
)
def test_plan_chunk_size_only_with_pipeline(pp, chunk, expected):
    plan = plan_launch_env(gpu_sm100_or_newer=False, pp_size=pp, nccl_pp_comm_chunksize=chunk)
    assert plan.env.get("NCCL_P2P_NET_CHUNKSIZE") == expected
    if chunk is not None and expected is None:
        assert "PP=1" in plan.entry("NCCL_P2P_NET_CHUNKSIZE").reason


def test_plan_entry_unknown_name_lists_names():
    with pytest.raises(KeyError, match="CUDA_DEVICE_MAX_CONNECTIONS"):
        plan_launch_env(gpu_sm100_or_newer=False).entry("NOPE")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"layernorm_sm_margin": -1}, ValueError, "layernorm_sm_margin must be >= 0"),
        (
            {"layernorm_sm_margin": True},
            TypeError,
            r"layernorm_sm_margin must be an int >= 0 \(number of SMs\)",
        ),
        ({"layernorm_sm_margin": 1.5}, TypeError, "layernorm_sm_margin"),
        ({"nccl_pp_comm_chunksize": 1}, ValueError, "nccl_pp_comm_chunksize must be >= 2, got 1"),
        ({"nccl_pp_comm_chunksize": -4}, ValueError, "nccl_pp_comm_chunksize must be >= 2, got -4"),
        (
            {"nccl_pp_comm_chunksize": True},
            TypeError,
            r"nccl_pp_comm_chunksize must be an int >= 2 \(bytes\) or None",
        ),
        ({"nccl_pp_comm_chunksize": "1024"}, TypeError, "nccl_pp_comm_chunksize"),
        ({"moe_flex_dispatcher_backend": "deepEP"}, ValueError, "'deepep', 'hybridep', 'ncclep'"),
        ({"tp_size": 0}, ValueError, "tp_size must be >= 1"),
        ({"dp_size": True}, TypeError, "dp_size must be an int"),
        (
            {"enable_layernorm_sm_margin": 1},
            TypeError,
            "enable_layernorm_sm_margin must be True or False",
        ),
        ({"a2a_overlap": None}, TypeError, "a2a_overlap must be True or False"),
    ],
)
def test_plan_rejects_bad_input_naming_the_field(kwargs, error, match):
    with pytest.raises(error, match=match):
        plan_launch_env(gpu_sm100_or_newer=False, **kwargs)


def test_manual_gc_interval_validation():
    assert launch_env.validate_manual_gc_interval(0) == 0
    with pytest.raises(ValueError, match="manual_gc_interval must be >= 0"):
        launch_env.validate_manual_gc_interval(-1)
    with pytest.raises(TypeError, match="manual_gc_interval"):
        launch_env.validate_manual_gc_interval(False)


# ----------------------------------------------------------------------- live environment


def _check(env, *, tp=2, cp=1, dp=4, pp=1, backend=None, a2a=False, fsdp=False):
    layout = connection_layout(False, tp, cp, dp, pp, backend, a2a, fsdp)
    layout.pop("gpu_sm100_or_newer")
    return check_live_environment(**layout, env=env)


def test_check_accepts_every_tuned_value_without_a2a_overlap():
    # TP overlap on Hopper: 1 orders the comm kernel by the single queue, any other value by
    # TE's launch-completion event (CUDA 12.3+); upstream's recipes use 1, 8 and 32.
    for value in ({}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}):
        assert _check(value) == []
        assert _check(value, backend="deepep") == []


@pytest.mark.parametrize("value", [None, "8", "32"])
def test_check_accepts_megatron_fsdp_with_more_than_one_connection(value):
    env = {} if value is None else {"CUDA_DEVICE_MAX_CONNECTIONS": value}
    assert _check(env, fsdp=True) == []


@pytest.mark.parametrize("tp", [1, 2])
def test_check_refuses_one_connection_under_megatron_fsdp(tp):
    problems = _check({"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, tp=tp, fsdp=True)
    assert len(problems) == 1
    assert "Megatron-FSDP" in problems[0] and "CUDA_DEVICE_MAX_CONNECTIONS=1" in problems[0]
    assert "> 1 or unset" in problems[0]


def test_check_non_integer_value():
    problems = _check({"CUDA_DEVICE_MAX_CONNECTIONS": "one"})
    assert len(problems) == 1 and "is not an integer" in problems[0]


def test_check_rejects_unknown_backend():
    with pytest.raises(
        ValueError,
        match=r"moe_flex_dispatcher_backend must be one of "
        r"\['deepep', 'hybridep', 'ncclep', None\], got 'nccl'",
    ):
        _check({}, backend="nccl")


# ----------------------------------------------------------------------- properties

layouts = st.fixed_dictionaries(
    {
        "gpu_sm100_or_newer": st.booleans(),
        "tp_size": st.sampled_from([1, 2, 4, 8]),
        "cp_size": st.sampled_from([1, 2, 4]),
        "dp_size": st.sampled_from([1, 2, 3, 8, 64]),
        "pp_size": st.sampled_from([1, 2, 4, 16]),
        "moe_flex_dispatcher_backend": st.sampled_from([None, "deepep", "hybridep", "ncclep"]),
        "a2a_overlap": st.booleans(),
        "megatron_fsdp": st.booleans(),
    }
)


@settings(max_examples=300, deadline=None)
@given(layout=layouts)
def test_connection_rules_invariants(layout):
    value, _ = cuda_device_max_connections(**connection_rule_inputs(layout))
    split = layout["tp_size"] > 1 or layout["cp_size"] > 1
    needs_queues = layout["a2a_overlap"] or layout["megatron_fsdp"]
    if layout["gpu_sm100_or_newer"] or not split or needs_queues:
        assert value == 32
    else:
        assert value == 1
    if needs_queues:
        assert value > 1  # the requirements the live check holds


@settings(max_examples=300, deadline=None)
@given(
    layout=layouts,
    ep=st.sampled_from([1, 2, 4, 8, 16, 64, 96]),
    gpu=st.sampled_from([None, "h100", "b200", "gb200"]),
)
def test_the_plan_always_passes_the_live_check(layout, ep, gpu):
    layout = dict(layout)
    if gpu is not None:
        layout.pop("gpu_sm100_or_newer")
    plan = plan_launch_env(**layout, gpu=gpu, ep_size=ep)
    problems = check_live_environment(
        tp_size=layout["tp_size"],
        cp_size=layout["cp_size"],
        dp_size=layout["dp_size"],
        pp_size=layout["pp_size"],
        ep_size=ep,
        a2a_overlap=layout["a2a_overlap"],
        moe_flex_dispatcher_backend=layout["moe_flex_dispatcher_backend"],
        megatron_fsdp=layout["megatron_fsdp"],
        env=plan.env,
    )
    assert problems == []


def test_module_is_pure_stdlib():
    code = "import megatron.bridge.training.launch_env"
    heavy = ("torch", "megatron.core", "nemo_run", "transformer_engine")
    assert modules_loaded_by(code, heavy) == []
