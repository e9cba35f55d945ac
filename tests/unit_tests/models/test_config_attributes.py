"""Settings megatron-core reads off a config by name only: kept through the provider and YAML."""

from __future__ import annotations

import pytest

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.recipes.gpt_oss_120b import gpt_oss_120b
from megatron.bridge.training.serialization import from_yaml, to_yaml

YARN = {
    "yarn_rotary_scaling_factor": 32.0,
    "yarn_original_max_position_embeddings": 4096,
    "yarn_beta_fast": 32.0,
    "yarn_beta_slow": 1.0,
    "yarn_correction_range_round_to_int": False,
    "yarn_mscale": None,
    "yarn_mscale_all_dim": None,
}


def _yarn(model) -> dict:
    return {name: getattr(model, name, "absent") for name in YARN}


def test_the_gpt_oss_recipe_sets_its_yarn_settings_on_the_config():
    assert _yarn(gpt_oss_120b().model) == YARN


def test_a_yaml_round_trip_keeps_them(tmp_path):
    path = tmp_path / "gpt_oss.yaml"
    path.write_text(to_yaml(gpt_oss_120b()))
    back = from_yaml(path).model
    assert dict(back.config_attributes) == YARN
    assert _yarn(back) == YARN


def test_finalize_sets_them_again_after_a_change():
    provider = GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4)
    provider.config_attributes = {"yarn_beta_fast": 16.0}
    provider.finalize()
    assert provider.yarn_beta_fast == 16.0


def test_a_provider_without_them_has_no_such_attribute():
    provider = GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4)
    assert not hasattr(provider, "yarn_rotary_scaling_factor")


def test_a_declared_field_is_refused_there():
    with pytest.raises(
        ValueError, match=r"config_attributes\['seq_length'\].*cfg\.model\.seq_length"
    ):
        GPTModelProvider(config_attributes={"seq_length": 4096})
