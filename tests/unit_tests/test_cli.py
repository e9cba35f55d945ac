"""``bridge-overlap explain``: output, JSON document, exit codes, and staying light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, EXIT_REFUSED, JSON_SCHEMA_VERSION, main
from tests.unit_tests.conftest import modules_loaded_by


def _json(capsys, *argv):
    assert main(["explain", "--json", *argv]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def test_default_explains_the_reference_layout(capsys):
    assert main(["explain"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "128 x H100  TP4 PP4 VPP2 CP1 EP1 -> DP8" in out
    assert "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048" in out and "matches the model" in out
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in out
    assert "NVTE_FWD_LAYERNORM_SM_MARGIN=20" in out


def test_json_document_has_stable_keys_and_the_resolved_values(capsys):
    doc = _json(capsys)
    assert set(doc) == {
        "schema_version",
        "recipe",
        "layout",
        "transformer_engine",
        "preset",
        "overlap",
        "launch_env",
        "warnings",
        "estimate",
        "estimate_refused",
        "memory",
        "memory_refused",
    }
    assert doc["schema_version"] == JSON_SCHEMA_VERSION
    values = {d["knob"]: d["value"] for d in doc["overlap"]["decisions"]}
    assert values["tp_comm_overlap"] is True
    assert (values["overlap_p2p_comm"], values["batch_p2p_comm"]) == (True, False)
    assert values["bucket_size"] == 128 * 1024 * 1024
    assert values["align_param_gather"] is True
    env = {e["name"]: e["value"] for e in doc["launch_env"]}
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    # The reference fits an H100 with 2.8 GiB to spare: the one warning is the allocator's.
    assert len(doc["warnings"]) == 1 and "fragmentation" in doc["warnings"][0]


def test_blackwell_layout_gets_32_connections_and_b200_preset(capsys):
    doc = _json(capsys, "--gpu", "b200")
    env = {e["name"]: e["value"] for e in doc["launch_env"]}
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    assert doc["preset"]["name"] == "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048"


def test_refusal_is_reported_and_strict_exits_one(capsys):
    # PP 8: without sequence parallelism the reference's activations do not fit at PP 4.
    doc = _json(capsys, "--no-sequence-parallel", "--tp-comm-overlap", "--pp", "8")
    assert any("sequence_parallel is False" in w for w in doc["warnings"])
    refused = [d for d in doc["overlap"]["decisions"] if d["source"] == "refused"]
    assert [d["knob"] for d in refused] == ["tp_comm_overlap"]
    assert (
        main(["explain", "--no-sequence-parallel", "--tp-comm-overlap", "--strict"]) == EXIT_REFUSED
    )
    assert "refused" in capsys.readouterr().err


#: (argv, needle) rows of ``data/refused_cli_input.yaml``.
REFUSED_INPUT = [
    (row["argv"], row["needle"])
    for row in yaml.safe_load(
        (Path(__file__).parent / "data" / "refused_cli_input.yaml").read_text()
    )
]


@pytest.mark.parametrize(("argv", "needle"), REFUSED_INPUT)
def test_invalid_input_exits_two_naming_the_flag(capsys, argv, needle):
    code = main(["explain", *argv])
    err = capsys.readouterr().err
    assert code == EXIT_INVALID
    assert needle in err and "Traceback" not in err


def test_no_preset_for_shape_falls_back_to_te_defaults_with_a_note(capsys):
    doc = _json(capsys, "--hidden-size", "5120")
    assert doc["preset"]["name"] is None
    assert "Transformer Engine's defaults" in doc["preset"]["detail"]
    assert any("default userbuffer settings" in n for n in doc["overlap"]["notes"])


def test_te_detect_reports_this_machine():
    # No GPU machine here can import TE; detect must say so and refuse the TP overlap requested.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "megatron.bridge.cli",
            "explain",
            "--te",
            "detect",
            "--tp-comm-overlap",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout)
    te = doc["transformer_engine"]
    if te["available"]:  # a CUDA machine with TE: the request stands
        assert {d["knob"]: d["value"] for d in doc["overlap"]["decisions"]}[
            "tp_comm_overlap"
        ] is True
    else:
        assert te["reason"]
        assert any("Transformer Engine is not available" in w for w in doc["warnings"])


def test_explain_imports_no_torch_or_megatron_core():
    code = "from megatron.bridge.cli import main; main(['explain', '--json'])"
    heavy = ("torch", "megatron.core", "transformer_engine", "nemo_run")
    assert modules_loaded_by(code, heavy) == []


def test_recipe_takes_shape_flags_and_picks_its_preset_for_them(capsys):
    doc = _json(capsys, "--recipe", "gpt3_175b", "--gpu", "b200")
    assert doc["recipe"] == "gpt3_175b"
    assert (doc["layout"]["tp"], doc["layout"]["pp"], doc["layout"]["vpp"]) == (4, 8, 6)
    assert doc["preset"]["source"] == "recipe"
    assert doc["preset"]["name"] == "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048"
    assert doc["preset"]["matches_model"] is True
    named = _json(capsys, "--recipe", "gpt3_175b", "--preset", "none")
    assert named["preset"]["source"] == "none" and named["preset"]["name"] is None


def test_te_version_plans_for_an_older_cluster(capsys):
    argv = [
        "explain",
        "--num-experts",
        "8",
        "--ep",
        "8",
        "--moe-token-dispatcher",
        "alltoall",
        "--disable-bias-linear",
        "--no-bias-gelu-fusion",
        "--ep-overlap",
        # 16 layers: eight GPT-3-sized experts in each of 96 would not fit an H100.
        "--num-layers",
        "16",
    ]
    assert main(argv) == EXIT_OK
    assert "assumed present where the job runs, version" in capsys.readouterr().out
    assert main([*argv, "--te-version", "2.6", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["transformer_engine"]["version"] == "2.6"
    assert doc["overlap"]["job"]["te_version"] == "2.6"
    assert main(["explain", "--te", "detect", "--te-version", "2.7"]) == 2
    assert "te='assume'" in capsys.readouterr().err
