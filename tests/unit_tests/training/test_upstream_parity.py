"""Rules upstream Megatron-Bridge and megatron-core 0.19 enforce, checked by ours before launch.

Covers megatron/bridge/training/comm_overlap (megatron_io.py, rules/) and the post-build check
in megatron/bridge/training/setup.py. Real megatron-core configs; only Transformer Engine (its
availability, version and ``initialize_ub``) is patched.
"""

from __future__ import annotations

import logging
from unittest import mock

import pytest
import torch
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.comm_overlap import CommOverlapConfig, OverlapRefusedError
from megatron.bridge.training.comm_overlap.megatron_io import (
    describe_configs,
    undo_plan,
    write_distributed_optimizer,
)
from megatron.bridge.training.comm_overlap.te import TEStatus
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.training.initialize import reset_tp_communicators
from megatron.bridge.training.setup import build_model
from tests.unit_tests.conftest import TINY_MODEL_FIELDS, make_configs, stub_transformer_engine

TE_2_12 = TEStatus(available=True, version="2.12.0", reason="")


# --------------------------------------------------------------------- distributed optimizer


@pytest.mark.parametrize(
    ("ddp_flag", "opt_flag", "changed"), [(True, False, "optimizer"), (False, True, "ddp")]
)
def test_setup_turns_the_distributed_optimizer_on_on_both_configs(ddp_flag, opt_flag, changed):
    cfgs = make_configs()
    cfgs.ddp.use_distributed_optimizer = ddp_flag
    cfgs.optimizer.use_distributed_optimizer = opt_flag
    plan = CommOverlapConfig(tp_comm_overlap=False).setup(
        cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=8
    )
    assert cfgs.ddp.use_distributed_optimizer is True
    assert cfgs.optimizer.use_distributed_optimizer is True
    assert plan.job.use_distributed_optimizer is True
    assert plan.job.distributed_optimizer_turned_on == changed
    assert any(f"cfg.{changed}.use_distributed_optimizer is set to True" in n for n in plan.notes)
    # The distributed optimizer counted for the DP rules: the param all-gather is overlapped.
    assert plan.value("overlap_param_gather") is True


def test_setup_from_bare_megatron_configs_with_the_flag_on_ddp_only():
    model = make_configs().model
    optimizer, ddp = (
        OptimizerConfig(bf16=True),
        DistributedDataParallelConfig(use_distributed_optimizer=True),
    )
    first = CommOverlapConfig(tp_comm_overlap=False).setup(
        model, optimizer, ddp, data_parallel_size=4
    )
    second = CommOverlapConfig(tp_comm_overlap=False).setup(
        model, optimizer, ddp, data_parallel_size=4
    )
    assert optimizer.use_distributed_optimizer is True
    # Twice gives the same plan: the second setup sees the user's request through our write.
    assert second.to_dict() == first.to_dict()
    # Undo puts the optimizer back as the user wrote it.
    assert "cfg.optimizer.use_distributed_optimizer" in undo_plan(model, optimizer, ddp)
    assert optimizer.use_distributed_optimizer is False and ddp.use_distributed_optimizer is True


def test_agreeing_flags_get_no_note():
    cfgs = make_configs(distributed_optimizer=True)
    plan = CommOverlapConfig(tp_comm_overlap=False).setup(
        cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=8
    )
    assert plan.job.distributed_optimizer_turned_on is None
    assert not any("use_distributed_optimizer" in n for n in plan.notes)


