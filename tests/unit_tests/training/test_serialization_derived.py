"""Derived values stay derived through YAML: a round trip, then a change, re-derives them.

A recipe derives environment variables (``cfg.env_vars``, recorded as ``derived_env``) and
chooses a userbuffers preset automatically (``comm_overlap.preset_chosen_by``). A container read
back from YAML must follow a later change of EP, GPU or precision exactly as the container it
was saved from: each test makes the change on both and compares.
"""

from __future__ import annotations

import os

import pytest
import yaml

from megatron.bridge.recipes import get_recipe
from megatron.bridge.training.config import ConfigContainer, runtime_config_update
from megatron.bridge.training.resolve import resolve_config
from megatron.bridge.training.serialization import from_yaml, to_yaml

HYBRID_EP_RANKS = "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"


def _twins(cfg: ConfigContainer, tmp_path) -> tuple[ConfigContainer, ConfigContainer]:
    """``cfg`` and the container its YAML file reads back as."""
    cfg.to_yaml(tmp_path / "config.yaml")
    return cfg, ConfigContainer.from_yaml(tmp_path / "config.yaml")


def test_the_issue_example_re_derives_the_hybrid_ep_ranks():
    cfg = get_recipe("qwen3_30b_a3b", precision="bf16")
    assert cfg.env_vars[HYBRID_EP_RANKS] == str(cfg.model.expert_model_parallel_size) == "8"
    again = from_yaml(to_yaml(cfg))
    again.model.expert_model_parallel_size = 16
    runtime_config_update(again, world_size=64, te="assume")
    assert again.env_vars[HYBRID_EP_RANKS] == "16"
    assert os.environ[HYBRID_EP_RANKS] == "16"


def test_the_file_records_what_was_derived(tmp_path):
    cfg = get_recipe("qwen3_30b_a3b", precision="bf16")
    cfg.to_yaml(tmp_path / "config.yaml")
    doc = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert doc["derived_env"] == {"gpu": "gb300", "precision": "bf16", "env": cfg.env_vars}


@pytest.mark.parametrize(
    ("change", "rederived"),
    [
        pytest.param({"ep": 16}, True, id="ep16"),
        pytest.param({"gpu": "h100"}, True, id="gpu"),
        # MXFP8 on the same GPU and layout derives the same variables.
        pytest.param({"mixed_precision": "bf16_with_mxfp8_mixed"}, False, id="precision"),
    ],
)
def test_env_vars_follow_a_change_as_without_the_round_trip(change, rederived, tmp_path):
    cfg = get_recipe("qwen3_30b_a3b", precision="bf16")
    # A value of the user's stays the user's either way.
    cfg.env_vars["NVTE_FWD_LAYERNORM_SM_MARGIN"] = 16
    results = []
    for c in _twins(cfg, tmp_path):
        if "ep" in change:
            c.model.expert_model_parallel_size = change["ep"]
        if "gpu" in change:
            c.gpu = change["gpu"]
        if "mixed_precision" in change:
            c.mixed_precision = change["mixed_precision"]
        resolved = resolve_config(c, world_size=64, te="assume")
        results.append((resolved.env_vars, resolved.derived_env))
    (direct, direct_derived), (loaded, loaded_derived) = results
    assert loaded == direct and loaded_derived == direct_derived
    assert direct["NVTE_FWD_LAYERNORM_SM_MARGIN"] == 16
    assert (direct != cfg.env_vars) is rederived


def test_an_automatic_preset_is_chosen_again_as_without_the_round_trip(tmp_path):
    cfg = get_recipe("llama3_70b")
    assert "chosen automatically" in cfg.comm_overlap.preset_chosen_by
    chosen = cfg.comm_overlap.tp_comm_overlap_cfg
    plans = []
    for c in _twins(cfg, tmp_path):
        c.gpu = "b200"
        plans.append(resolve_config(c, world_size=64, te="assume").plan)
    direct, loaded = plans
    assert loaded.value("tp_comm_overlap_cfg") == direct.value("tp_comm_overlap_cfg")
    assert (
        loaded.decision("tp_comm_overlap_cfg").reason
        == direct.decision("tp_comm_overlap_cfg").reason
    )
    assert "chosen automatically again" in direct.decision("tp_comm_overlap_cfg").reason
    assert direct.value("tp_comm_overlap_cfg") != chosen


def test_a_named_preset_that_no_longer_fits_is_refused_as_without_the_round_trip(tmp_path):
    cfg = get_recipe("llama3_70b")
    cfg.comm_overlap.preset_chosen_by = None  # the preset is now the user's
    for c in _twins(cfg, tmp_path):
        c.gpu = "b200"
        with pytest.raises(ValueError, match="is the preset you named"):
            resolve_config(c, world_size=64, te="assume")


def test_a_container_no_recipe_built_has_nothing_derived(tmp_path):
    cfg = get_recipe("qwen3_30b_a3b", precision="bf16")
    cfg.to_yaml(tmp_path / "config.yaml")
    doc = yaml.safe_load((tmp_path / "config.yaml").read_text())
    doc["derived_env"] = None
    bare = ConfigContainer.from_dict(doc)
    bare.model.expert_model_parallel_size = 16
    # Nothing recorded as derived: every variable is the user's and stays as written.
    env = resolve_config(bare, world_size=64, te="assume").env_vars
    assert env[HYBRID_EP_RANKS] == "8"


@pytest.mark.parametrize(
    ("derived", "match"),
    [
        ({"gpu": "h100", "precision": "bf16", "env": {"X": 1}, "extra": 1}, "not a key"),
        ({"gpu": "h999", "precision": "bf16", "env": {}}, "derived_env.gpu"),
        ({"gpu": "h100", "precision": 7, "env": {}}, "derived_env.precision"),
        ("yes", "derived_env"),
    ],
)
def test_a_bad_derived_env_is_refused_naming_the_key(derived, match, tmp_path):
    cfg = get_recipe("qwen3_30b_a3b", precision="bf16")
    doc = cfg.to_dict()
    doc["derived_env"] = derived
    with pytest.raises((TypeError, ValueError), match=match):
        ConfigContainer.from_dict(doc, origin="config.yaml")
