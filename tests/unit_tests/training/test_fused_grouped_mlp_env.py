"""Transformer Engine's op fuser on routed experts: the launch variable and the model rule.

``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` is required when gated experts run the op fuser.

megatron-core's ``TEGroupedMLP`` asserts, when the op fuser is on, that its fused implementation
is supported (``moe/experts.py`` ``_is_fused_impl_supported``); for a SwiGLU or a quick-GeGLU
that holds only with the variable set to 1 or more. The launch plan exports it, the live check
names it when it is missing, the NeMo-Run plugin puts it on the executor, and the rule
(``launch_env.cutedsl_fused_grouped_mlp``) is held equal to megatron-core's own check.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import sys
import types

import nemo_run as run
import pytest
from megatron.core.transformer.moe import experts

from megatron.bridge.recipes import recipe_spec
from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
from megatron.bridge.training import launch_env
from megatron.bridge.training.comm_overlap.te import ASSUMED_TE_VERSION
from megatron.bridge.training.job_configs import _activation
from megatron.bridge.training.launch_env import (
    NVTE_CUTEDSL_FUSED_GROUPED_MLP,
    check_live_environment,
    cutedsl_fused_grouped_mlp,
    plan_launch_env_for,
)
from megatron.bridge.training.model_rules import check_model
from megatron.bridge.training.model_rules.te_op_fuser import check_te_op_fuser

_NAME = NVTE_CUTEDSL_FUSED_GROUPED_MLP


def _gpt_oss(*, op_fuser: bool = True, **changes):
    """GPT-OSS 120B's published GB300 job (quick-GeGLU experts, grouped GEMM), op fuser set."""
    spec = recipe_spec("gpt_oss_120b")
    model = dataclasses.replace(spec.job.model, use_transformer_engine_op_fuser=op_fuser, **changes)
    return dataclasses.replace(spec.job, model=model)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, True),  # quick-GeGLU, gated, grouped GEMM
        ({"activation_func": "silu"}, True),  # SwiGLU
        ({"use_transformer_engine_op_fuser": False}, False),
        ({"moe_grouped_gemm": False}, False),  # SequentialMLP: no op fuser path
        ({"gated_linear_unit": False, "activation_func": "squared_relu"}, False),
        ({"activation_func": "gelu"}, False),
        ({"num_moe_experts": None, "moe_router_topk": 2}, False),  # dense: no experts
    ],
)
def test_the_rule_names_gated_grouped_experts_under_the_op_fuser(changes, expected):
    model = dataclasses.replace(_gpt_oss().model, **changes)
    assert cutedsl_fused_grouped_mlp(model) is expected


def test_the_plan_exports_1_with_its_reason_only_when_the_rule_holds():
    fused = plan_launch_env_for(_gpt_oss(), a2a_overlap=False)
    assert fused.env[_NAME] == "1"
    assert "use_transformer_engine_op_fuser" in fused.entry(_NAME).reason
    plain = plan_launch_env_for(_gpt_oss(op_fuser=False), a2a_overlap=False)
    assert _NAME not in plain.env
    with pytest.raises(KeyError):
        plain.entry(_NAME)


@pytest.mark.parametrize(
    ("value", "problem"),
    [(None, True), ("0", True), ("-1", True), ("yes", True), ("1", False), ("2", False)],
)
def test_the_live_check_requires_an_integer_of_1_or_more(value, problem):
    layout = launch_env.launch_layout(_gpt_oss())
    env = {} if value is None else {_NAME: value}
    problems = check_live_environment(**layout, a2a_overlap=False, env=env)
    named = [p for p in problems if _NAME in p]
    assert bool(named) is problem
    if problem:
        assert "use_transformer_engine_op_fuser" in named[0] and "model build fails" in named[0]
    # Without the op fuser the variable is not required.
    plain = launch_env.launch_layout(_gpt_oss(op_fuser=False))
    assert not [
        p for p in check_live_environment(**plain, a2a_overlap=False, env=env) if _NAME in p
    ]


