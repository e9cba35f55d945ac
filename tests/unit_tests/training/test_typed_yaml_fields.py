"""A field a hand-written YAML (or dict) document lists is the user's, megatron-core's default
included; a complete dump (``to_yaml`` writes every field) marks nothing typed."""

from __future__ import annotations

import yaml

from megatron.bridge.recipes import get_recipe
from megatron.bridge.training.container import ConfigContainer
from megatron.bridge.training.resolve import runtime_config_update

WORLD_DP32 = 1024  # gpt3_175b runs TP4 x PP8 x CP1: DP 32


def _document(**ddp):
    doc = get_recipe("gpt3_175b").to_dict()
    doc["ddp"] = {"_target_": doc["ddp"]["_target_"], **ddp}
    return doc


def _decision(cfg, knob):
    return runtime_config_update(cfg, world_size=WORLD_DP32, te="assume").decision(knob)


def test_a_default_listed_in_a_hand_written_yaml_section_is_honoured(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_document(overlap_grad_reduce=False)))
    cfg = ConfigContainer.from_yaml(path)
    decision = _decision(cfg, "overlap_grad_reduce")
    assert (decision.value, decision.source) == (False, "user")
    assert cfg.ddp.overlap_grad_reduce is False


def test_a_field_the_section_leaves_out_is_derived():
    cfg = ConfigContainer.from_dict(_document(overlap_grad_reduce=False))
    decision = _decision(cfg, "overlap_param_gather")
    assert decision.source == "derived"


def test_a_complete_dump_marks_nothing_typed(tmp_path):
    cfg = get_recipe("gpt3_175b")
    cfg.ddp.overlap_grad_reduce = False
    path = tmp_path / "dump.yaml"
    cfg.to_yaml(path)
    loaded = ConfigContainer.from_yaml(path)
    decision = _decision(loaded, "overlap_grad_reduce")
    assert (decision.value, decision.source) == (True, "derived")
    assert any(n.startswith("cfg.ddp.overlap_grad_reduce=False is") for n in _notes(loaded))


def _notes(cfg):
    return runtime_config_update(cfg, world_size=WORLD_DP32, te="assume").notes
