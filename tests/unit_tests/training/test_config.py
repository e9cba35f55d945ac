"""Tests for training/config.py and training/resolve.py: ConfigContainer, runtime_config_update.

Everything runs on real megatron-core config objects. Only Transformer Engine's availability is
patched (``comm_overlap.HAVE_TE``, directly or through conftest's ``te_available`` fixture): TE
needs CUDA to build and import, so it cannot exist on a CPU machine.
"""

from __future__ import annotations

import dataclasses
import logging
from unittest import mock

import pytest
import torch
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.comm_overlap import (
    DEFAULT_BUCKET_SIZE,
    CommOverlapConfig,
    userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
)
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.training.mixed_precision import (
    MixedPrecisionConfig,
    get_mixed_precision_config,
)
from megatron.bridge.training.resolve import resolve_world_size, runtime_config_update
from tests.unit_tests.conftest import snapshot


def _recipe() -> ConfigContainer:
    """What a recipe function returns: a 175B-class GPT in bf16."""
    return ConfigContainer(
        model=GPTModelProvider(
            num_layers=96,
            hidden_size=12288,
            num_attention_heads=96,
            seq_length=2048,
            vocab_size=51200,
        ),
        train=TrainingConfig(micro_batch_size=1, global_batch_size=256),
        mixed_precision="bf16_mixed",
    )


def _enablement() -> ConfigContainer:
    """The usual enablement code, unchanged, applied to a recipe."""
    cfg = _recipe()

    cfg.model.tensor_model_parallel_size = 4
    cfg.model.sequence_parallel = True
    cfg.model.pipeline_model_parallel_size = 4
    cfg.model.virtual_pipeline_model_parallel_size = 2

    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)

    cfg.ddp.use_distributed_optimizer = True
    cfg.ddp.overlap_grad_reduce = True
    cfg.ddp.overlap_param_gather = True

    cfg.comm_overlap.tp_comm_overlap_cfg = userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048

    cfg.mixed_precision.grad_reduce_in_fp32 = False
    cfg.mixed_precision.fp8_param_gather = False
    return cfg


# --- the usual enablement, end to end -------------------------------------------------------------------------


def test_enablement_end_to_end():
    cfg = _enablement()
    # Transformer Engine needs CUDA to build and import, so it cannot exist on a CPU machine:
    # pretend it imports, as it does on the GPU cluster the recipe targets.
    with mock.patch("megatron.bridge.training.comm_overlap.HAVE_TE", True):
        plan = runtime_config_update(cfg, world_size=128)

    assert cfg.data_parallel_size == 8
    assert cfg.overlap_plan is plan and plan.warnings == ()
    m, ddp, opt = cfg.model, cfg.ddp, cfg.optimizer
    # TP overlap survived (TP4, SP, TE) and carries the preset as TE's plain dict.
    assert m.tp_comm_overlap is True
    assert m.tp_comm_overlap_cfg == userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048.to_ub_cfgs()
    assert m.tp_comm_bootstrap_backend == "nccl"
    # Interleaved pipeline.
    assert (m.overlap_p2p_comm, m.batch_p2p_comm) == (True, False)
    assert (m.defer_embedding_wgrad_compute, m.wgrad_deferral_limit) == (False, -1)
    assert (m.overlap_moe_expert_parallel_comm, m.delay_wgrad_compute) == (False, False)
    # DP overlap with the distributed optimizer.
    assert (ddp.overlap_grad_reduce, ddp.overlap_param_gather, ddp.align_param_gather) == (
        True,
        True,
        True,
    )
    assert ddp.bucket_size == DEFAULT_BUCKET_SIZE == 128 * 1024 * 1024
    assert ddp.use_distributed_optimizer is True and opt.use_distributed_optimizer is True
    assert (opt.overlap_param_gather, opt.overlap_param_gather_with_optimizer_step) == (True, False)
    # Precision from mixed precision, including the enablement's two edits.
    assert (m.bf16, m.fp16, m.params_dtype, m.pipeline_dtype) == (
        True,
        False,
        torch.bfloat16,
        torch.bfloat16,
    )
    assert (opt.bf16, opt.params_dtype) == (True, torch.bfloat16)
    assert (ddp.grad_reduce_in_fp32, ddp.fp8_param_gather, m.fp8_param, m.fp8) == (
        False,
        False,
        False,
        None,
    )
    # megatron-core's validation ran (derived fields are there).
    assert m.ffn_hidden_size == 4 * 12288


