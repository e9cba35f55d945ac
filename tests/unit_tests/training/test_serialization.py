"""serialization.to_yaml / from_yaml and write_run_config."""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest
import torch

from megatron.bridge.recipes import get_recipe, recipe_spec
from megatron.bridge.training.comm_overlap import PUBLISHED_PRESETS
from megatron.bridge.training.resolve import runtime_config_update
from megatron.bridge.training.serialization import from_yaml, to_yaml, write_run_config
from tests.unit_tests.conftest import BUILDABLE_RECIPES

pytestmark = pytest.mark.usefixtures("no_launch_vars")


@pytest.mark.parametrize("name", BUILDABLE_RECIPES)
def test_every_recipe_round_trips_to_the_same_plan(name, tmp_path):
    spec = recipe_spec(name)
    # megatron-core builds an MoE model in FP8 only with Transformer Engine >= 1.7, absent here.
    needs_te = spec.job.model.moe and spec.job.model.fp8 is not None
    cfg = get_recipe(name, **({"precision": "bf16"} if needs_te else {}))
    text = to_yaml(cfg)
    back = from_yaml(text)
    assert back.env_vars == cfg.env_vars and back.gpu == cfg.gpu
    assert back.model.activation_func is cfg.model.activation_func
    assert back.comm_overlap == cfg.comm_overlap
    world = recipe_spec(name).num_gpus
    config_path, plan_path = write_run_config(cfg, tmp_path, world_size=world)
    plan = runtime_config_update(cfg, world, te="assume").to_dict()
    assert runtime_config_update(back, world, te="assume").to_dict() == plan
    # the file beside it holds the same plan, and the YAML file reads back too
    assert json.loads(plan_path.read_text())["overlap_plan"] == json.loads(json.dumps(plan))
    assert from_yaml(config_path).env_vars == cfg.env_vars
    # an updated container writes a file that resolves to the same plan again
    again = from_yaml(to_yaml(cfg))
    assert runtime_config_update(again, world, te="assume").to_dict() == plan


def test_published_preset_by_name_custom_preset_as_mapping():
    cfg = get_recipe("gpt3_175b")
    preset = cfg.comm_overlap.tp_comm_overlap_cfg
    assert "tp_comm_overlap_cfg: userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048" in to_yaml(cfg)
    assert from_yaml(to_yaml(cfg)).comm_overlap.tp_comm_overlap_cfg is preset
    custom = dataclasses.replace(preset, fc2_fprop=None)
    assert custom not in PUBLISHED_PRESETS.values()
    cfg.comm_overlap.tp_comm_overlap_cfg = custom
    text = to_yaml(cfg)
    assert "qkv_dgrad:" in text
    assert from_yaml(text).comm_overlap.tp_comm_overlap_cfg == custom


def test_dtypes_and_functions_round_trip_by_name():
    cfg = get_recipe("llama3_70b")
    cfg.model.params_dtype = torch.bfloat16
    cfg.model.activation_func = torch.nn.functional.silu
    text = to_yaml(cfg)
    assert "_dtype_: bfloat16" in text and "_callable_: torch.nn.functional:silu" in text
    back = from_yaml(text)
    assert back.model.params_dtype is torch.bfloat16
    assert back.model.activation_func is torch.nn.functional.silu


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (lambda x: x, "cfg.model.activation_func = .* only functions and classes importable"),
        (
            functools.partial(torch.nn.functional.gelu, approximate="tanh"),
            "cfg.model.activation_func",
        ),
    ],
)
def test_what_cannot_round_trip_is_refused(value, match):
    cfg = get_recipe("gpt3_175b")
    cfg.model.activation_func = value
    with pytest.raises(TypeError, match=match):
        to_yaml(cfg)


def test_from_yaml_names_an_unknown_field():
    text = to_yaml(get_recipe("gpt3_175b")).replace("\n  num_layers:", "\n  num_layer:", 1)
    with pytest.raises(
        ValueError, match=r"model.num_layer is not a field.*Did you mean 'num_layers'"
    ):
        from_yaml(text)


def test_the_plan_file_holds_the_environment_the_job_exports(tmp_path):
    # A saved MoE recipe, loaded and given another EP size: the recipe's derived HybridEP
    # variable follows the layout in plan.json as runtime_config_update exports it, while the
    # container keeps what was written.
    cfg = get_recipe("qwen3_30b_a3b", precision="bf16")
    cfg.env_vars["NCCL_DEBUG"] = "WARN"
    loaded = from_yaml(to_yaml(cfg))
    written = loaded.env_vars["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"]
    loaded.model.expert_model_parallel_size = 16
    _, plan_path = write_run_config(loaded, tmp_path, world_size=64)
    plan = json.loads(plan_path.read_text())
    assert written == "8" and plan["env_vars"]["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "16"
    assert "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN" in plan["derived_env_vars"]
    assert plan["env_vars"]["NCCL_DEBUG"] == "WARN"
    assert "NCCL_DEBUG" not in plan["derived_env_vars"]
    assert set(plan["derived_env_vars"]) < set(plan["env_vars"])
    entry = next(e for e in plan["launch_env"] if e["name"] == "CUDA_DEVICE_MAX_CONNECTIONS")
    assert set(entry) == {"name", "value", "reason", "source", "note"}
    assert entry["source"] == "derived"


def test_the_plan_file_refuses_an_environment_the_job_fails_with(tmp_path):
    # HybridEP asserts that its ranks per NVLink domain divide the EP size (8 here).
    cfg = get_recipe("qwen3_30b_a3b", precision="bf16")
    cfg.env_vars["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] = 3
    with pytest.raises(ValueError, match=r"cfg\.env_vars: .*=3 does not divide EP=8"):
        write_run_config(cfg, tmp_path, world_size=8)
    assert list(tmp_path.iterdir()) == []
