"""GPT-OSS as upstream describes it: its activation and attention fields, what the estimate
charges for its expert biases, and the attention kernel its softmax runs in (its CP exchange:
test_cp_comm_type.py)."""

from __future__ import annotations

import dataclasses
import itertools
import warnings

import pytest
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.recipes import plan_recipe, recipe_spec
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.model_bytes import ModelBytes
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.job_configs import _activation
from megatron.bridge.training.model_rules import check_model
from tests.unit_tests.jobs import recipe_job_model


def test_gpt_oss_carries_the_fields_gpt_oss_bridge_sets():
    # Megatron-Bridge models/gpt_oss/gpt_oss_bridge.py, GPTOSSBridge.provider_bridge.
    model = recipe_spec("gpt_oss_120b").job.model
    assert model.softmax_type == "learnable"
    assert model.glu_linear_offset == 1.0
    assert model.activation_func_clamp_value == 7.0
    assert model.bias_activation_fusion is True


def test_the_fields_default_to_megatron_cores():
    defaults = {f.name: f.default for f in dataclasses.fields(TransformerConfig)}
    model = recipe_job_model("llama3_8b")
    for name in ("softmax_type", "glu_linear_offset", "activation_func_clamp_value"):
        assert getattr(model, name) == defaults[name], name


def _bytes(model) -> float:
    return ModelBytes(model).elementwise_bytes_per_token()


def test_expert_fc2_bias_adds_its_per_expert_loop_traffic():
    # The published BF16 rows run the experts without the op fuser (fused_grouped_mlp false).
    model = recipe_job_model("gpt_oss_120b", use_transformer_engine_op_fuser=False)
    without = dataclasses.replace(model, add_bias_linear=False, add_qkv_bias=True)
    # 6 H forward and 8 H backward per routed copy, 16-bit, on every layer (all are MoE here).
    expected = (6 + 8) * model.moe_router_topk * model.hidden_size * 2
    assert _bytes(model) - _bytes(without) == pytest.approx(expected)


def test_the_fused_grouped_mlp_scales_the_bias_itself():
    model = recipe_job_model("gpt_oss_120b", use_transformer_engine_op_fuser=True)
    without = dataclasses.replace(model, add_bias_linear=False, add_qkv_bias=True)
    assert _bytes(model) == _bytes(without)


def test_a_dense_model_with_biases_has_no_expert_bias_traffic():
    model = recipe_job_model("llama3_8b", add_bias_linear=True)
    assert _bytes(model) == _bytes(dataclasses.replace(model, add_bias_linear=False))


def test_the_estimate_names_the_kernel_a_softmax_with_sinks_runs_in():
    source = estimate_step(plan_recipe("gpt_oss_120b")).step.attention_source
    assert "softmax_type learnable runs in cuDNN fused attention" in source
    dense = estimate_step(plan_recipe("llama3_8b")).step.attention_source
    assert "softmax_type" not in dense


@pytest.mark.parametrize("activation", ["gelu", "silu", "relu", "quick_gelu", "squared_relu"])
def test_the_fused_bias_activation_rules_are_megatron_cores(activation):
    for gated, bias, offset in itertools.product((False, True), (False, True), (0.0, 1.0)):
        fields = {
            "num_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "bias_activation_fusion": True,
            "gated_linear_unit": gated,
            "add_bias_linear": bias,
            "glu_linear_offset": offset,
        }
        ours = megatron_core = None
        try:
            check_model(ModelDescription(**fields, activation_func=activation))
        except ValueError as exc:
            ours = exc
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                TransformerConfig(**fields, activation_func=_activation(activation))
            except ValueError as exc:
                megatron_core = exc
        assert (ours is None) == (megatron_core is None), (fields, ours, megatron_core)