def test_enablement_leaves_user_objects_as_written(te_available):
    cfg = _enablement()
    overlap_written = dataclasses.asdict(cfg.comm_overlap)
    precision_written = dataclasses.asdict(cfg.mixed_precision)
    runtime_config_update(cfg, world_size=128)
    assert dataclasses.asdict(cfg.comm_overlap) == overlap_written
    assert dataclasses.asdict(cfg.mixed_precision) == precision_written
    assert cfg.comm_overlap.bucket_size is None and cfg.comm_overlap.overlap_p2p_comm is None


def test_running_twice_gives_the_same_result(te_available):
    cfg = _enablement()
    first_plan = runtime_config_update(cfg, world_size=128)
    first = (snapshot(cfg.model), snapshot(cfg.optimizer), snapshot(cfg.ddp))
    second_plan = runtime_config_update(cfg, world_size=128)
    assert (snapshot(cfg.model), snapshot(cfg.optimizer), snapshot(cfg.ddp)) == first
    assert second_plan.to_dict() == first_plan.to_dict()


def test_tp_overlap_refused_without_te_is_said_and_written():
    cfg = _enablement()
    with mock.patch("megatron.bridge.training.comm_overlap.HAVE_TE", False):
        plan = runtime_config_update(cfg, world_size=128)
    assert cfg.model.tp_comm_overlap is False
    assert plan.decision("tp_comm_overlap").source == "refused"
    assert any("Transformer Engine" in w for w in plan.warnings)


# --- data-parallel size -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("world", "tp", "pp", "cp", "dp"),
    [(128, 4, 4, 1, 8), (64, 2, 1, 2, 16), (8, 8, 1, 1, 1), (1, 1, 1, 1, 1)],
)
def test_data_parallel_size(world, tp, pp, cp, dp):
    cfg = _recipe()
    cfg.train.global_batch_size = None
    cfg.model.tensor_model_parallel_size = tp
    cfg.model.pipeline_model_parallel_size = pp
    cfg.model.context_parallel_size = cp
    runtime_config_update(cfg, world_size=world)
    assert cfg.data_parallel_size == dp


def test_world_size_not_divisible_names_the_sizes(te_available):
    cfg = _enablement()
    with pytest.raises(
        ValueError,
        match=r"World size 100 .*num_gpus=100 is not divisible by tp_size \* cp_size \* pp_size = 4 \* 1 \* 4 = 16",
    ):
        runtime_config_update(cfg, world_size=100)
    assert cfg.data_parallel_size is None


@pytest.mark.parametrize("bad", [0, -8, 2.0, True])
def test_world_size_must_be_positive_int(bad):
    with pytest.raises(ValueError, match=r"world_size argument must be (an int )?>= 1, got "):
        resolve_world_size(bad)


def test_world_size_from_environment(monkeypatch, te_available):
    monkeypatch.setenv("WORLD_SIZE", "256")
    cfg = _enablement()
    runtime_config_update(cfg)
    assert cfg.data_parallel_size == 16
    monkeypatch.setenv("WORLD_SIZE", "many")
    with pytest.raises(ValueError, match="WORLD_SIZE='many' is not an integer"):
        resolve_world_size()


def test_world_size_defaults_to_one_and_says_so(monkeypatch, caplog):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with caplog.at_level(logging.INFO, logger="megatron.bridge.training.resolve"):
        assert resolve_world_size() == 1
    assert "assuming a single process" in caplog.text


def test_global_batch_size_must_divide(te_available):
    cfg = _enablement()
    cfg.train.global_batch_size = 100
    with pytest.raises(
        ValueError,
        match=r"global_batch_size=100 is not divisible by micro_batch_size \(1\) x data-parallel size \(8\)",
    ):
        runtime_config_update(cfg, world_size=128)


