"""Tests for megatron/bridge/training/initialize.py (TE userbuffer initialization).

Transformer Engine needs CUDA to build and to import, so it can never exist on these CPU-only
machines. Each test installs a recording stand-in for ``transformer_engine.pytorch.module.base``
in ``sys.modules`` whose ``initialize_ub`` has the signature of a real TE release (2.x with
``quantization_modes``, or an older one with ``use_fp8``) and records what it was called with.
"""

from __future__ import annotations

import enum
import sys
import types

import pytest
import torch

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.comm_overlap import (
    userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
)
from megatron.bridge.training.initialize import (
    initialize_tp_communicators,
    reset_tp_communicators,
    tp_communicators_settings,
)


class UserBufferQuantizationMode(enum.Enum):
    """Same members as TE 2.x's enum of that name."""

    NONE = "none"
    FP8 = "fp8"


def _install_fake_te(monkeypatch, initialize_ub) -> types.ModuleType:
    base = types.ModuleType("transformer_engine.pytorch.module.base")
    base.initialize_ub = initialize_ub
    base.UserBufferQuantizationMode = UserBufferQuantizationMode
    base.destroyed = 0

    def destroy_ub():
        base.destroyed += 1

    base.destroy_ub = destroy_ub
    names = [
        "transformer_engine",
        "transformer_engine.pytorch",
        "transformer_engine.pytorch.module",
    ]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, base.__name__, base)
    return base


@pytest.fixture
def calls():
    return []


@pytest.fixture
def te_new(monkeypatch, calls):
    """A TE >= 2.7 initialize_ub (keyword names as in TE 2.20)."""

    def initialize_ub(
        shape,
        tp_size,
        use_fp8=False,
        quantization_modes=None,
        dtype=torch.bfloat16,
        ub_cfgs=None,
        bootstrap_backend=None,
        with_cublasmp=False,
    ):
        calls.append(
            {
                "shape": shape,
                "tp_size": tp_size,
                "use_fp8": use_fp8,
                "quantization_modes": quantization_modes,
                "dtype": dtype,
                "ub_cfgs": ub_cfgs,
                "bootstrap_backend": bootstrap_backend,
            }
        )

    return _install_fake_te(monkeypatch, initialize_ub)


@pytest.fixture
def te_old(monkeypatch, calls):
    """A TE 1.x initialize_ub: use_fp8, no quantization_modes."""

    def initialize_ub(
        shape, tp_size, use_fp8=False, dtype=torch.bfloat16, ub_cfgs=None, bootstrap_backend=None
    ):
        calls.append(
            {
                "shape": shape,
                "tp_size": tp_size,
                "use_fp8": use_fp8,
                "dtype": dtype,
                "ub_cfgs": ub_cfgs,
                "bootstrap_backend": bootstrap_backend,
            }
        )

    return _install_fake_te(monkeypatch, initialize_ub)


@pytest.fixture(autouse=True)
def _fresh_guard():
    reset_tp_communicators()
    yield
    reset_tp_communicators()


def _model(**overrides) -> GPTModelProvider:
    model = GPTModelProvider(
        num_layers=4, hidden_size=12288, num_attention_heads=96, seq_length=2048
    )
    model.tensor_model_parallel_size = 4
    model.sequence_parallel = True
    model.tp_comm_overlap = True
    model.bf16 = True
    for name, value in overrides.items():
        setattr(model, name, value)
    return model