def test_the_plugin_puts_it_on_the_executor_and_refuses_a_0_there():
    executor = run.LocalExecutor()
    job = _gpt_oss()
    layout = launch_env.launch_layout(job)
    fields = {k: v for k, v in layout.items() if k != "dp_size"}
    PerfEnvPlugin(gpu=job.gpu, num_gpus=job.world_size, **fields).setup(
        run.Script(path="/opt/pretrain.py", entrypoint="python"), executor
    )
    assert executor.env_vars[_NAME] == "1"

    # With 0 on the executor megatron-core's model build fails its assertion: refused before
    # launch, and nothing is written on the executor.
    kept = run.LocalExecutor(env_vars={_NAME: "0"})
    with pytest.raises(ValueError, match=rf"LocalExecutor\.env_vars: .*{_NAME} is '?0'?.*fail"):
        PerfEnvPlugin(gpu=job.gpu, num_gpus=job.world_size, **fields).setup(
            run.Script(path="/opt/pretrain.py", entrypoint="python"), kept
        )
    assert kept.env_vars == {_NAME: "0"}


def test_a_recipe_without_the_fused_gated_mlp_exports_nothing_of_it():
    # Kimi-K2's published run has no op fuser; Nemotron 3 Ultra runs it on squared-ReLU experts
    # (no CuTe DSL GLU kernel); Llama-3 8B has no experts.
    for name in ("kimi_k2", "nemotron_3_ultra", "llama3_8b"):
        assert _NAME not in recipe_spec(name).launch_env().env


@pytest.mark.parametrize("name", ["gpt_oss_120b", "qwen3_30b_a3b", "deepseek_v3"])
def test_a_recipe_whose_published_run_has_the_fused_gated_mlp_exports_it(name):
    # Their published runs' functions set it beside the op fuser (the recipes' fuser column).
    spec = recipe_spec(name)
    assert spec.job.model.use_transformer_engine_op_fuser
    assert spec.launch_env().env[_NAME] == "1"


# --- the rule against megatron-core's own check ------------------------------------------------


class _GroupedLinear:
    """Transformer Engine's ``GroupedLinear`` as ``_is_fused_impl_supported`` inspects it."""

    def __init__(self, *, use_bias: bool = False, scale_bias: bool = False) -> None:
        self.use_bias = use_bias


@pytest.fixture
def te_on_a_cpu_machine(monkeypatch):
    """Transformer Engine cannot be imported on a CPU machine: its op-fuser module, its
    ``GroupedLinear`` and its version check are stood in for; the rest of the check runs as
    megatron-core wrote it."""
    ops = types.ModuleType("transformer_engine.pytorch.ops")
    for name in ("ScaledSwiGLU", "ScaledClampedQGeGLU", "ScaledSReLU"):
        setattr(ops, name, type(name, (), {}))
    ops.GroupedLinear = _GroupedLinear
    pytorch = types.ModuleType("transformer_engine.pytorch")
    pytorch.ops = ops
    pytorch.GroupedLinear = _GroupedLinear
    te = types.ModuleType("transformer_engine")
    te.pytorch = pytorch
    monkeypatch.setitem(sys.modules, "transformer_engine", te)
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", pytorch)
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch.ops", ops)
    monkeypatch.setattr(experts, "HAVE_TE", True)
    monkeypatch.setattr(experts, "te", te, raising=False)
    monkeypatch.setattr(experts, "is_te_min_version", lambda version: True)
    assert "scale_bias" in inspect.signature(_GroupedLinear.__init__).parameters
    return experts.TEGroupedMLP._is_fused_impl_supported


@pytest.mark.parametrize("activation", ["silu", "quick_gelu", "gelu", "relu", "squared_relu"])
@pytest.mark.parametrize("gated", [True, False])
def test_the_variable_decides_megatron_cores_fused_path_exactly_where_the_rule_says(
    te_on_a_cpu_machine, monkeypatch, activation, gated
):
    model = dataclasses.replace(
        _gpt_oss().model, activation_func=activation, gated_linear_unit=gated
    )
    config = types.SimpleNamespace(
        activation_func=_activation(activation),
        gated_linear_unit=gated,
        moe_apply_probs_on_input=False,
        use_fused_weighted_squared_relu=False,
    )
    module = types.SimpleNamespace(
        config=config,
        tp_group=types.SimpleNamespace(size=lambda: 1),
        linear_fc1=_GroupedLinear(),
        linear_fc2=_GroupedLinear(use_bias=True),
    )
    supported = {}
    for value in (None, "0", "1"):
        if value is None:
            monkeypatch.delenv(_NAME, raising=False)
        else:
            monkeypatch.setenv(_NAME, value)
        supported[value] = te_on_a_cpu_machine(module)
    decides = supported["1"] and not supported[None] and not supported["0"]
    assert decides is cutedsl_fused_grouped_mlp(model)
    if cutedsl_fused_grouped_mlp(model):
        layout = launch_env.launch_layout(dataclasses.replace(_gpt_oss(), model=model))
        for value in (None, "0", "1"):
            env = {} if value is None else {_NAME: value}
            problems = [
                p
                for p in check_live_environment(**layout, a2a_overlap=False, env=env)
                if _NAME in p
            ]
            assert bool(problems) is not supported[value]


