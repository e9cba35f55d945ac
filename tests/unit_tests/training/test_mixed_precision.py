"""Tests for megatron/bridge/training/mixed_precision.py against real megatron-core configs."""

from __future__ import annotations

import dataclasses
import logging
import typing

import pytest
import torch
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.mixed_precision import (
    MIXED_PRECISION_PRESETS,
    Fp8Recipe,
    MixedPrecisionConfig,
    get_mixed_precision_config,
)

REQUIRED_PRESETS = (
    "bf16_mixed",
    "fp16_mixed",
    "bf16_with_fp8_delayed_scaling_mixed",
    "bf16_with_fp8_current_scaling_mixed",
)


def _configs():
    model = GPTModelProvider(num_layers=4, hidden_size=256, num_attention_heads=8, vocab_size=1000)
    return model, OptimizerConfig(), DistributedDataParallelConfig()


def _preset(name: str, **fields) -> MixedPrecisionConfig:
    """Preset ``name`` with ``fields`` set on it afterwards, the way a recipe edits one."""
    mp = get_mixed_precision_config(name)
    for field, value in fields.items():
        setattr(mp, field, value)
    return mp


def _set_up(name: str, **fields):
    """``_preset(name, **fields)`` set up on fresh configs: (preset, model, optimizer, ddp)."""
    mp, (model, optimizer, ddp) = _preset(name, **fields), _configs()
    mp.setup(model, optimizer, ddp)
    return mp, model, optimizer, ddp


# --- presets ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "bf16", "fp16", "fp8", "recipe"),
    [
        ("bf16_mixed", True, False, None, None),
        ("fp16_mixed", False, True, None, None),
        ("bf16_with_fp8_delayed_scaling_mixed", True, False, "hybrid", "delayed"),
        ("bf16_with_fp8_current_scaling_mixed", True, False, "hybrid", "tensorwise"),
        ("fp16_with_fp8_delayed_scaling_mixed", False, True, "hybrid", "delayed"),
        ("bf16_with_mxfp8_mixed", True, False, "e4m3", "mxfp8"),
        ("bf16_with_fp8_subchannel_scaling_mixed", True, False, "hybrid", "blockwise"),
    ],
)
def test_preset_lands_in_megatron_configs(name, bf16, fp16, fp8, recipe):
    model, optimizer, ddp = _configs()
    get_mixed_precision_config(name).setup(model, optimizer, ddp)
    dtype = torch.bfloat16 if bf16 else torch.float16
    assert (model.bf16, model.fp16, model.params_dtype, model.pipeline_dtype) == (
        bf16,
        fp16,
        dtype,
        dtype,
    )
    assert (optimizer.bf16, optimizer.fp16, optimizer.params_dtype) == (bf16, fp16, dtype)
    assert model.fp8 == fp8
    assert optimizer.fp8_recipe == recipe
    if recipe is not None:
        assert model.fp8_recipe == recipe
    assert ddp.grad_reduce_in_fp32 is True
    # megatron-core's own validation accepts every preset.
    model.finalize()


def test_required_presets_exist_and_every_lookup_is_fresh():
    assert set(REQUIRED_PRESETS) <= set(MIXED_PRECISION_PRESETS)
    for name in MIXED_PRECISION_PRESETS:
        first, second = get_mixed_precision_config(name), get_mixed_precision_config(name)
        assert first == second and first is not second
    edited = get_mixed_precision_config("bf16_mixed")
    edited.grad_reduce_in_fp32 = False
    assert get_mixed_precision_config("bf16_mixed").grad_reduce_in_fp32 is True


def test_unknown_preset_lists_valid_names():
    with pytest.raises(
        ValueError, match=r"Unknown mixed precision preset 'bf16_mix'.*bf16_mixed.*fp16_mixed"
    ):
        get_mixed_precision_config("bf16_mix")


def test_fp8_presets_details():
    delayed = get_mixed_precision_config("bf16_with_fp8_delayed_scaling_mixed")
    assert (delayed.fp8_amax_history_len, delayed.fp8_amax_compute_algo) == (1024, "max")
    assert delayed.fp8_param_gather is True and delayed.first_last_layers_bf16 is False
    current = get_mixed_precision_config("bf16_with_fp8_current_scaling_mixed")
    assert current.first_last_layers_bf16 is True and current.fp8_param_gather is True
    # One layer at each end, as Megatron-Bridge's preset sets them.
    assert (current.num_layers_at_start_in_bf16, current.num_layers_at_end_in_bf16) == (1, 1)