def test_new_te_gets_shape_tp_preset_backend_and_mode(te_new, calls):
    model = _model(
        tp_comm_overlap_cfg=userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
        context_parallel_size=2,
    )
    assert initialize_tp_communicators(model, micro_batch_size=2) is True
    (call,) = calls
    assert call["shape"] == [(2048 * 2) // 2, 12288]
    assert call["tp_size"] == 4
    assert call["ub_cfgs"] == userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048.to_ub_cfgs()
    assert call["bootstrap_backend"] == "nccl"
    assert call["quantization_modes"] == [UserBufferQuantizationMode.NONE]
    assert call["dtype"] == torch.bfloat16
    assert tp_communicators_settings().shape == (2048, 12288)


def test_fp8_mode_and_bf16_edge_layers(te_new, calls):
    initialize_tp_communicators(_model(fp8="hybrid"), micro_batch_size=1)
    assert calls[-1]["quantization_modes"] == [UserBufferQuantizationMode.FP8]
    reset_tp_communicators()
    assert te_new.destroyed == 1
    initialize_tp_communicators(
        _model(fp8="hybrid", first_last_layers_bf16=True), micro_batch_size=1
    )
    assert calls[-1]["quantization_modes"] == [
        UserBufferQuantizationMode.FP8,
        UserBufferQuantizationMode.NONE,
    ]


def test_old_te_gets_use_fp8(te_old, calls):
    initialize_tp_communicators(
        _model(fp8="e4m3", tp_comm_bootstrap_backend="mpi"), micro_batch_size=1
    )
    (call,) = calls
    assert call["use_fp8"] is True
    assert "quantization_modes" not in call
    assert call["bootstrap_backend"] == "mpi"


def test_dict_preset_loses_none_values_and_fp16_buffer_dtype(te_new, calls):
    preset = {
        "qkv_fprop": {"method": "ring_exchange", "num_sm": None, "aggregate": False},
        "fc2_fprop": None,
    }
    initialize_tp_communicators(
        _model(tp_comm_overlap_cfg=preset, bf16=False, fp16=True), micro_batch_size=1
    )
    # The dict becomes a RingExchangeOverlapCfg: the null num_sm takes the type's default (TE's
    # ring-exchange default) and the knobs left out are written explicitly.
    assert calls[0]["ub_cfgs"] == {
        "qkv_fprop": {
            "method": "ring_exchange",
            "num_sm": 1,
            "cga_size": 1,
            "set_sm_margin": False,
            "aggregate": False,
            "atomic_gemm": False,
            "fp8_buf": False,
        }
    }
    assert calls[0]["dtype"] == torch.float16


def test_no_preset_means_te_defaults(te_new, calls):
    initialize_tp_communicators(_model(), micro_batch_size=1)
    assert calls[0]["ub_cfgs"] is None


def test_yaml_path_preset(te_new, calls, tmp_path):
    path = tmp_path / "ub.yaml"
    path.write_text(
        "qkv_dgrad: {method: bulk, num_sm: 4, cga_size: 2, set_sm_margin: false}\n"
        "proj_fprop: {method: pipeline, num_sm: 24, num_splits: null}\n"
        "fc1_fprop: null\n",
        encoding="utf-8",
    )
    initialize_tp_communicators(_model(tp_comm_overlap_cfg=str(path)), micro_batch_size=1)
    assert calls[0]["ub_cfgs"] == {
        "qkv_dgrad": {"method": "bulk", "num_sm": 4, "cga_size": 2, "set_sm_margin": False},
        # Pipeline knobs that default to None (TE's default) stay out; the bool ones are explicit.
        "proj_fprop": {"method": "pipeline", "num_sm": 24, "atomic_gemm": False, "fp8_buf": False},
    }


def test_called_once_per_process(te_new, calls):
    model = _model()
    assert initialize_tp_communicators(model, micro_batch_size=1) is True
    assert initialize_tp_communicators(model, micro_batch_size=1) is False
    assert len(calls) == 1
    with pytest.raises(RuntimeError, match=r"already initialized.*reset_tp_communicators\(\)"):
        initialize_tp_communicators(model, micro_batch_size=2)
    reset_tp_communicators()
    assert initialize_tp_communicators(model, micro_batch_size=2) is True
    assert len(calls) == 2


def test_overlap_off_does_nothing(te_new, calls):
    assert initialize_tp_communicators(_model(tp_comm_overlap=False), micro_batch_size=1) is False
    assert calls == [] and tp_communicators_settings() is None


def test_without_te_says_how_to_fix(monkeypatch):
    # A None entry in sys.modules makes the import fail, whatever this machine has installed.
    monkeypatch.setitem(sys.modules, "transformer_engine", None)
    with pytest.raises(RuntimeError, match=r"Install the 'te' extra.*tp_comm_overlap=False"):
        initialize_tp_communicators(_model(), micro_batch_size=1)
    assert tp_communicators_settings() is None


@pytest.mark.parametrize(
    ("overrides", "mbs", "error", "match"),
    [
        ({"seq_length": 2050}, 1, ValueError, "2050 divisible by tensor_model_parallel_size=4"),
        (
            {"seq_length": 2047, "context_parallel_size": 2},
            1,
            ValueError,
            "not divisible by context_parallel_size=2",
        ),
        ({}, 0, ValueError, "micro_batch_size must be >= 1, got 0"),
        ({"tp_comm_overlap_cfg": 42}, 1, TypeError, "tp_comm_overlap_cfg must be"),
        (
            {"tp_comm_overlap_cfg": {"qkv_fprpo": {"method": "ring_exchange"}}},
            1,
            ValueError,
            r"tp_comm_overlap_cfg \(mapping\): unknown GEMM name 'qkv_fprpo'",
        ),
    ],
)
def test_bad_inputs_raise_before_te(te_new, calls, overrides, mbs, error, match):
    with pytest.raises(error, match=match):
        initialize_tp_communicators(_model(**overrides), micro_batch_size=mbs)
    assert calls == []


def test_missing_yaml_file(te_new, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        initialize_tp_communicators(
            _model(tp_comm_overlap_cfg=str(tmp_path / "nope.yaml")), micro_batch_size=1
        )
