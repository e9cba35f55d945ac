"""Tests for megatron/bridge/check/config.py: the recipe's config as the check runs it.

A recipe with a spec is changed by job-description field and built once; a recipe that only
builds a container gets the layout as keyword overrides and the tiny model written over it.
Both routes must give the same config, layout and notes for the same recipe.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

import pytest

from megatron.bridge.check import Layout, build_check_config, build_parser

PRESET = "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048"

# The same recipes twice: as specs, and as functions that return only the built container.
USER_MODULE = textwrap.dedent(
    f"""
    import dataclasses

    from megatron.bridge.recipes import get_recipe, recipe_spec
    from megatron.bridge.training.comm_overlap import PUBLISHED_PRESETS


    def gpt3_container(**overrides):
        return get_recipe("gpt3_175b", **overrides)


    def llama3_container(**overrides):
        return get_recipe("llama3_70b", **overrides)


    def gpt3_named_preset_spec(**overrides):
        return recipe_spec("gpt3_175b", **overrides).changed(preset={PRESET!r})


    def gpt3_named_preset_container(**overrides):
        cfg = get_recipe("gpt3_175b", **overrides)
        preset = PUBLISHED_PRESETS[{PRESET!r}]
        cfg.comm_overlap = dataclasses.replace(cfg.comm_overlap, tp_comm_overlap_cfg=preset)
        return cfg
    """
)

PLAIN = (int, float, str, bool, type(None))


@pytest.fixture
def user_recipes(importable_module):
    return importable_module("check_user_recipes", USER_MODULE)


def _plain_fields(obj: Any) -> dict[str, Any]:
    """The fields of a config dataclass that hold plain values (not functions or modules)."""
    fields = {}
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if isinstance(value, PLAIN) or (
            isinstance(value, list | tuple) and all(isinstance(v, PLAIN) for v in value)
        ):
            fields[field.name] = value
    return fields


def _checked(recipe: str, world_size: int, argv: list[str]) -> dict[str, Any]:
    args = build_parser().parse_args(["--recipe", recipe, *argv])
    cfg, layout, notes = build_check_config(args, world_size=world_size, on_cuda=False)
    return {
        "layout": layout,
        "notes": notes,
        "model": _plain_fields(cfg.model),
        "train": (cfg.train.micro_batch_size, cfg.train.global_batch_size),
        "comm_overlap": cfg.comm_overlap,
        "gpu": cfg.gpu,
        "env_vars": cfg.env_vars,
    }


@pytest.mark.parametrize(
    ("spec_recipe", "container_recipe"),
    [
        ("gpt3_175b", "gpt3_container"),
        ("llama3_70b", "llama3_container"),
        ("{module}:gpt3_named_preset_spec", "gpt3_named_preset_container"),
    ],
)
@pytest.mark.parametrize(
    ("world_size", "argv"),
    [
        (4, ["--tiny"]),
        (4, ["--tiny", "--pp", "1"]),
        (8, ["--tp", "2", "--pp", "2", "--vpp", "1", "--cp", "1"]),
    ],
)
def test_spec_and_container_routes_give_the_same_check_config(
    user_recipes, spec_recipe, container_recipe, world_size, argv
):
    from_spec = _checked(spec_recipe.format(module=user_recipes), world_size, argv)
    from_container = _checked(f"{user_recipes}:{container_recipe}", world_size, argv)
    assert from_spec == from_container
    tiny_model = from_spec["model"]["hidden_size"] == 16 * 2 * from_spec["layout"].tp
    assert tiny_model == ("--tiny" in argv)


@pytest.mark.parametrize("recipe", ["gpt3_named_preset_spec", "gpt3_named_preset_container"])
def test_tiny_model_drops_the_recipes_preset_with_a_note(user_recipes, recipe):
    checked = _checked(f"{user_recipes}:{recipe}", 4, ["--tiny"])
    assert checked["layout"] == Layout(tp=2, pp=2, vpp=2, cp=1, dp=1)
    assert checked["comm_overlap"].tp_comm_overlap_cfg is None
    assert any("userbuffers preset is tuned for its full-size model" in n for n in checked["notes"])


def test_full_size_model_keeps_the_recipes_preset(user_recipes):
    checked = _checked(f"{user_recipes}:gpt3_named_preset_spec", 8, ["--tp", "2", "--pp", "4"])
    assert checked["comm_overlap"].tp_comm_overlap_cfg is not None
    assert not any("userbuffers preset" in n for n in checked["notes"])
