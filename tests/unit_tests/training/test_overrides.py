"""apply_overrides and `bridge-overlap explain --recipe NAME key=value ...`."""

from __future__ import annotations

import pytest
import torch

from megatron.bridge.cli import main
from megatron.bridge.recipes import get_recipe
from megatron.bridge.training.comm_overlap import PUBLISHED_PRESETS
from megatron.bridge.training.overrides import OverrideError, apply_overrides


@pytest.fixture
def cfg():
    return get_recipe("gpt3_175b")


def test_values_are_typed_and_written(cfg):
    model = cfg.model
    out = apply_overrides(
        cfg,
        [
            "model.tensor_model_parallel_size=8",
            "comm_overlap.tp_comm_overlap=false",
            "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=8",
            "optimizer.lr=1e-5",
            "model.params_dtype=bfloat16",
            "train.global_batch_size=null",
            "comm_overlap.tp_comm_bootstrap_backend=gloo",
            "gpu=b200",
        ],
    )
    assert out is cfg and cfg.model is model  # in place, the user's objects kept
    assert model.tensor_model_parallel_size == 8
    assert cfg.comm_overlap.tp_comm_overlap is False
    assert cfg.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert cfg.optimizer.lr == 1e-5 and isinstance(cfg.optimizer.lr, float)
    assert model.params_dtype is torch.bfloat16
    assert cfg.train.global_batch_size is None
    assert cfg.comm_overlap.tp_comm_bootstrap_backend == "gloo"
    assert cfg.gpu == "b200"


def test_a_preset_name_becomes_the_published_preset(cfg):
    name = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    apply_overrides(cfg, [f"comm_overlap.tp_comm_overlap_cfg={name}"])
    assert cfg.comm_overlap.tp_comm_overlap_cfg is PUBLISHED_PRESETS[name]
    apply_overrides(cfg, ["comm_overlap.tp_comm_overlap_cfg=null"])
    assert cfg.comm_overlap.tp_comm_overlap_cfg is None


def test_mixed_precision_preset_then_its_field(cfg):
    apply_overrides(
        cfg,
        ["mixed_precision=bf16_with_fp8_delayed_scaling_mixed", "mixed_precision.fp8_wgrad=false"],
    )
    assert cfg.mixed_precision.fp8 is not None
    assert cfg.mixed_precision.fp8_wgrad is False


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("model.tensor_model_parralel_size=8", "Did you mean 'tensor_model_parallel_size'"),
        ("modle.num_layers=2", "Unknown override section 'modle'.*Did you mean 'model'"),
        (
            "comm_overlap.tp_comm_overlap=maybe",
            r"comm_overlap.tp_comm_overlap='maybe': expected bool",
        ),
        ("model.num_layers=2.5", r"model.num_layers='2.5': expected int"),
        ("model.num_layers=null", "expected int, not null"),
        (
            "comm_overlap.tp_comm_bootstrap_backend=tcp",
            r"expected one of \['nccl', 'mpi', 'gloo'\]",
        ),
        ("comm_overlap.tp_comm_overlap_cfg=userbuffers_bf16_h100_h12288_tp4", "Did you mean"),
        ("model.params_dtype=float99", "expected dtype"),
        ("env_vars.HF_TOKEN=abc", "looks like a secret"),
        ("num_layers=2", "Unknown override key 'num_layers'"),
        ("model.num_layers", "not key=value"),
        ("gpu=h1000", "gpu='h1000'"),
    ],
)
def test_bad_overrides_name_the_key(cfg, override, match):
    before = cfg.model.seq_length, cfg.comm_overlap.tp_comm_overlap, dict(cfg.env_vars)
    with pytest.raises(OverrideError, match=match):
        apply_overrides(cfg, ["model.seq_length=1024", override])
    # all or nothing: the valid first override was not written either
    assert (cfg.model.seq_length, cfg.comm_overlap.tp_comm_overlap, dict(cfg.env_vars)) == before


def test_cli_overrides_reach_the_plan(capsys):
    code = main(
        [
            "explain",
            "--recipe",
            "gpt3_175b",
            "--json",
            "model.tensor_model_parallel_size=8",
            "comm_overlap.tp_comm_overlap=false",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    import json

    doc = json.loads(out)
    assert doc["layout"]["tp"] == 8
    values = {d["knob"]: d["value"] for d in doc["overlap"]["decisions"]}
    assert values["tp_comm_overlap"] is False


def test_cli_bad_override_exits_2(capsys):
    code = main(["explain", "--recipe", "gpt3_175b", "model.num_layer=2"])
    assert code == 2
    assert "Did you mean 'num_layers'" in capsys.readouterr().err


def test_cli_env_override_with_a_tuned_value_is_accepted(capsys):
    # H100 TP4 with TP overlap plans 1, but 8 breaks nothing there (TE orders the userbuffers
    # comm kernel with a launch-completion event when CUDA_DEVICE_MAX_CONNECTIONS > 1): no
    # warning, and --strict passes. The value is the user's: shown as written, with a note.
    args = ["explain", "--recipe", "gpt3_175b", "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "CUDA_DEVICE_MAX_CONNECTIONS=8  # user: set in cfg.env_vars" in out
    assert "NOTE: the plan would set 1 (Hopper" in out
    assert not [
        line
        for line in out.splitlines()
        if line.startswith("WARNING") and "CUDA_DEVICE_MAX_CONNECTIONS" in line
    ]
    assert main([*args, "--strict"]) == 0


def test_cli_overrides_need_a_recipe(capsys):
    assert main(["explain", "model.num_layers=2"]) == 2
    assert "give --recipe NAME" in capsys.readouterr().err
