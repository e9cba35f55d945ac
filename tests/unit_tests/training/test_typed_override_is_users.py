"""A value typed as an override is the user's, megatron-core's default included.

``ddp.overlap_grad_reduce=false`` on the command line (or through ``apply_overrides``) equals
megatron-core's default, which a field set in Python cannot tell apart from an untouched one; the
typed value is recorded as typed, so the plan honours it (or, for a knob the plan only reports,
says that it replaced it). In Python, where the default reads as not set, the plan names the
megatron-core default it re-derived and how to keep it.
"""

from __future__ import annotations

import json

import pytest

from megatron.bridge.cli.entry import main
from megatron.bridge.recipes import get_recipe
from megatron.bridge.training.overrides import apply_overrides
from megatron.bridge.training.resolve import runtime_config_update

#: gpt3_175b runs TP4 x PP8 (VPP6) x CP1: 1024 GPUs are DP=32.
WORLD_DP32 = 1024


def _update(cfg, world_size=WORLD_DP32):
    return runtime_config_update(cfg, world_size=world_size, te="assume")


def test_typed_default_on_the_command_line_is_honoured(capsys):
    code = main(["explain", "--recipe", "llama3_8b", "--json", "ddp.overlap_grad_reduce=false"])
    out = capsys.readouterr().out
    assert code == 0, out
    decisions = {d["knob"]: d for d in json.loads(out)["overlap"]["decisions"]}
    grad = decisions["overlap_grad_reduce"]
    assert (grad["value"], grad["source"]) == (False, "user")
    assert grad["reason"] == "set on cfg.ddp.overlap_grad_reduce"


@pytest.mark.parametrize(
    ("override", "knob"),
    [
        ("ddp.overlap_grad_reduce=false", "overlap_grad_reduce"),
        ("ddp.align_param_gather=false", "align_param_gather"),
    ],
)
def test_typed_default_through_apply_overrides_is_honoured_on_every_update(override, knob):
    cfg = apply_overrides(get_recipe("gpt3_175b"), [override])
    for _ in range(2):  # a second update sees the same request as the first
        plan = _update(cfg)
        decision = plan.decision(knob)
        assert (decision.value, decision.source) == (False, "user")
        assert getattr(cfg.ddp, knob) is False


def test_a_later_python_setting_replaces_the_typed_one():
    cfg = apply_overrides(get_recipe("gpt3_175b"), ["ddp.overlap_grad_reduce=false"])
    cfg.ddp.overlap_grad_reduce = True
    decision = _update(cfg).decision("overlap_grad_reduce")
    assert (decision.value, decision.source) == (True, "user")


def test_typed_default_of_a_reported_knob_is_replaced_with_a_warning():
    cfg = apply_overrides(get_recipe("gpt3_175b"), ["model.overlap_p2p_comm=false"])
    plan = _update(cfg)
    assert plan.value("overlap_p2p_comm") is True
    assert any(
        w.startswith("cfg.model.overlap_p2p_comm=False is replaced by True") for w in plan.warnings
    ), plan.warnings


def test_python_default_rederived_is_named_in_a_note():
    cfg = get_recipe("gpt3_175b")
    cfg.ddp.overlap_grad_reduce = False  # megatron-core's default: reads as not set
    plan = _update(cfg)
    assert plan.decision("overlap_grad_reduce").source == "derived"
    (note,) = [n for n in plan.notes if n.startswith("cfg.ddp.overlap_grad_reduce=False is")]
    assert "megatron-core's default" in note and "derived True" in note
    assert "CommOverlapConfig(overlap_grad_reduce=False)" in note
    assert "ddp.overlap_grad_reduce=false" in note
    # The same plan on a second update, where the field holds the plan's own write.
    assert _update(cfg).notes == plan.notes


def test_no_rederived_note_for_a_typed_default():
    cfg = apply_overrides(get_recipe("gpt3_175b"), ["ddp.overlap_grad_reduce=false"])
    plan = _update(cfg)
    assert not [n for n in plan.notes if n.startswith("cfg.ddp.overlap_grad_reduce=False is")]