def test_quick_gelu_is_written_as_the_function_megatron_core_compares_against():
    # TransformerConfig refuses glu_linear_offset and bias_activation_fusion with any other
    # quick_gelu object, and TEGroupedMLP's fused quick-GeGLU paths compare by identity.
    from megatron.core.fusions.fused_bias_geglu import quick_gelu
    from megatron.core.transformer.transformer_config import TransformerConfig

    written = _activation("quick_gelu")
    assert written is quick_gelu
    config = TransformerConfig(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        activation_func=written,
        gated_linear_unit=True,
        bias_activation_fusion=True,
        glu_linear_offset=1.0,
    )
    assert config.activation_func is quick_gelu


def test_the_op_fuser_rule_refuses_exactly_what_megatron_cores_check_finds_unsupported(
    te_on_a_cpu_machine, monkeypatch
):
    # check_model's op-fuser rule against TEGroupedMLP._is_fused_impl_supported (asserted at model
    # build), over the expert TP size, the offloaded modules, the activation fields and the TE
    # version, with the launch variable set as the launch plan sets it.
    monkeypatch.setenv(_NAME, "1")
    base = _gpt_oss().model
    cases = itertools.product(
        (1, 2),  # expert_tensor_parallel_size
        ((), ("expert_fc1",), ("moe_act",), ("fused_group_mlp",)),
        ("silu", "quick_gelu", "gelu", "squared_relu"),
        (True, False),  # gated_linear_unit
        (True, False),  # use_fused_weighted_squared_relu
        ("2.12.0", "2.14.0"),
    )
    for etp, offloaded, activation, gated, srelu, te_version in cases:
        model = dataclasses.replace(
            base,
            expert_tensor_parallel_size=etp,
            fine_grained_activation_offloading=bool(offloaded),
            offload_modules=offloaded,
            activation_func=activation,
            gated_linear_unit=gated,
            use_fused_weighted_squared_relu=srelu,
        )
        monkeypatch.setattr(
            experts, "is_te_min_version", lambda v, found=te_version: _key(found) >= _key(v)
        )
        module = types.SimpleNamespace(
            config=types.SimpleNamespace(
                activation_func=_activation(activation),
                gated_linear_unit=gated,
                moe_apply_probs_on_input=False,
                use_fused_weighted_squared_relu=srelu,
            ),
            tp_group=types.SimpleNamespace(size=lambda etp=etp: etp),
            offload_expert_fc1="expert_fc1" in offloaded,
            offload_moe_act="moe_act" in offloaded,
            linear_fc1=_GroupedLinear(),
            linear_fc2=_GroupedLinear(use_bias=True),
        )
        supported = te_on_a_cpu_machine(module)
        try:
            check_te_op_fuser(model, etp=etp, te_version=te_version)
            refused = False
        except ValueError as exc:
            refused = True
            assert "use_transformer_engine_op_fuser" in str(exc)
        case = (etp, offloaded, activation, gated, srelu, te_version)
        assert refused is not supported, case


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3])


def test_check_model_runs_the_op_fuser_rule_and_the_published_runs_pass_it():
    # Without GPT-OSS's fused bias-activation, whose glu_linear_offset takes quick_gelu only.
    model = dataclasses.replace(
        _gpt_oss().model, activation_func="gelu", bias_activation_fusion=False
    )
    with pytest.raises(ValueError, match="fused grouped MLP runs a gated silu or quick_gelu"):
        check_model(model, te_version=ASSUMED_TE_VERSION)
    # Nemotron 3 Ultra's published GB300 run offloads fused_group_mlp, under the op fuser, with
    # squared-ReLU experts and the fused weighted squared ReLU its recipes set.
    ultra = recipe_spec("nemotron_3_ultra").job.model
    assert ultra.use_transformer_engine_op_fuser and ultra.use_fused_weighted_squared_relu
    check_model(ultra, te_version=ASSUMED_TE_VERSION)
    with pytest.raises(ValueError, match=r"Transformer Engine >= 2\.14"):
        check_model(ultra, te_version="2.12.0")
