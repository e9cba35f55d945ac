"""The shipped recipes' model shapes (megatron/bridge/recipes/models.json) and their reader.

Every entry builds a ``ModelDescription``; each shipped recipe's model is its entry; a value its
field does not admit, a field ``ModelDescription`` does not have, a missing or circular base are
refused with the file and the key named (copies of the file written to ``tmp_path``, read through
the reader's ``table`` parameter).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import pytest

from megatron.bridge.recipes import RECIPES
from megatron.bridge.recipes.models import MODELS_TABLE, recipe_model, recipe_model_fields
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.precisions import PRECISIONS
from megatron.bridge.training.value_types import ConfigValueError

ENTRIES = json.loads(MODELS_TABLE.read_text(encoding="utf-8"))
OWN_KEYS = {"base", "source"}

# What a spec sets over its model: the published run's layout (every run names all of these)
# and the precision's fields, with sequence parallelism following TP.
LAYOUT_FIELDS = {
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "pipeline_model_parallel_layout",
    "sequence_parallel",
    # The activation recompute is the published run's (published_runs.csv), not the model's.
    "recompute_granularity",
    "recompute_method",
    "recompute_num_layers",
    "recompute_modules",
    # And so is the activation offloading (and the op fuser fused_group_mlp offloading needs).
    "cpu_offloading",
    "cpu_offloading_num_layers",
    "fine_grained_activation_offloading",
    "offload_modules",
    "min_offloaded_tensor_size",
    "use_transformer_engine_op_fuser",
}
PRECISION_FIELDS = {name for setting in PRECISIONS.values() for name in setting.model}


def _as_stored(value):
    # JSON lists are stored as tuples (nested ones too: window_size, layouts).
    return tuple(_as_stored(v) for v in value) if isinstance(value, list) else value


def _own_fields(name: str) -> dict:
    return {k: _as_stored(v) for k, v in ENTRIES[name].items() if k not in OWN_KEYS}


def _write_table(tmp_path: Path, entries: dict) -> Path:
    table = tmp_path / "models.json"
    table.write_text(json.dumps(entries), encoding="utf-8")
    return table


def _corrupted(tmp_path: Path, name: str, **fields) -> Path:
    entries = json.loads(MODELS_TABLE.read_text(encoding="utf-8"))
    entries[name].update(fields)
    return _write_table(tmp_path, entries)


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_every_entry_builds_with_its_own_fields_over_its_base(name):
    model = recipe_model(name)
    assert isinstance(model, ModelDescription)
    base = ENTRIES[name].get("base")
    expected = recipe_model(base) if base else ModelDescription()
    assert model == dataclasses.replace(expected, **_own_fields(name))
    assert isinstance(ENTRIES[name]["source"], str) and ENTRIES[name]["source"]


def test_every_shipped_recipe_has_an_entry_and_every_base_is_an_entry():
    assert set(RECIPES) <= set(ENTRIES)
    bases = {entry["base"] for entry in ENTRIES.values() if "base" in entry}
    assert bases <= set(ENTRIES)
    # The shared architectures are entries that recipes start from.
    assert {"llama3", "moe_transformer", "deepseek_v3", "nemotron_3_nano"} <= bases


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_each_recipe_model_is_its_entry(name):
    module = importlib.import_module(RECIPES[name].partition(":")[0])
    spec = module.SPEC
    data = recipe_model(name)
    model = spec.job.model
    # The architecture: every field the layout and the precision do not set is the entry's.
    for field in dataclasses.fields(ModelDescription):
        if field.name not in LAYOUT_FIELDS | PRECISION_FIELDS:
            assert getattr(model, field.name) == getattr(data, field.name), field.name
    # The default layout: the first published run's, or the entry's where the default is no
    # published run.
    default_run = spec.published_run(None, None)
    for field in LAYOUT_FIELDS - {"sequence_parallel"}:
        expected = (
            getattr(data, field) if default_run is None else default_run.changes[f"model.{field}"]
        )
        assert getattr(model, field) == expected, field


def test_lists_become_tuples_and_null_is_none():
    deepseek = recipe_model("deepseek_v3")
    assert deepseek.moe_layer_freq == (0,) * 3 + (1,) * 58
    assert isinstance(deepseek.moe_layer_freq, tuple)
    assert recipe_model("gpt_oss_120b").window_size == (127, 0)
    kimi = recipe_model("kimi_k2")
    assert kimi.mtp_num_layers is None and deepseek.mtp_num_layers == 1
    assert kimi.moe_layer_freq == (0,) + (1,) * 60


def test_floats_given_as_whole_numbers_are_floats(tmp_path):
    table = _corrupted(tmp_path, "llama3", hidden_dropout=0)
    value = recipe_model("llama3_8b", table).hidden_dropout
    assert value == 0.0 and isinstance(value, float)


def test_the_parsed_file_is_cached():
    assert recipe_model_fields("llama3_70b") is recipe_model_fields("llama3_70b")


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("num_layers", "x", "expected int or None, got str 'x'"),
        ("moe_layer_freq", [0, "1"], "expected int or tuple[int, ...], got list [0, '1']"),
        ("activation_func", "swish", "got str 'swish'"),
        ("moe_grouped_gemm", 1, "expected bool, got int 1"),
    ],
)
def test_a_bad_value_names_the_file_and_the_key(tmp_path, field, value, problem):
    table = _corrupted(tmp_path, "qwen3_30b_a3b", **{field: value})
    with pytest.raises(ConfigValueError) as info:
        recipe_model("qwen3_30b_a3b", table)
    assert str(info.value).startswith(f"models.json: qwen3_30b_a3b.{field}: ")
    assert problem in str(info.value)
    # The shipped file is untouched, and read on its own.
    assert recipe_model("qwen3_30b_a3b").num_layers == 48


def test_a_bad_value_in_a_base_names_the_base_entry(tmp_path):
    table = _corrupted(tmp_path, "moe_transformer", moe_grouped_gemm="yes")
    with pytest.raises(ConfigValueError, match=r"^models\.json: moe_transformer\.moe_grouped_gemm"):
        recipe_model("deepseek_v3", table)


def test_an_unknown_field_is_refused_by_name(tmp_path):
    table = _corrupted(tmp_path, "qwen3_30b_a3b", num_layer=48)
    with pytest.raises(ValueError) as info:
        recipe_model("qwen3_30b_a3b", table)
    message = str(info.value)
    assert message.startswith("models.json: qwen3_30b_a3b.num_layer: 'num_layer' is not a")
    assert "did you mean 'num_layers'?" in message


@pytest.mark.parametrize(
    ("entries", "name", "message"),
    [
        ({"a": {"source": "s", "base": "b"}}, "a", r"^models\.json: a\.base: no entry 'b'$"),
        (
            {"a": {"source": "s", "base": "b"}, "b": {"source": "s", "base": "a"}},
            "a",
            r"^models\.json: b\.base: 'a' refers back to it \(a -> b -> a\)$",
        ),
        ({"a": {"source": "s", "base": "a"}}, "a", r"^models\.json: a\.base: 'a' refers back"),
        ({"a": {"num_layers": 2}}, "a", r"^models\.json: a\.source: missing; every entry names"),
        ({"a": {"source": 1}}, "a", r"^models\.json: a\.source: expected str, got int 1$"),
        ({"a": {"source": "s"}}, "ab", r"^models\.json: no entry 'ab' \(did you mean 'a'\?\)$"),
        ({"a": [1]}, "a", r"^models\.json: a: expected an object of fields$"),
    ],
)
def test_a_broken_entry_names_the_file_and_the_key(tmp_path, entries, name, message):
    table = _write_table(tmp_path, entries)
    with pytest.raises(ValueError, match=message):
        recipe_model(name, table)


def test_a_file_that_is_not_json_is_named(tmp_path):
    table = tmp_path / "models.json"
    table.write_text('{"a": {"source": "s",}}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"^models\.json: not valid JSON: "):
        recipe_model("a", table)
