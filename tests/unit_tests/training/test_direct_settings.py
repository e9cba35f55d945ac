"""Overlap knobs written straight on megatron-core configs instead of in CommOverlapConfig.

A knob is read from every config the knob table writes it to (``overlap_param_gather`` from
``cfg.ddp`` and ``cfg.optimizer``, ``delay_wgrad_compute`` from ``cfg.model`` and ``cfg.ddp``):
a setting on any of them is honoured or reported as the table says, two that disagree are
warned about, and a value the user changes after an update is theirs even when it is
megatron-core's default. Before the library first writes a field, a default there cannot be told
apart from an untouched field: the plan says so in a note.

Real megatron-core configs (conftest's ``make_configs``, a real recipe) throughout.
"""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.recipes import get_recipe
from megatron.bridge.training.comm_overlap import CommOverlapConfig, OverlapRefusedError
from megatron.bridge.training.resolve import runtime_config_update
from tests.unit_tests.conftest import make_configs

#: gpt3_175b runs TP4 x PP8 (VPP6) x CP1: 32 GPUs are DP=1, 1024 are DP=32.
WORLD_DP1, WORLD_DP32 = 32, 1024


def _setup(co, cfgs, dp):
    return co.setup(cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=dp)


def _update(cfg, world_size):
    return runtime_config_update(cfg, world_size=world_size, te="assume")


@pytest.mark.parametrize("config", ["ddp", "optimizer"])
def test_param_gather_set_on_either_config_is_honoured_alike(config):
    cfgs = make_configs()
    getattr(cfgs, config).overlap_param_gather = True
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)
    decision = plan.decision("overlap_param_gather")
    assert (decision.value, decision.source) == (True, "user")
    assert decision.reason == f"set on cfg.{config}.overlap_param_gather"
    assert (cfgs.ddp.overlap_param_gather, cfgs.optimizer.overlap_param_gather) == (True, True)
    assert plan.warnings == ()


@pytest.mark.parametrize("config", ["ddp", "optimizer"])
def test_param_gather_set_on_either_config_needs_the_distributed_optimizer(config):
    cfgs = make_configs(distributed_optimizer=False)
    getattr(cfgs, config).overlap_param_gather = True
    with pytest.raises(
        ValueError,
        match=rf"needs the distributed optimizer.*\(set on cfg\.{config}\.overlap_param_gather\)",
    ):
        _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)


def test_param_gather_on_the_optimizer_at_dp1_is_kept_with_a_note_naming_it():
    cfg = get_recipe("gpt3_175b")
    cfg.optimizer.overlap_param_gather = True
    plan = _update(cfg, WORLD_DP1)
    assert plan.job.dp_size == 1
    gather = plan.decision("overlap_param_gather")
    assert (gather.value, gather.source) == (True, "user")
    assert "cfg.optimizer.overlap_param_gather" in gather.reason
    assert (cfg.optimizer.overlap_param_gather, cfg.ddp.overlap_param_gather) == (True, True)
    # megatron-core overlaps the param gather only together with the grad reduce.
    grad = plan.decision("overlap_grad_reduce")
    assert (grad.value, grad.source) == (True, "derived")
    assert "overlap_param_gather=True (set on cfg.optimizer.overlap_param_gather)" in grad.reason
    assert any(
        "cfg.optimizer.overlap_param_gather" in note
        and "DP=1" in note
        and "no parameter is gathered" in note
        for note in plan.notes
    ), plan.notes


def test_both_configs_with_the_same_setting_are_both_named():
    cfgs = make_configs()
    cfgs.ddp.overlap_param_gather = True
    cfgs.optimizer.overlap_param_gather = True
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)
    assert plan.decision("overlap_param_gather").reason == (
        "set on cfg.ddp.overlap_param_gather and cfg.optimizer.overlap_param_gather"
    )
    assert plan.warnings == ()


def _disagreeing_param_gather() -> tuple[object, CommOverlapConfig]:
    cfgs = make_configs()
    cfgs.ddp.overlap_param_gather = True
    _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)  # writes True to both
    cfgs.optimizer.overlap_param_gather = False  # the user's, though megatron-core's default
    return cfgs, CommOverlapConfig(tp_comm_overlap=False)


