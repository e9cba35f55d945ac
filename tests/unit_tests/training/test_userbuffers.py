"""The published userbuffer presets against NVIDIA's reference values.

tests/unit_tests/training/data/userbuffers_presets.yaml is a verbatim copy of the published
preset values (a copy of the published preset table, data/userbuffers_presets.yaml); every published name must be
importable from comm_overlap and produce exactly that TE dict.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from megatron.bridge.training import comm_overlap
from megatron.bridge.training.userbuffers import (
    PUBLISHED_PRESETS,
    BulkOverlapCfg,
    PipelineOverlapCfg,
    RingExchangeOverlapCfg,
    find_userbuffers_preset,
    preset_shapes_of,
)

REFERENCE = yaml.safe_load(
    (Path(__file__).parent / "data" / "userbuffers_presets.yaml").read_text()
)


def test_every_reference_preset_is_published_and_nothing_else():
    assert set(PUBLISHED_PRESETS) == set(REFERENCE)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_preset_values_and_types_match_the_reference(name):
    preset = getattr(comm_overlap, name)  # importable by its published name
    got = preset.to_ub_cfgs()
    want = {gemm: knobs for gemm, knobs in REFERENCE[name].items() if knobs is not None}
    assert got == want
    for gemm, knobs in want.items():
        for knob, value in knobs.items():
            assert type(got[gemm][knob]) is type(value), (gemm, knob)


def test_identical_presets_are_one_object_and_different_ones_are_not():
    names = sorted(REFERENCE)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            same_values = PUBLISHED_PRESETS[a].to_ub_cfgs() == PUBLISHED_PRESETS[b].to_ub_cfgs()
            assert (PUBLISHED_PRESETS[a] is PUBLISHED_PRESETS[b]) == same_values, (a, b)


def test_defaults_are_real_bools_not_tuples():
    for cfg in (RingExchangeOverlapCfg(), PipelineOverlapCfg()):
        assert cfg.atomic_gemm is False and cfg.fp8_buf is False
    assert RingExchangeOverlapCfg().aggregate is False


@pytest.mark.parametrize(
    ("cls", "kwargs", "error"),
    [
        (BulkOverlapCfg, {"num_sm": 0}, ValueError),
        (BulkOverlapCfg, {"num_sm": True}, TypeError),
        (RingExchangeOverlapCfg, {"fp8_buf": (False,)}, TypeError),
        (PipelineOverlapCfg, {"num_splits": "4"}, TypeError),
    ],
)
def test_bad_gemm_knobs_are_rejected(cls, kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        cls(**kwargs)


def test_lookup_finds_presets_and_maps_gpu_families():
    name, preset = find_userbuffers_preset(
        precision="bf16", gpu="h200", hidden_size=12288, tp_size=4, seq_length=2048
    )
    assert name == "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"
    assert preset is comm_overlap.userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048
    name, _ = find_userbuffers_preset(
        precision="fp8", gpu="gb200", hidden_size=16384, tp_size=4, cp_size=2, seq_length=8192
    )
    assert name == "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192"
    name, _ = find_userbuffers_preset(
        precision="fp8", gpu="h100", hidden_size=8192, tp_size=2, seq_length=4096, lora=True
    )
    assert name.endswith("_lora")


def test_lookup_miss_lists_the_published_presets():
    with pytest.raises(ValueError, match="userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048") as err:
        find_userbuffers_preset(
            precision="bf16", gpu="h100", hidden_size=4096, tp_size=2, seq_length=4096
        )
    assert "No published userbuffers preset" in str(err.value)
    with pytest.raises(ValueError, match="gpu must be one of"):
        find_userbuffers_preset(
            precision="bf16", gpu="a100", hidden_size=12288, tp_size=4, seq_length=2048
        )
    with pytest.raises(ValueError, match="precision must be one of"):
        find_userbuffers_preset(
            precision="fp16", gpu="h100", hidden_size=12288, tp_size=4, seq_length=2048
        )


def test_preset_shapes_come_from_the_published_names():
    (shape,) = preset_shapes_of(comm_overlap.userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192)
    assert (shape.hidden_size, shape.tp_size, shape.cp_size, shape.seq_length, shape.gpu) == (
        16384,
        8,
        2,
        8192,
        "h100",
    )
