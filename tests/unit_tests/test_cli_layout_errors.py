"""``bridge-overlap explain`` refuses a layout megatron-core would reject, as text and as JSON.

Every refusal exits 2 (``EXIT_INVALID``) naming the megatron-core field at fault, on stderr in
plain mode and as one ``{"error": ..., "exit_code": 2}`` document on stdout with ``--json``; a
``--strict`` refusal exits 1 the same way. Flags and recipes give one answer. Every ``--json``
document, plan or error, validates against ``megatron/bridge/explain.schema.json``.
"""

from __future__ import annotations

import copy
import json
from importlib import resources

import jsonschema
import pytest

import megatron.bridge
from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, EXIT_REFUSED, main
from megatron.bridge.recipes import RECIPES

MOE = ["--num-moe-experts", "8", "--moe-token-dispatcher", "alltoall"]

# (argv, the field the message must name). World sizes are chosen so that only the rule under
# test is broken.
INVALID = [
    pytest.param(
        ["--recipe", "llama3_70b", "--vpp", "3"],
        "virtual_pipeline_model_parallel_size=3",
        id="recipe-vpp-does-not-split-layers",
    ),
    pytest.param(
        ["--tp", "2", "--pp", "4", "--vpp", "4", "--ep", "8", "--world-size", "48", *MOE],
        "expert_model_parallel_size",
        id="expert-grid-does-not-tile-world",
    ),
    pytest.param(
        ["--tp", "4", "--pp", "4", "--ep", "3", "--world-size", "48", *MOE],
        "expert_model_parallel_size=3",
        id="experts-not-divisible-by-ep",
    ),
    pytest.param(
        ["--ep", "16", "--world-size", "256", *MOE],
        "expert_model_parallel_size=16",
        id="more-ep-ranks-than-experts",
    ),
    pytest.param(["--ep", "8"], "num_moe_experts", id="ep-on-a-dense-model"),
    pytest.param(["--tp", "1", "--sequence-parallel"], "sequence_parallel", id="sp-without-tp"),
    pytest.param(
        ["--num-attention-heads", "90", "--tp", "4"],
        "num_attention_heads=90",
        id="heads-not-divisible-by-tp",
    ),
    pytest.param(
        ["--num-query-groups", "6", "--tp", "4"],
        "num_query_groups=6",
        id="query-groups-vs-tp",
    ),
    pytest.param(["--cp", "2", "--seq-length", "2050"], "seq_length=2050", id="cp-seq-length"),
    pytest.param(["--gpu", "a100", "--precision", "fp8"], "precision fp8", id="fp8-on-a100-flags"),
    pytest.param(
        ["--recipe", "gpt3_175b", "--gpu", "a100", "--precision", "fp8"],
        "precision fp8",
        id="fp8-on-a100-recipe",
    ),
]


@pytest.mark.parametrize(("argv", "field"), INVALID)
def test_invalid_layout_exits_two_naming_the_field_in_text(argv, field, capsys):
    assert main(["explain", *argv]) == EXIT_INVALID
    captured = capsys.readouterr()
    assert captured.out == ""
    assert field in captured.err


@pytest.mark.parametrize(("argv", "field"), INVALID)
def test_invalid_layout_exits_two_with_one_json_error_document(argv, field, capsys):
    assert main(["explain", "--json", *argv]) == EXIT_INVALID
    doc = json.loads(capsys.readouterr().out)  # one JSON document, nothing else on stdout
    assert set(doc) == {"error", "exit_code"}
    assert doc["exit_code"] == EXIT_INVALID
    assert field in doc["error"]


def test_a100_bf16_recipe_runs_without_a_preset_and_fp8_does_not(capsys):
    # One answer for flags and recipes: A100 has no published preset (TE defaults) and no FP8.
    assert main(["explain", "--json", "--recipe", "gpt3_175b", "--gpu", "a100"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["layout"]["gpu"] == "a100"
    assert doc["preset"]["name"] is None
    assert doc["overlap"]["preset_names"] == []
    assert main(["explain", "--json", "--gpu", "a100"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["preset"]["name"] is None
    for argv in (["--recipe", "gpt3_175b"], []):
        assert main(["explain", "--json", *argv, "--gpu", "a100", "--precision", "fp8"]) == (
            EXIT_INVALID
        )
        assert "fp8" in json.loads(capsys.readouterr().out)["error"]


def test_strict_refusal_is_a_json_error_with_exit_code_one(capsys):
    argv = ["explain", "--json", "--no-sequence-parallel", "--tp-comm-overlap", "--strict"]
    assert main(argv) == EXIT_REFUSED
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"error", "exit_code"}
    assert doc["exit_code"] == EXIT_REFUSED
    assert "sequence_parallel" in doc["error"]


# ----------------------------------------------------------------- the JSON Schema


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(
        resources.files(megatron.bridge).joinpath("explain.schema.json").read_text("utf-8")
    )
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _document(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["explain", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


MOE_LAYOUT = [
    *("--tp", "2", "--pp", "2", "--vpp", "2", "--ep", "4", "--world-size", "32"),
    *("--num-moe-experts", "8", "--moe-token-dispatcher", "flex", "--moe-flex-backend", "deepep"),
    "--ep-overlap",
    # GPT-3's fused gelu adds biases, which experts split over ETP 2 cannot carry.
    *("--disable-bias-linear", "--no-bias-gelu-fusion"),
    # 8 layers: eight GPT-3-sized experts in each of 96 would not fit an H100.
    *("--num-layers", "8"),
]


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        pytest.param([], EXIT_OK, id="default-layout"),
        *(pytest.param(["--recipe", name], EXIT_OK, id=name) for name in sorted(RECIPES)),
        pytest.param(MOE_LAYOUT, EXIT_OK, id="moe-layout"),
        pytest.param(["--ep", "8"], EXIT_INVALID, id="error-document"),
        pytest.param(
            ["--no-sequence-parallel", "--tp-comm-overlap", "--strict"],
            EXIT_REFUSED,
            id="strict-error",
        ),
    ],
)
def test_json_output_validates_against_the_schema(argv, code, validator, capsys):
    got, doc = _document(capsys, *argv)
    assert got == code, doc
    validator.validate(doc)
    if code != EXIT_OK:
        assert doc["exit_code"] == code


def test_moe_layout_document_describes_the_experts(capsys):
    _, doc = _document(capsys, *MOE_LAYOUT)
    # Expert replicas: world / (ETP x EP x PP) = 32 / (2 x 4 x 2).
    assert (doc["layout"]["num_moe_experts"], doc["layout"]["expert_dp"]) == (8, 2)
    values = {d["knob"]: d["value"] for d in doc["overlap"]["decisions"]}
    assert values["overlap_moe_expert_parallel_comm"] is True
    # The deepep flex backend needs many hardware queues, whatever the GPU.
    env = {e["name"]: e["value"] for e in doc["launch_env"]}
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"


@pytest.mark.parametrize(
    "path",
    [
        ("warnings",),
        ("layout", "dp"),
        ("overlap", "decisions"),
        ("overlap", "job", "model", "tensor_model_parallel_size"),
        ("preset", "matches_model"),
    ],
)
def test_schema_rejects_a_document_with_a_missing_key(path, validator, capsys):
    _, doc = _document(capsys)
    validator.validate(doc)
    broken = copy.deepcopy(doc)
    holder = broken
    for key in path[:-1]:
        holder = holder[key]
    del holder[path[-1]]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


def test_schema_rejects_an_error_document_without_its_exit_code(validator, capsys):
    _, doc = _document(capsys, "--ep", "8")
    validator.validate(doc)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"error": doc["error"]})
