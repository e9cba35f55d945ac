"""The verification contract for megatron/bridge/training/comm_overlap.py: exactly 26 cases.

Every case runs the real resolution against real megatron-core config objects
(TransformerConfig, OptimizerConfig, DistributedDataParallelConfig). Only Transformer Engine's
availability is patched (TE cannot be imported on a CPU-only machine). Edge cases, the preset
table and the bad-input sweep live in sibling files.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest

from megatron.bridge.training.comm_overlap import (
    DEFAULT_BUCKET_SIZE,
    CommOverlapConfig,
    OverlapRefusedError,
    userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
    userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora,
)
from tests.unit_tests.conftest import make_configs

LOGGER = "megatron.bridge.training.comm_overlap"


def _setup(co: CommOverlapConfig, cfgs, dp: int = 1, mbs: int | None = None):
    return co.setup(
        cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=dp, micro_batch_size=mbs
    )


def _reference_layout(**kw):
    """The reference layout: TP4 + SP, PP4 with VPP2, distributed optimizer, hidden 12288."""
    return make_configs(tp=4, pp=4, vpp=2, sequence_parallel=True, hidden_size=12288, **kw)


# --- finalize ---------------------------------------------------------------------------------


def test_finalize_validates_and_changes_nothing():
    co = CommOverlapConfig(tp_comm_overlap=True, bucket_size=1024)
    before = dataclasses.asdict(co)
    co.finalize()
    co.finalize()
    assert dataclasses.asdict(co) == before
    with pytest.raises(TypeError, match="tp_comm_overlap must be True or False"):
        CommOverlapConfig(tp_comm_overlap="yes").finalize()


# --- TP gating --------------------------------------------------------------------------------


def test_tp_overlap_off_when_user_says_off(te_available):
    cfgs = _reference_layout()
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)
    assert cfgs.model.tp_comm_overlap is False
    assert plan.decision("tp_comm_overlap").source == "user"
    assert plan.warnings == ()


def test_tp_overlap_refused_with_tp_below_two(te_available, caplog):
    cfgs = make_configs(tp=1, sequence_parallel=True)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plan = _setup(CommOverlapConfig(tp_comm_overlap=True), cfgs)
    assert cfgs.model.tp_comm_overlap is False
    assert plan.decision("tp_comm_overlap").source == "refused"
    assert "tensor_model_parallel_size is 1" in caplog.text


def test_tp_overlap_refused_without_sequence_parallel(te_available, caplog):
    cfgs = make_configs(tp=4, sequence_parallel=False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _setup(CommOverlapConfig(tp_comm_overlap=True), cfgs)
    assert cfgs.model.tp_comm_overlap is False
    assert "sequence_parallel is False" in caplog.text
    assert "sequence_parallel=True" in caplog.text  # the fix is named


def test_tp_overlap_refused_without_transformer_engine(te_missing, caplog):
    cfgs = make_configs(tp=4, sequence_parallel=True)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plan = _setup(CommOverlapConfig(tp_comm_overlap=True), cfgs)
    assert cfgs.model.tp_comm_overlap is False
    assert "Transformer Engine is not available" in plan.decision("tp_comm_overlap").reason
    assert "Transformer Engine is not available" in caplog.text


def test_tp_overlap_honoured_when_all_conditions_hold(te_available):
    cfgs = make_configs(tp=4, sequence_parallel=True)
    plan = _setup(CommOverlapConfig(tp_comm_overlap=True, tp_comm_bootstrap_backend="mpi"), cfgs)
    assert cfgs.model.tp_comm_overlap is True
    assert cfgs.model.tp_comm_bootstrap_backend == "mpi"
    assert plan.decision("tp_comm_overlap").source == "user"
    assert plan.refused == ()


def test_tp_overlap_refusal_raises_in_strict_mode(te_missing):
    cfgs = make_configs(tp=4, sequence_parallel=True)
    with pytest.raises(OverlapRefusedError, match="Transformer Engine is not available"):
        _setup(CommOverlapConfig(tp_comm_overlap=True, strict=True), cfgs)


# --- PP selection -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pp", "vpp", "overlap", "batch"),
    [(4, 2, True, False), (4, None, False, True), (1, None, False, False)],
    ids=["pp4-vpp2", "pp4-no-vpp", "pp1"],
)
def test_pp_selection(pp, vpp, overlap, batch):
    cfgs = make_configs(pp=pp, vpp=vpp)
    _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs)
    assert (cfgs.model.overlap_p2p_comm, cfgs.model.batch_p2p_comm) == (overlap, batch)


def test_pp_user_override_wins_and_keeps_flags_exclusive():
    cfgs = make_configs(pp=4, vpp=2)
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False, batch_p2p_comm=True), cfgs)
    assert cfgs.model.batch_p2p_comm is True
    assert cfgs.model.overlap_p2p_comm is False
    assert plan.decision("batch_p2p_comm").source == "user"


# --- DP defaults ------------------------------------------------------------------------------


def test_dp_defaults_with_several_replicas():
    cfgs = make_configs()
    _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)
    assert cfgs.ddp.bucket_size == DEFAULT_BUCKET_SIZE == 128 * 1024 * 1024
    assert cfgs.ddp.overlap_grad_reduce is True
    assert cfgs.ddp.overlap_param_gather is True
    assert cfgs.optimizer.overlap_param_gather is True
    assert cfgs.ddp.align_param_gather is False  # no interleaved pipeline
    assert cfgs.optimizer.overlap_param_gather_with_optimizer_step is False


def test_dp_overlap_off_with_one_replica():
    cfgs = make_configs()
    _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=1)
    assert cfgs.ddp.overlap_grad_reduce is False
    assert cfgs.ddp.overlap_param_gather is False
    assert cfgs.ddp.bucket_size is None


def test_dp_with_interleaved_pipeline_aligns_param_gather():
    cfgs = make_configs(pp=4, vpp=2)
    _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)
    assert cfgs.ddp.align_param_gather is True
    assert cfgs.ddp.overlap_param_gather is True


def test_dp_user_bucket_size_wins():
    cfgs = make_configs()
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False, bucket_size=40_000_000), cfgs, dp=8)
    assert cfgs.ddp.bucket_size == 40_000_000
    assert plan.decision("bucket_size").source == "user"


def test_dp_without_distributed_optimizer_overlaps_grad_reduce_only():
    cfgs = make_configs(distributed_optimizer=False)
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)
    assert cfgs.ddp.overlap_grad_reduce is True
    assert cfgs.ddp.overlap_param_gather is False
    assert "distributed optimizer" in plan.decision("overlap_param_gather").reason


# --- presets ----------------------------------------------------------------------------------


def test_preset_becomes_te_dict_without_none_and_with_real_bools(te_available):
    cfgs = make_configs(tp=2, sequence_parallel=True, hidden_size=8192)
    co = CommOverlapConfig(
        tp_comm_overlap=True,
        tp_comm_overlap_cfg=userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora,
    )
    _setup(co, cfgs)
    ub = cfgs.model.tp_comm_overlap_cfg
    assert isinstance(ub, dict)
    assert "qkv_wgrad" not in ub and "fc1_wgrad" not in ub  # None in the preset: left out
    assert ub["proj_fprop"] == {
        "method": "ring_exchange",
        "num_sm": 1,
        "cga_size": 2,
        "set_sm_margin": True,
        "aggregate": False,
        "atomic_gemm": False,
        "fp8_buf": True,
    }
    flags = [
        v
        for knobs in ub.values()
        for k, v in knobs.items()
        if k in ("set_sm_margin", "fp8_buf", "aggregate", "atomic_gemm")
    ]
    assert flags and all(type(v) is bool for v in flags)
    assert all(v is not None for knobs in ub.values() for v in knobs.values())


def test_no_preset_means_transformer_engine_defaults(te_available, caplog):
    cfgs = make_configs(tp=4, sequence_parallel=True)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plan = _setup(CommOverlapConfig(tp_comm_overlap=True), cfgs)
    assert cfgs.model.tp_comm_overlap is True
    assert cfgs.model.tp_comm_overlap_cfg is None
    assert "default userbuffer settings" in caplog.text
    assert plan.decision("tp_comm_overlap_cfg").source == "default"


# --- idempotence and user fields ----------------------------------------------------------------


def test_setup_twice_gives_the_same_result(te_available):
    cfgs = _reference_layout()
    co = CommOverlapConfig(
        tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048
    )
    first = _setup(co, cfgs, dp=8, mbs=1)
    snapshot = (
        dataclasses.asdict(cfgs.ddp),
        dataclasses.asdict(cfgs.optimizer),
        cfgs.model.tp_comm_overlap_cfg,
    )
    second = _setup(co, cfgs, dp=8, mbs=1)
    assert first == second
    assert (
        dataclasses.asdict(cfgs.ddp),
        dataclasses.asdict(cfgs.optimizer),
        cfgs.model.tp_comm_overlap_cfg,
    ) == snapshot


def test_user_fields_are_never_changed(te_available):
    co = CommOverlapConfig(
        tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048
    )
    before = dataclasses.asdict(co)
    _setup(co, _reference_layout(), dp=8, mbs=1)
    assert dataclasses.asdict(co) == before
    assert co.overlap_p2p_comm is None and co.bucket_size is None
    assert co.resolved_plan is not None and co.resolved_plan.value("overlap_p2p_comm") is True


def test_seed_example_resolves_every_mode(te_available):
    cfgs = _reference_layout()
    cfgs.ddp.overlap_grad_reduce = True  # recipes usually set these straight on cfg.ddp
    cfgs.ddp.overlap_param_gather = True
    co = CommOverlapConfig(
        tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048
    )
    plan = _setup(co, cfgs, dp=8, mbs=1)
    assert cfgs.model.tp_comm_overlap is True
    assert (
        cfgs.model.tp_comm_overlap_cfg
        == userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048.to_ub_cfgs()
    )
    assert (cfgs.model.overlap_p2p_comm, cfgs.model.batch_p2p_comm) == (True, False)
    assert (
        cfgs.ddp.overlap_grad_reduce,
        cfgs.ddp.overlap_param_gather,
        cfgs.ddp.align_param_gather,
    ) == (True, True, True)
    assert plan.warnings == ()


# --- EP overlap and delayed wgrad -----------------------------------------------------------------


def test_ep_overlap_validation_lists_every_unmet_requirement():
    cfgs = make_configs(ep=1, num_moe_experts=None)
    with pytest.raises(ValueError, match="overlap_moe_expert_parallel_comm=True needs") as err:
        _setup(
            CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True), cfgs
        )
    assert "expert_model_parallel_size > 1" in str(err.value)
    assert "more than one expert" in str(err.value)
    assert "alltoall or flex" in str(err.value)


def test_ep_overlap_and_delayed_wgrad_honoured_on_a_valid_moe_layout():
    cfgs = make_configs(ep=4, num_moe_experts=8, moe_token_dispatcher_type="alltoall")
    co = CommOverlapConfig(
        tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True
    )
    _setup(co, cfgs, dp=1)  # DP 1: no grad-reduce overlap, so no TE version requirement
    assert cfgs.model.overlap_moe_expert_parallel_comm is True
    assert cfgs.model.delay_wgrad_compute is True
    assert cfgs.ddp.delay_wgrad_compute is True


def test_delayed_wgrad_needs_ep_overlap():
    cfgs = make_configs()
    with pytest.raises(
        ValueError, match="delay_wgrad_compute=True needs overlap_moe_expert_parallel_comm=True"
    ):
        _setup(CommOverlapConfig(tp_comm_overlap=False, delay_wgrad_compute=True), cfgs)


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"bucket_size": True}, TypeError, "bucket_size must be an int"),
        ({"overlap_p2p_comm": True, "batch_p2p_comm": True}, ValueError, "choose one"),
    ],
    ids=["bool-bucket-size", "both-p2p-modes"],
)
def test_bad_input_names_the_field(kwargs, error, match):
    cfgs = make_configs(pp=4, vpp=2)
    with pytest.raises(error, match=match):
        _setup(CommOverlapConfig(tp_comm_overlap=False, **kwargs), cfgs, dp=8)
