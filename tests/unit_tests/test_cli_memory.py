"""``bridge-overlap explain`` says the memory per GPU: text, JSON (and its schema), the error line
of a layout that does not fit, and ``--strict`` refusing it."""

from __future__ import annotations

import json
import sys
import types

import jsonschema
import pytest

from megatron.bridge import schema
from megatron.bridge.cli import EXIT_OK, EXIT_REFUSED, main
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training.estimate.memory import PARTS

# The Llama-3.1 405B run published on GB200 (fits), and the reference layout (GPT-3 175B, TP4 PP4
# VPP2 on 128 H100) with fp32 gradient reduction, which does not.
FITS = ["--recipe", "llama31_405b", "--gpu", "gb200", "--precision", "fp8_cs"]
DOES_NOT_FIT = ["--grad-reduce-in-fp32"]


def _doc(capsys, *argv: str, code: int = EXIT_OK) -> dict:
    capsys.readouterr()
    assert main(["explain", "--json", *argv]) == code
    return json.loads(capsys.readouterr().out)


def test_json_has_the_memory_by_part_and_validates(capsys):
    doc = _doc(capsys, *FITS)
    memory = doc["memory"]
    assert list(memory["parts"]) == list(PARTS)
    assert memory["total_bytes"] == sum(memory["parts"].values())
    assert memory["fits"] and memory["error"] is None and memory["fixes"] == []
    assert memory["headroom_bytes"] == memory["capacity_bytes"] - memory["total_bytes"] > 0
    assert doc["memory_refused"] is None
    jsonschema.Draft202012Validator(schema.explain_schema()).validate(doc)


def test_a_layout_that_does_not_fit_says_how_to_fix_it(capsys):
    doc = _doc(capsys, *DOES_NOT_FIT, code=EXIT_REFUSED)
    memory = doc["memory"]
    assert not memory["fits"] and memory["headroom_bytes"] < 0
    assert memory["fixes"] and memory["error"].startswith("the job does not fit in H100 memory")
    jsonschema.Draft202012Validator(schema.explain_schema()).validate(doc)
    assert main(["explain", *DOES_NOT_FIT]) == EXIT_REFUSED
    out = capsys.readouterr().out
    assert "Memory per GPU at its peak" in out
    for part in PARTS:
        assert part in out
    assert f"ERROR: {memory['error']}" in out


@pytest.mark.parametrize(("argv", "code"), [(DOES_NOT_FIT, EXIT_REFUSED), (FITS, EXIT_OK)])
def test_strict_refuses_a_layout_that_does_not_fit(argv, code, capsys):
    assert main(["explain", "--strict", *argv]) == code
    err = capsys.readouterr().err
    assert ("does not fit" in err) is (code == EXIT_REFUSED)


def _without_vocab():
    """A recipe whose model does not say its vocabulary size."""
    return recipe_spec("llama3_8b").changed(**{"model.vocab_size": None})


def test_a_job_without_its_vocabulary_says_why_it_has_no_memory_estimate(monkeypatch, capsys):
    module = types.ModuleType("memory_refused_recipes")
    module.without_vocab = _without_vocab
    monkeypatch.setitem(sys.modules, module.__name__, module)
    recipe = f"{module.__name__}:without_vocab"
    doc = _doc(capsys, "--recipe", recipe)
    assert doc["memory"] is None and "vocab_size" in doc["memory_refused"]
    jsonschema.Draft202012Validator(schema.explain_schema()).validate(doc)
    assert main(["explain", "--recipe", recipe]) == EXIT_OK
    assert "No memory estimate: " in capsys.readouterr().out
