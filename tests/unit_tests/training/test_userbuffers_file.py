"""Tests for megatron/bridge/training/userbuffers_file.py (loading a ub_cfgs mapping or YAML file)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from megatron.bridge.training.userbuffers import (
    GEMM_NAMES,
    PUBLISHED_PRESETS,
    BulkOverlapCfg,
    PipelineOverlapCfg,
    RingExchangeOverlapCfg,
    TransformerLayerTPOverlapCfg,
)
from megatron.bridge.training.userbuffers_file import load_tp_overlap_cfg
from tests.unit_tests.conftest import modules_loaded_by

REFERENCE_FILE = Path(__file__).parent / "data" / "userbuffers_presets.yaml"

#: A file whose one GEMM has a knob of the wrong type.
WRONG_VALUE_TYPE = "fc2_fprop: {method: pipeline, num_sm: '16'}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ub.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(PUBLISHED_PRESETS))
def test_every_published_preset_round_trips_through_a_mapping(name):
    preset = PUBLISHED_PRESETS[name]
    assert load_tp_overlap_cfg(preset.to_ub_cfgs()) == preset


@pytest.mark.parametrize("name", sorted(PUBLISHED_PRESETS))
def test_every_published_preset_round_trips_through_a_yaml_file(name, tmp_path):
    preset = PUBLISHED_PRESETS[name]
    path = _write(tmp_path, yaml.safe_dump(preset.to_ub_cfgs()))
    assert load_tp_overlap_cfg(path) == preset
    assert load_tp_overlap_cfg(str(path)) == preset


@pytest.mark.parametrize("name", sorted(PUBLISHED_PRESETS))
def test_nvidia_reference_entries_load_as_the_published_presets(name):
    # The reference file writes a GEMM without overlap as `null`, as Megatron-LM users do.
    entry = yaml.safe_load(REFERENCE_FILE.read_text(encoding="utf-8"))[name]
    assert load_tp_overlap_cfg(entry) == PUBLISHED_PRESETS[name]


def test_yaml_file_gives_typed_configs_and_leaves_absent_gemms_none(tmp_path):
    path = _write(
        tmp_path,
        "qkv_dgrad: {method: bulk, num_sm: 4, cga_size: 2}\n"
        "proj_fprop: {method: pipeline, num_sm: 24, num_splits: null}\n"
        "fc1_fprop: null\n",
    )
    cfg = load_tp_overlap_cfg(path)
    assert cfg == TransformerLayerTPOverlapCfg(
        qkv_dgrad=BulkOverlapCfg(num_sm=4, cga_size=2),
        proj_fprop=PipelineOverlapCfg(num_sm=24),
    )
    assert cfg.fc1_fprop is None and cfg.qkv_fprop is None


# TE's initialize_ub gives an entry without `method` the default method of its GEMM name.
@pytest.mark.parametrize(
    ("gemm", "cfg_type"),
    [
        ("qkv_dgrad", BulkOverlapCfg),
        ("qkv_wgrad", BulkOverlapCfg),
        ("fc1_dgrad", BulkOverlapCfg),
        ("fc1_wgrad", BulkOverlapCfg),
        ("qkv_fprop", RingExchangeOverlapCfg),
        ("proj_dgrad", RingExchangeOverlapCfg),
        ("fc1_fprop", RingExchangeOverlapCfg),
        ("fc2_dgrad", RingExchangeOverlapCfg),
        ("proj_fprop", PipelineOverlapCfg),
        ("fc2_fprop", PipelineOverlapCfg),
    ],
)
def test_missing_method_takes_te_default_for_the_gemm(gemm, cfg_type):
    cfg = getattr(load_tp_overlap_cfg({gemm: {"num_sm": 2}}), gemm)
    assert cfg == cfg_type(num_sm=2)
    assert getattr(load_tp_overlap_cfg({gemm: {"method": None}}), gemm) == cfg_type()


def test_misspelt_gemm_name_in_a_file(tmp_path):
    path = _write(tmp_path, "qkv_fprpo: {method: ring_exchange}\n")
    with pytest.raises(ValueError, match=r"ub\.yaml.*unknown GEMM name 'qkv_fprpo'") as info:
        load_tp_overlap_cfg(path)
    assert "Did you mean 'qkv_fprop'?" in str(info.value)
    assert f"Valid names: {', '.join(GEMM_NAMES)}." in str(info.value)


def test_misspelt_gemm_name_in_a_mapping_names_the_origin():
    with pytest.raises(
        ValueError,
        match=r"^tp_comm_overlap_cfg \(mapping\): unknown GEMM name 'qkv_fprpo'\. "
        r"Did you mean 'qkv_fprop'\?",
    ):
        load_tp_overlap_cfg({"qkv_fprpo": {}}, origin="tp_comm_overlap_cfg")


def test_te_external_gemm_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"'proj_wgrad'.*ring exchange of 'proj_dgrad'"):
        load_tp_overlap_cfg({"proj_wgrad": {"method": "external"}})


def test_knob_of_another_method_is_refused():
    with pytest.raises(
        ValueError,
        match=r"GEMM 'qkv_dgrad': knob 'aggregate' is not a knob of method 'bulk' "
        r"\(only of 'ring_exchange'\)",
    ):
        load_tp_overlap_cfg({"qkv_dgrad": {"method": "bulk", "num_sm": 4, "aggregate": True}})
    with pytest.raises(ValueError, match=r"knob 'num_splits' is not a knob of method 'ring"):
        load_tp_overlap_cfg({"qkv_fprop": {"num_splits": 4}})


def test_te_knob_the_types_do_not_model_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"knob 'use_ce' is a Transformer Engine knob"):
        load_tp_overlap_cfg({"qkv_fprop": {"method": "ring_exchange", "use_ce": False}})


def test_unknown_method():
    with pytest.raises(
        ValueError, match=r"GEMM 'fc2_fprop' has method 'pipline'\. Did you mean 'pipeline'\?"
    ):
        load_tp_overlap_cfg({"fc2_fprop": {"method": "pipline"}})


def test_wrong_value_type_in_a_file_chains_the_check_that_failed(tmp_path):
    with pytest.raises(TypeError) as info:
        load_tp_overlap_cfg(_write(tmp_path, WRONG_VALUE_TYPE))
    assert isinstance(info.value.__cause__, TypeError)


def test_out_of_range_value_names_the_gemm():
    with pytest.raises(ValueError, match=r"GEMM 'qkv_fprop' .*num_sm must be >= 1, got 0"):
        load_tp_overlap_cfg({"qkv_fprop": {"num_sm": 0}})


def test_gemm_entry_that_is_not_a_mapping():
    with pytest.raises(TypeError, match=r"GEMM 'qkv_fprop' must map to its knobs.*got int"):
        load_tp_overlap_cfg({"qkv_fprop": 3})


def test_pipeline_on_an_all_gather_gemm_is_refused_as_te_does():
    with pytest.raises(ValueError, match=r"'qkv_fprop' overlaps an all-gather.*'ring_exchange'"):
        load_tp_overlap_cfg({"qkv_fprop": {"method": "pipeline"}})


def test_non_bulk_dgrad_excludes_its_wgrad_as_te_does():
    # Without a wgrad entry TE accepts a pipelined dgrad (the published LoRA presets use one).
    cfg = load_tp_overlap_cfg({"fc1_dgrad": {"method": "pipeline", "num_sm": 16}})
    assert cfg.fc1_dgrad == PipelineOverlapCfg(num_sm=16)
    with pytest.raises(ValueError, match=r"'fc1_dgrad' uses method 'pipeline'.*remove 'fc1_wgrad'"):
        load_tp_overlap_cfg(
            {"fc1_dgrad": {"method": "pipeline"}, "fc1_wgrad": {"method": "bulk", "num_sm": 4}}
        )


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("qkv_dgrad:\n  method: bulk\n  num_sm: 4\n cga_size: 2\n", 4),
        ("qkv_dgrad:\n  method: bulk\n\tnum_sm: 4\n", 3),
        ("qkv_dgrad: {method: bulk, num_sm: 4}\nqkv_wgrad: [bulk\n", 3),
    ],
)
def test_malformed_yaml_names_file_and_line(tmp_path, text, line):
    with pytest.raises(ValueError, match=rf"ub\.yaml', line {line} column \d+: invalid YAML"):
        load_tp_overlap_cfg(_write(tmp_path, text))


def test_missing_file_names_path_and_fix(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(FileNotFoundError, match=r"nope\.yaml' does not exist.*fix the path"):
        load_tp_overlap_cfg(path)
    with pytest.raises(FileNotFoundError, match=r"^tp_comm_overlap_cfg file '.*nope\.yaml'"):
        load_tp_overlap_cfg(path, origin="tp_comm_overlap_cfg")


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        pytest.param("", ValueError, r"ub\.yaml' is empty", id="empty"),
        pytest.param("# only a comment\n", ValueError, r"ub\.yaml' is empty", id="comment"),
        pytest.param(
            "- qkv_fprop\n", TypeError, r"ub\.yaml' must hold a mapping.*got list", id="list"
        ),
        pytest.param(
            "ring_exchange\n", TypeError, r"ub\.yaml' must hold a mapping.*got str", id="str"
        ),
        pytest.param(
            "qkv_dgrad:\n  method: bulk\n  num_sms: 4\n",
            ValueError,
            r"ub\.yaml.*GEMM 'qkv_dgrad': knob 'num_sms' is not a userbuffer knob\. "
            r"Did you mean 'num_sm'\? "
            r"Valid knobs for method 'bulk': method, num_sm, cga_size, set_sm_margin\.",
            id="misspelt-knob",
        ),
        pytest.param(
            WRONG_VALUE_TYPE,
            TypeError,
            r"ub\.yaml.*GEMM 'fc2_fprop' \(method 'pipeline'\): "
            r"PipelineOverlapCfg\.num_sm must be an int >= 1 or None, got '16' \(str\)",
            id="wrong-value-type",
        ),
    ],
)
def test_error_in_a_file_names_the_file(tmp_path, text, error, match):
    with pytest.raises(error, match=match):
        load_tp_overlap_cfg(_write(tmp_path, text))


def test_source_of_another_type():
    with pytest.raises(TypeError, match="must be a mapping or a YAML file path, got int"):
        load_tp_overlap_cfg(42)  # type: ignore[arg-type]


def test_import_loads_neither_torch_nor_yaml():
    code = "import megatron.bridge.training.userbuffers_file"
    assert modules_loaded_by(code, ("torch", "yaml", "transformer_engine")) == []