def test_bf16_layer_counts_default_to_megatron_bridges_zero_over_megatron_cores_one():
    # Megatron-Bridge's MixedPrecisionConfig defaults both counts to 0 and writes them onto the
    # model config, whose megatron-core default is 1: upstream code that sets only the end count
    # (its nemotron_3_super_bf16_with_nvfp4_mixed: first_last_layers_bf16, 14 at the end) keeps
    # no layer at the start.
    assert TransformerConfig.__dataclass_fields__["num_layers_at_start_in_bf16"].default == 1
    mixed = get_mixed_precision_config("bf16_with_nvfp4_mixed")
    mixed.first_last_layers_bf16 = True
    mixed.num_layers_at_end_in_bf16 = 14
    model = GPTModelProvider(num_layers=88, hidden_size=64, num_attention_heads=4)
    mixed.setup(model)
    assert model.first_last_layers_bf16 is True
    assert (model.num_layers_at_start_in_bf16, model.num_layers_at_end_in_bf16) == (0, 14)


def test_recipe_values_follow_megatron_core():
    # megatron-core's TransformerConfig.fp8_recipe is Optional[Literal[...]]; we accept all of
    # its values but "custom" (which needs a quantizer factory this config does not carry).
    hint = typing.get_type_hints(TransformerConfig)["fp8_recipe"]
    (literal,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
    assert set(typing.get_args(Fp8Recipe)) == set(typing.get_args(literal)) - {"custom"}


# --- setup writes every knob ------------------------------------------------------------------


def test_enablement_precision_knobs_land_in_ddp_and_model():
    mp, model, optimizer, ddp = _set_up(
        "bf16_with_fp8_delayed_scaling_mixed", grad_reduce_in_fp32=False, fp8_param_gather=False
    )
    assert ddp.grad_reduce_in_fp32 is False
    assert ddp.fp8_param_gather is False and model.fp8_param is False
    mp.fp8_param_gather = True
    mp.setup(model, optimizer, ddp)
    assert ddp.fp8_param_gather is True and model.fp8_param is True
    assert (model.fp8_amax_history_len, model.fp8_amax_compute_algo, model.fp8_margin) == (
        1024,
        "max",
        0,
    )


def test_precision_knob_set_on_ddp_and_replaced_is_said(caplog):
    model, optimizer, ddp = _configs()
    ddp.grad_reduce_in_fp32 = True  # set on cfg.ddp directly, where it does not belong
    mp = _preset("bf16_mixed", grad_reduce_in_fp32=False)
    with caplog.at_level(logging.WARNING, logger="megatron.bridge.training.mixed_precision"):
        mp.setup(model, optimizer, ddp)
    assert ddp.grad_reduce_in_fp32 is False
    assert "cfg.ddp.grad_reduce_in_fp32=True is replaced" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="megatron.bridge.training.mixed_precision"):
        mp.setup(model, optimizer, ddp)  # our own earlier write is not the user's intent
    assert "replaced" not in caplog.text


def test_fp16_loss_scaling_reaches_optimizer():
    model, optimizer, ddp = _configs()
    mp = MixedPrecisionConfig(
        fp16=True,
        loss_scale=1024.0,
        initial_loss_scale=2.0**16,
        min_loss_scale=2.0,
        loss_scale_window=500,
        hysteresis=4,
    )
    mp.setup(model, optimizer, ddp)
    assert (
        optimizer.loss_scale,
        optimizer.initial_loss_scale,
        optimizer.min_loss_scale,
        optimizer.loss_scale_window,
        optimizer.hysteresis,
    ) == (1024.0, 2.0**16, 2.0, 500, 4)


def test_explicit_dtypes_and_autocast():
    model, optimizer, ddp = _configs()
    MixedPrecisionConfig(
        bf16=True, pipeline_dtype=torch.float32, autocast_enabled=True, autocast_dtype=torch.float16
    ).setup(model, optimizer, ddp)
    assert model.params_dtype == torch.bfloat16
    assert model.pipeline_dtype == torch.float32
    assert (model.enable_autocast, model.autocast_dtype) == (True, torch.float16)


