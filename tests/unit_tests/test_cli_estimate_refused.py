"""``explain`` says why it has no step estimate: a line in the text, ``estimate_refused`` in JSON."""

from __future__ import annotations

import json
import sys
import types

import jsonschema
import pytest

from megatron.bridge import schema
from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.recipes import recipe_spec


def _without_vocab():
    """A recipe whose model does not say its vocabulary size."""
    return recipe_spec("llama3_8b").changed(**{"model.vocab_size": None})


@pytest.fixture
def recipe(monkeypatch) -> str:
    module = types.ModuleType("estimate_refused_recipes")
    module.without_vocab = _without_vocab
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return f"{module.__name__}:without_vocab"


def test_json_names_what_the_estimate_needs(recipe, capsys):
    assert main(["explain", "--recipe", recipe, "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["estimate"] is None
    assert "vocab_size" in doc["estimate_refused"] and "--vocab-size" in doc["estimate_refused"]
    jsonschema.Draft202012Validator(schema.explain_schema()).validate(doc)


def test_text_prints_the_reason(recipe, capsys):
    assert main(["explain", "--recipe", recipe]) == EXIT_OK
    out = capsys.readouterr().out
    assert "No step estimate: The step estimate needs the model's vocab_size" in out


def test_an_estimated_job_has_no_refusal(capsys):
    assert main(["explain", "--recipe", "llama3_8b", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["estimate"] is not None and doc["estimate_refused"] is None