def test_distributed_optimizer_is_turned_on_where_off_and_the_changed_config_named():
    model = make_configs().model
    optimizer, ddp = (
        OptimizerConfig(use_distributed_optimizer=True),
        DistributedDataParallelConfig(),
    )
    job = describe_configs(model, optimizer, ddp, world_size=8)
    write_distributed_optimizer(job, optimizer, ddp)
    note = job.distributed_optimizer_note
    assert (
        ddp.use_distributed_optimizer is True
        and "cfg.ddp.use_distributed_optimizer is set to True" in note
    )
    # Read again, the configs say what the user wrote (our write is seen through): the same job.
    assert describe_configs(model, optimizer, ddp, world_size=8) == job
    agreeing = describe_configs(
        model,
        OptimizerConfig(use_distributed_optimizer=True),
        DistributedDataParallelConfig(use_distributed_optimizer=True),
        world_size=8,
    )
    assert agreeing.distributed_optimizer_note is None
    ddp.use_distributed_optimizer = "yes"
    with pytest.raises(
        TypeError, match=r"cfg\.ddp\.use_distributed_optimizer must be True or False"
    ):
        describe_configs(model, optimizer, ddp, world_size=8)


# --------------------------------------------------------------------- rules upstream / mcore enforce


def _moe_configs(**model_kwargs):
    cfgs = make_configs(
        ep=4,
        num_moe_experts=8,
        moe_token_dispatcher_type="alltoall",
        distributed_optimizer=True,
        **model_kwargs,
    )
    return cfgs


def _ep_setup(cfgs, *, te=TE_2_12, **request):
    co = CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True, **request)
    return co.setup(cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=8, te_status=te)


@pytest.mark.parametrize("impl", ["local", "transformer_engine"])
def test_delayed_wgrad_with_attn_graphs_needs_gradient_accumulation_fusion(impl):
    cfgs = _moe_configs(add_bias_linear=False)
    cfgs.model.cuda_graph_impl = impl
    cfgs.model.cuda_graph_modules = ["attn"]
    cfgs.model.gradient_accumulation_fusion = False
    with pytest.raises(ValueError, match=r"gradient_accumulation_fusion=True on cfg\.model"):
        _ep_setup(cfgs, delay_wgrad_compute=True)
    cfgs.model.gradient_accumulation_fusion = True
    assert _ep_setup(cfgs, delay_wgrad_compute=True).value("delay_wgrad_compute") is True


@pytest.mark.parametrize(("bias", "qkv_bias"), [(True, False), (False, True)])
def test_delayed_wgrad_with_attn_graphs_refuses_attention_bias(bias, qkv_bias):
    cfgs = _moe_configs(
        add_bias_linear=bias, add_qkv_bias=qkv_bias, gradient_accumulation_fusion=True
    )
    cfgs.model.cuda_graph_impl = "transformer_engine"
    cfgs.model.cuda_graph_modules = ["attn"]
    with pytest.raises(
        ValueError, match=r"does not support attention bias: set cfg\.model\.add_bias_linear=False"
    ):
        _ep_setup(cfgs, delay_wgrad_compute=True)


def test_delayed_wgrad_outside_graphed_attention_keeps_bias_and_needs_no_fusion():
    # cuda_graph_impl="none": cuda_graph_modules has no effect in megatron-core.
    cfgs = _moe_configs(add_bias_linear=True)
    cfgs.model.cuda_graph_modules = ["attn"]
    cfgs.model.gradient_accumulation_fusion = False
    assert _ep_setup(cfgs, delay_wgrad_compute=True).value("delay_wgrad_compute") is True


def test_delayed_wgrad_with_graphed_router_and_shared_experts_needs_fusion():
    cfgs = _moe_configs(moe_shared_expert_intermediate_size=512, gradient_accumulation_fusion=False)
    cfgs.model.cuda_graph_impl = "local"
    cfgs.model.cuda_graph_modules = ["moe_router"]
    with pytest.raises(
        ValueError,
        match="covering moe_router with shared experts needs gradient_accumulation_fusion",
    ):
        _ep_setup(cfgs, delay_wgrad_compute=True)


@pytest.mark.parametrize(
    ("modules", "version", "needed"),
    [(["attn"], "2.11.0", r"2\.12"), ([], "2.9.0", r"2\.10")],
)
def test_delayed_wgrad_with_te_graphs_needs_recent_te(modules, version, needed):
    cfgs = _moe_configs(add_bias_linear=False, gradient_accumulation_fusion=True)
    cfgs.model.cuda_graph_impl = "transformer_engine"
    cfgs.model.cuda_graph_modules = modules
    te = TEStatus(available=True, version=version, reason="")
    with pytest.raises(ValueError, match=rf"Transformer Engine >= {needed} \(found {version}\)"):
        _ep_setup(cfgs, te=te, delay_wgrad_compute=True)