def test_fp32_default_writes_fp32():
    model, optimizer, ddp = _configs()
    MixedPrecisionConfig().setup(model, optimizer, ddp)
    assert (model.bf16, model.fp16, model.params_dtype, model.fp8) == (
        False,
        False,
        torch.float32,
        None,
    )
    assert optimizer.fp8_recipe is None


def test_setup_twice_same_and_user_object_unchanged():
    model, optimizer, ddp = _configs()
    mp = get_mixed_precision_config("bf16_with_fp8_current_scaling_mixed")
    written = dataclasses.asdict(mp)
    mp.setup(model, optimizer, ddp)
    once = (dataclasses.asdict(optimizer), dataclasses.asdict(ddp), model.fp8, model.params_dtype)
    mp.setup(model, optimizer, ddp)
    assert (
        dataclasses.asdict(optimizer),
        dataclasses.asdict(ddp),
        model.fp8,
        model.params_dtype,
    ) == once
    assert dataclasses.asdict(mp) == written


def test_optional_configs_may_be_none():
    model, _, _ = _configs()
    get_mixed_precision_config("bf16_mixed").setup(model)
    assert model.bf16 is True


def test_loss_scale_without_fp16_warns(caplog):
    model, optimizer, ddp = _configs()
    with caplog.at_level(logging.WARNING, logger="megatron.bridge.training.mixed_precision"):
        MixedPrecisionConfig(bf16=True, loss_scale=128.0).setup(model, optimizer, ddp)
    assert "loss_scale=128.0 has no effect without fp16=True" in caplog.text


# --- contradictions and bad values ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"bf16": True, "fp16": True}, ValueError, "both bf16=True and fp16=True: choose one"),
        ({"bf16": True, "fp8_param_gather": True}, ValueError, "fp8_param_gather=True needs FP8"),
        (
            {"fp8_dot_product_attention": True},
            ValueError,
            "fp8_dot_product_attention=True needs FP8",
        ),
        ({"fp8": "e5m2"}, ValueError, r"fp8 must be one of \['e4m3', 'hybrid', None\]"),
        (
            {"fp8": "hybrid", "fp8_recipe": "current"},
            ValueError,
            r"fp8_recipe must be one of \['delayed', 'tensorwise', 'mxfp8', 'blockwise'\]",
        ),
        ({"fp8_amax_compute_algo": "mean"}, ValueError, "fp8_amax_compute_algo must be one of"),
        (
            {"bf16": True, "params_dtype": torch.float16},
            ValueError,
            "params_dtype=torch.float16 contradicts bf16=True",
        ),
        ({"params_dtype": torch.int8}, ValueError, "params_dtype must be one of"),
        ({"bf16": "yes"}, TypeError, "bf16 must be True or False"),
        ({"fp8_amax_history_len": 0}, ValueError, "fp8_amax_history_len must be >= 1"),
        ({"fp8_margin": 1.5}, TypeError, "fp8_margin must be an int"),
        ({"loss_scale": -1.0}, ValueError, "loss_scale must be a positive number"),
        (
            {
                "bf16": True,
                "fp8": "hybrid",
                "fp8_recipe": "delayed",
                "first_last_layers_bf16": True,
            },
            ValueError,
            "first_last_layers_bf16=True does not work with fp8_recipe='delayed'",
        ),
        (
            {
                "bf16": True,
                "fp8": "e4m3",
                "fp8_recipe": "tensorwise",
                "reuse_grad_buf_for_mxfp8_param_ag": True,
            },
            ValueError,
            "reuse_grad_buf_for_mxfp8_param_ag=True needs",
        ),
    ],
)
def test_contradictions_and_bad_values_raise(kwargs, error, match):
    mp = MixedPrecisionConfig(**kwargs)
    model, optimizer, ddp = _configs()
    with pytest.raises(error, match=match):
        mp.setup(model, optimizer, ddp)
    # Nothing was written before the error.
    assert (model.bf16, model.fp8, ddp.fp8_param_gather) == (False, None, False)


def test_mxfp8_param_gather_with_buffer_reuse():
    _, _, optimizer, ddp = _set_up(
        "bf16_with_mxfp8_mixed", fp8_param_gather=True, reuse_grad_buf_for_mxfp8_param_ag=True
    )
    assert ddp.reuse_grad_buf_for_mxfp8_param_ag is True
    assert optimizer.reuse_grad_buf_for_mxfp8_param_ag is True
    assert optimizer.fp8_recipe == "mxfp8"