def test_configs_that_disagree_are_warned_about_and_ddp_wins():
    cfgs, request = _disagreeing_param_gather()
    plan = _setup(request, cfgs, dp=8)
    decision = plan.decision("overlap_param_gather")
    assert (decision.value, decision.source) == (True, "user")
    assert decision.reason == "set on cfg.ddp.overlap_param_gather"
    assert any(
        "cfg.ddp.overlap_param_gather=True but cfg.optimizer.overlap_param_gather=False" in w
        for w in plan.warnings
    ), plan.warnings
    assert (cfgs.ddp.overlap_param_gather, cfgs.optimizer.overlap_param_gather) == (True, True)


def test_configs_that_disagree_are_an_error_in_strict_mode():
    cfgs, request = _disagreeing_param_gather()
    with pytest.raises(OverlapRefusedError, match=r"cfg\.optimizer\.overlap_param_gather=False"):
        _setup(dataclasses.replace(request, strict=True), cfgs, dp=8)


@pytest.mark.parametrize("config", ["ddp", "optimizer"])
def test_a_request_contradicting_either_config_says_choose_one(config):
    cfgs = make_configs()
    getattr(cfgs, config).overlap_param_gather = True
    request = CommOverlapConfig(tp_comm_overlap=False, overlap_param_gather=False)
    with pytest.raises(ValueError, match=rf"cfg\.{config}\.overlap_param_gather: choose one"):
        _setup(request, cfgs, dp=8)


def test_a_reported_knob_on_its_second_target_is_reported():
    cfgs = make_configs()
    cfgs.ddp.delay_wgrad_compute = True  # the model config is its first target
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)
    assert plan.value("delay_wgrad_compute") is False
    assert any(
        w.startswith("cfg.ddp.delay_wgrad_compute=True is replaced by False") for w in plan.warnings
    )
    assert (cfgs.ddp.delay_wgrad_compute, cfgs.model.delay_wgrad_compute) == (False, False)


def test_false_set_after_an_update_is_the_users():
    cfg = get_recipe("gpt3_175b")
    _update(cfg, WORLD_DP32)
    assert cfg.ddp.overlap_grad_reduce is True
    cfg.ddp.overlap_grad_reduce = False

    plan = _update(cfg, WORLD_DP32)
    grad = plan.decision("overlap_grad_reduce")
    assert (grad.value, grad.source, grad.reason) == (
        False,
        "user",
        "set on cfg.ddp.overlap_grad_reduce",
    )
    assert cfg.ddp.overlap_grad_reduce is False
    assert plan.value("overlap_param_gather") is False  # it needs the grad reduce overlap
    assert _update(cfg, WORLD_DP32) == plan

    cfg.comm_overlap = None
    _update(cfg, WORLD_DP32)
    assert cfg.ddp.overlap_grad_reduce is False


def test_a_reported_knob_changed_after_an_update_is_reported():
    cfg = get_recipe("gpt3_175b")
    _update(cfg, WORLD_DP32)
    assert cfg.model.overlap_p2p_comm is True  # interleaved pipeline
    cfg.model.overlap_p2p_comm = False
    plan = _update(cfg, WORLD_DP32)
    assert plan.value("overlap_p2p_comm") is True
    assert any(
        w.startswith("cfg.model.overlap_p2p_comm=False is replaced by True") for w in plan.warnings
    )


def test_false_set_before_the_first_update_reads_as_unset_and_comm_overlap_config_keeps_it():
    cfg = get_recipe("gpt3_175b")
    # Equal to megatron-core's default on a config the library has not written yet: nothing
    # tells this assignment from an untouched field, so the rules derive the knob.
    cfg.ddp.overlap_grad_reduce = False
    plan = _update(cfg, WORLD_DP32)
    grad = plan.decision("overlap_grad_reduce")
    assert (grad.value, grad.source) == (True, "derived")

    # The remedy the docs name: CommOverlapConfig, where False is always the user's.
    cfg.comm_overlap = dataclasses.replace(cfg.comm_overlap, overlap_grad_reduce=False)
    plan = _update(cfg, WORLD_DP32)
    assert (plan.value("overlap_grad_reduce"), cfg.ddp.overlap_grad_reduce) == (False, False)
    assert plan.decision("overlap_grad_reduce").source == "user"
