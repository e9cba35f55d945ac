"""``bridge-overlap explain``'s step estimate: text, JSON, picture (estimate/ behind it)."""

from __future__ import annotations

import json

from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training.estimate import estimate_step
from tests.unit_tests.conftest import modules_loaded_by


def _json(capsys, *argv):
    assert main(["explain", "--json", *argv]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def _hidden_by(doc):
    return {(c["mode"], c["collective"]): c["hidden_by"] for c in doc["estimate"]["communication"]}


def test_estimate_says_what_each_overlap_hides(capsys):
    on = _json(capsys)
    assert on["estimate"]["model_flops_per_token"] > 0
    hidden = _hidden_by(on)
    assert hidden[("tp", "all-gather + reduce-scatter")] == "tp_comm_overlap"
    assert {"overlap_grad_reduce", "overlap_param_gather", "overlap_p2p_comm"} <= set(
        hidden.values()
    )
    off = _json(capsys, "--no-tp-comm-overlap")
    assert _hidden_by(off)[("tp", "all-gather + reduce-scatter")] is None


def test_text_output_has_the_step_table(capsys):
    assert main(["explain"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "One step, per GPU of the busiest pipeline stage" in out
    assert "tp_comm_overlap hides" in out and "exposed communication" in out


def test_recipe_estimate_is_the_specs(capsys):
    doc = _json(capsys, "--recipe", "llama3_70b")
    spec = recipe_spec("llama3_70b")
    expected = estimate_step(spec.plan()).to_dict()
    assert json.loads(json.dumps(expected)) == doc["estimate"]


def test_plot_writes_a_picture(tmp_path, capsys):
    path = tmp_path / "step.png"
    assert main(["explain", "--recipe", "gpt3_175b", "--plot", str(path)]) == EXIT_OK
    capsys.readouterr()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_explain_without_plot_imports_no_matplotlib():
    code = "from megatron.bridge.cli import main; main(['explain', '--json'])"
    assert modules_loaded_by(code, ("matplotlib", "torch")) == []