@pytest.mark.parametrize("module", ["moe", "mlp"])
def test_ep_overlap_refuses_te_graphs_of_moe_or_mlp(module):
    cfgs = _moe_configs()
    cfgs.model.cuda_graph_impl = "transformer_engine"
    cfgs.model.cuda_graph_modules = [module]
    with pytest.raises(
        ValueError,
        match=rf"no {module} in cuda_graph_modules with cuda_graph_impl='transformer_engine'",
    ):
        _ep_setup(cfgs)


def test_ep_overlap_and_dispatch_backward_overlap_are_exclusive():
    cfgs = _moe_configs()
    cfgs.model.overlap_dispatch_backward_with_experts_wgrad = True
    with pytest.raises(ValueError, match="overlap_dispatch_backward_with_experts_wgrad=False"):
        _ep_setup(cfgs)


def test_early_attn_memory_release_needs_ep_overlap():
    cfgs = _moe_configs()
    cfgs.model.ep_overlap_early_attn_memory_release = True
    with pytest.raises(
        ValueError, match=r"ep_overlap_early_attn_memory_release=True on cfg\.model needs"
    ):
        CommOverlapConfig(tp_comm_overlap=False).setup(
            cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=8
        )


def test_p2p_warmup_flush_needs_p2p_overlap():
    cfgs = make_configs(pp=4)
    cfgs.model.overlap_p2p_comm_warmup_flush = True
    with pytest.raises(
        ValueError,
        match=r"overlap_p2p_comm_warmup_flush=True on cfg\.model needs overlap_p2p_comm=True",
    ):
        CommOverlapConfig(tp_comm_overlap=False).setup(
            cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=2
        )
    ok = make_configs(pp=4, vpp=2)
    ok.model.overlap_p2p_comm_warmup_flush = True
    plan = CommOverlapConfig(tp_comm_overlap=False).setup(
        ok.model, ok.optimizer, ok.ddp, data_parallel_size=2
    )
    assert plan.value("overlap_p2p_comm") is True


def test_num_buckets_on_ddp_replaces_the_derived_bucket_size():
    cfgs = make_configs()
    cfgs.ddp.num_buckets = 4
    plan = CommOverlapConfig(tp_comm_overlap=False).setup(
        cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=8
    )
    assert plan.value("bucket_size") is None and cfgs.ddp.bucket_size is None
    with pytest.raises(ValueError, match=r"cfg\.ddp\.num_buckets=4 are both set"):
        CommOverlapConfig(tp_comm_overlap=False, bucket_size=1024).setup(
            cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=8
        )


# --------------------------------------------------------------------- MTP pitfall


def _tp_configs(**model_kwargs):
    return make_configs(tp=2, sequence_parallel=True, **model_kwargs)


def test_tp_overlap_with_mtp_layers_warns_before_launch(te_available):
    cfgs = _tp_configs(mtp_num_layers=1)
    plan = CommOverlapConfig(tp_comm_overlap=True).setup(
        cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=4
    )
    assert plan.value("tp_comm_overlap") is True
    assert any("mtp_num_layers=1" in w and "mtp_num_layers=None" in w for w in plan.warnings)
    with pytest.raises(OverlapRefusedError, match=r"mtp_num_layers=1.*#4227"):
        CommOverlapConfig(tp_comm_overlap=True, strict=True).setup(
            cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=4
        )