# --- container sections ---------------------------------------------------------------------------


def test_container_defaults_are_real_megatron_configs():
    cfg = ConfigContainer(
        model=GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4)
    )
    assert isinstance(cfg.optimizer, OptimizerConfig) and cfg.optimizer.optimizer == "adam"
    assert cfg.optimizer.lr == 3e-4
    assert isinstance(cfg.ddp, DistributedDataParallelConfig)
    assert cfg.train.micro_batch_size == 1
    assert (cfg.mixed_precision, cfg.comm_overlap) == (None, None)
    assert runtime_config_update(cfg, world_size=1) is None
    assert cfg.data_parallel_size == 1 and cfg.overlap_plan is None
    # No comm_overlap: megatron-core's own defaults stay.
    assert (cfg.model.tp_comm_overlap, cfg.model.batch_p2p_comm) == (False, True)


def test_preset_name_becomes_a_fresh_object():
    first, second = _recipe(), _recipe()
    assert isinstance(first.mixed_precision, MixedPrecisionConfig)
    assert first.mixed_precision == get_mixed_precision_config("bf16_mixed")
    assert first.mixed_precision is not second.mixed_precision


def test_preset_name_assigned_later_is_resolved_without_rewriting_it():
    cfg = _recipe()
    cfg.mixed_precision = "fp16_mixed"
    runtime_config_update(cfg, world_size=8)
    assert cfg.mixed_precision == "fp16_mixed"
    assert cfg.resolved_mixed_precision == get_mixed_precision_config("fp16_mixed")
    assert (cfg.model.fp16, cfg.optimizer.fp16, cfg.model.params_dtype) == (
        True,
        True,
        torch.float16,
    )


def test_unknown_preset_name_lists_valid_ones():
    with pytest.raises(ValueError, match=r"valid names: .*bf16_mixed"):
        ConfigContainer(
            model=GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4),
            mixed_precision="bf17",
        )


def test_distributed_optimizer_flag_is_mirrored(te_available):
    cfg = _enablement()
    cfg.ddp.use_distributed_optimizer = False
    cfg.optimizer.use_distributed_optimizer = True
    runtime_config_update(cfg, world_size=128)
    assert cfg.ddp.use_distributed_optimizer is True


def test_precision_set_on_model_only_is_caught():
    cfg = _recipe()
    cfg.mixed_precision = None
    cfg.model.bf16 = True
    with pytest.raises(
        ValueError, match=r"cfg.model.bf16=True but cfg.optimizer.bf16=False.*cfg.mixed_precision"
    ):
        runtime_config_update(cfg, world_size=8)


def test_megatron_core_validation_runs(te_available):
    cfg = _enablement()
    # fp8_output_proj without fp8 is outside the job description: only megatron-core refuses it.
    cfg.model.fp8_output_proj = True
    with pytest.raises(ValueError, match=r"fp8_output_proj must be used together with fp8 mode"):
        runtime_config_update(cfg, world_size=128)


def test_a_model_rule_megatron_core_has_is_refused_before_megatron_core_runs(te_available):
    cfg = _enablement()
    # Full recompute without a method: the torch-free mirror of megatron-core's rule.
    cfg.model.recompute_granularity = "full"
    with pytest.raises(ValueError, match=r"recompute_granularity='full' needs recompute_method"):
        runtime_config_update(cfg, world_size=128)


def test_wrong_section_types_raise():
    cfg = _recipe()
    cfg.comm_overlap = {"tp_comm_overlap": True}
    with pytest.raises(TypeError, match=r"cfg\.comm_overlap must be a CommOverlapConfig or None"):
        runtime_config_update(cfg, world_size=8)
    cfg.comm_overlap = None
    cfg.mixed_precision = 16
    with pytest.raises(
        TypeError,
        match=r"cfg\.mixed_precision must be a MixedPrecisionConfig, a preset name or None",
    ):
        runtime_config_update(cfg, world_size=8)
