"""Upstream Megatron-Bridge's ``*_pretrain_config`` names are the shipped recipes.

Code written for upstream imports a recipe from its model family's module
(``from megatron.bridge.recipes.llama import llama3_70b_pretrain_config``); each name here is the
recipe function itself, so it takes the recipe's keywords and returns its ``ConfigContainer``.
Replacing such a recipe's request with a bare ``CommOverlapConfig(tp_comm_overlap=True)`` drops
its preset: the plan names the published one that fits and how to set it.
"""

from __future__ import annotations

import importlib
from unittest import mock

import pytest

from megatron.bridge.recipes import RECIPES, recipe_function
from megatron.bridge.training.comm_overlap import PUBLISHED_PRESETS, CommOverlapConfig
from megatron.bridge.training.config import ConfigContainer
from megatron.bridge.training.resolve import runtime_config_update

#: (upstream family module, upstream name) -> the shipped recipe it is.
UPSTREAM = {
    ("megatron.bridge.recipes.llama", "llama3_8b_pretrain_config"): "llama3_8b",
    ("megatron.bridge.recipes.llama", "llama3_70b_pretrain_config"): "llama3_70b",
    ("megatron.bridge.recipes.llama", "llama31_405b_pretrain_config"): "llama31_405b",
    ("megatron.bridge.recipes.deepseek", "deepseek_v3_pretrain_config"): "deepseek_v3",
    ("megatron.bridge.recipes.deepseek", "deepseek_v4_flash_pretrain_config"): "deepseek_v4_flash",
    ("megatron.bridge.recipes.gpt", "gpt3_175b_pretrain_config"): "gpt3_175b",
    ("megatron.bridge.recipes.gpt_oss", "gpt_oss_120b_pretrain_config"): "gpt_oss_120b",
    ("megatron.bridge.recipes.kimi", "kimi_k2_pretrain_config"): "kimi_k2",
    ("megatron.bridge.recipes.qwen", "qwen3_30b_a3b_pretrain_config"): "qwen3_30b_a3b",
    ("megatron.bridge.recipes.qwen", "qwen3_235b_a22b_pretrain_config"): "qwen3_235b_a22b",
    ("megatron.bridge.recipes.nemotronh", "nemotron_3_nano_pretrain_config"): "nemotron_3_nano",
    ("megatron.bridge.recipes.nemotronh", "nemotron_3_super_pretrain_config"): "nemotron_3_super",
    ("megatron.bridge.recipes.nemotronh", "nemotron_3_ultra_pretrain_config"): "nemotron_3_ultra",
}

H100_70B_PRESET = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"


def resolve(cfg, world_size):
    """runtime_config_update as on the GPU cluster, where Transformer Engine imports."""
    with mock.patch("megatron.bridge.training.comm_overlap.HAVE_TE", True):
        return runtime_config_update(cfg, world_size=world_size)


@pytest.mark.parametrize(("module", "name"), list(UPSTREAM), ids=lambda x: x)
def test_upstream_name_is_the_shipped_recipe(module, name):
    assert getattr(importlib.import_module(module), name) is recipe_function(UPSTREAM[module, name])


def test_every_upstream_name_is_a_shipped_recipe():
    assert set(UPSTREAM.values()) <= set(RECIPES)


def test_upstream_name_builds_the_container_with_the_recipes_keywords():
    from megatron.bridge.recipes.llama import llama3_70b_pretrain_config

    cfg = llama3_70b_pretrain_config(gpu="b200")
    assert isinstance(cfg, ConfigContainer)
    # The B200 BF16 layout NVIDIA publishes: TP2 x PP4 (VPP5) x CP2.
    assert cfg.model.tensor_model_parallel_size == 2
    assert cfg.model.context_parallel_size == 2


def test_a_replaced_request_names_the_published_preset_that_fits():
    from megatron.bridge.recipes.llama import llama3_70b_pretrain_config

    cfg = llama3_70b_pretrain_config()
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)
    plan = resolve(cfg, 64)
    assert plan.value("tp_comm_overlap") is True and cfg.model.tp_comm_overlap_cfg is None
    (note,) = [n for n in plan.notes if "default userbuffer settings" in n]
    assert H100_70B_PRESET in note
    assert f"tp_comm_overlap_cfg={H100_70B_PRESET}" in note
    assert f"comm_overlap.tp_comm_overlap_cfg={H100_70B_PRESET}" in note
    assert H100_70B_PRESET in PUBLISHED_PRESETS


def test_no_preset_named_when_none_is_published_for_the_shape():
    from megatron.bridge.recipes.gpt import gpt3_175b_pretrain_config

    cfg = gpt3_175b_pretrain_config(gpu="a100")  # no presets are published for A100
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)
    plan = resolve(cfg, 1024)
    (note,) = [n for n in plan.notes if "default userbuffer settings" in n]
    assert "userbuffers_" not in note and "often faster" in note