def test_no_mtp_warning_without_mtp_or_without_tp_overlap(te_available):
    plain = _tp_configs()
    plan = CommOverlapConfig(tp_comm_overlap=True).setup(
        plain.model, plain.optimizer, plain.ddp, data_parallel_size=4
    )
    mtp = _tp_configs(mtp_num_layers=1)
    off = CommOverlapConfig(tp_comm_overlap=False).setup(
        mtp.model, mtp.optimizer, mtp.ddp, data_parallel_size=4
    )
    assert not any("mtp" in w for w in plan.warnings + off.warnings)


@pytest.fixture
def stub_te(monkeypatch):
    """Transformer Engine as the CPU machine cannot have it: importable, initialize_ub a no-op."""
    stub_transformer_engine(monkeypatch, lambda *args, **kwargs: None)
    reset_tp_communicators()
    with (
        mock.patch("megatron.bridge.training.comm_overlap.HAVE_TE", True),
        mock.patch("torch.cuda.is_available", return_value=False),
    ):
        yield
    reset_tp_communicators()


def _tp_overlap_cfg(*, strict: bool, mtp: int | None = None) -> ConfigContainer:
    return ConfigContainer(
        model=GPTModelProvider(
            **TINY_MODEL_FIELDS,
            tensor_model_parallel_size=2,
            sequence_parallel=True,
            mtp_num_layers=mtp,
        ),
        train=TrainingConfig(micro_batch_size=2, global_batch_size=None),
        mixed_precision="bf16_mixed",
        comm_overlap=CommOverlapConfig(tp_comm_overlap=True, strict=strict),
    )


def _flipping_provide(self, pre_process=None, post_process=None, vp_stage=None):
    # What TE does when the MTP layers' userbuffers are not in the preset.
    self.tp_comm_overlap = False
    return torch.nn.Linear(1, 1)


def test_build_model_warns_when_the_build_flips_tp_overlap(stub_te, monkeypatch, caplog):
    monkeypatch.setattr(GPTModelProvider, "provide", _flipping_provide)
    cfg = _tp_overlap_cfg(strict=False, mtp=1)
    with caplog.at_level(logging.WARNING, logger="megatron.bridge.training.setup"):
        build_model(cfg, world_size=2)
    message = next(
        r.getMessage() for r in caplog.records if r.name == "megatron.bridge.training.setup"
    )
    assert (
        "cfg.model.tp_comm_overlap is False after the model build but the plan set True" in message
    )
    assert "#4227" in message


def test_build_model_strict_raises_when_the_build_flips_tp_overlap(stub_te, monkeypatch):
    monkeypatch.setattr(GPTModelProvider, "provide", _flipping_provide)
    with pytest.raises(
        OverlapRefusedError, match=r"cfg\.model\.tp_comm_overlap is False after the model build"
    ):
        build_model(_tp_overlap_cfg(strict=True), world_size=2)


def test_build_model_is_quiet_when_the_build_keeps_the_plan(stub_te, monkeypatch, caplog):
    monkeypatch.setattr(GPTModelProvider, "provide", lambda self, **kw: torch.nn.Linear(1, 1))
    cfg = _tp_overlap_cfg(strict=True)
    with caplog.at_level(logging.WARNING, logger="megatron.bridge.training.setup"):
        build_model(cfg, world_size=2)
    assert cfg.model.tp_comm_overlap is True
    assert not [r for r in caplog.records if r.name == "megatron.bridge.training.setup"]


def test_auto_tp_overlap_is_not_requested_with_mtp_layers(te_available):
    # 'auto' asks only for what the layout runs: the MTP layers' build turns TP overlap off.
    cfgs = _tp_configs(mtp_num_layers=1)
    plan = CommOverlapConfig(tp_comm_overlap="auto", strict=True).setup(
        cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=4
    )
    assert plan.value("tp_comm_overlap") is False
    assert "#4227" in plan.decision("tp_comm_overlap").reason
    assert not any("mtp" in w for w in plan.warnings)
    plain = _tp_configs()
    auto = CommOverlapConfig(tp_comm_overlap="auto").setup(
        plain.model, plain.optimizer, plain.ddp, data_parallel_size=4
    )
    assert auto.value("tp_comm_overlap") is True
