"""One change, one plan: a GPU or precision given as a flag or as KEY=VALUE plans alike.

``--gpu``/``--precision`` start a recipe from its published run for that GPU and precision;
``gpu=`` and ``mixed_precision=`` (a training precision or the preset it trains with) are the
same change and reach the same plan, with or without other overrides. What the overrides' text
alone decides is refused before megatron-core is imported, and the import's own warnings stay
off the screen.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import megatron.bridge
from megatron.bridge.cli import EXIT_INVALID, main
from megatron.bridge.cli.quiet_import import quiet_third_party_import


def _explain(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["explain", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("flags", "overrides"),
    [
        # llama3_8b keeps every layer in FP8 and reduces gradients in bf16 in its published run;
        # the bare preset keeps the first and last layer in bf16 and reduces in fp32.
        (["--precision", "fp8_cs"], ["mixed_precision=fp8_cs"]),
        (["--precision", "fp8_cs"], ["mixed_precision=bf16_with_fp8_current_scaling_mixed"]),
        # H100 has a published fp8_cs run of its own (micro-batch 1, full recompute).
        (["--gpu", "h100"], ["gpu=h100"]),
        (["--gpu", "h100", "--precision", "bf16"], ["gpu=h100", "mixed_precision=bf16_mixed"]),
    ],
)
@pytest.mark.parametrize("more", [[], ["train.global_batch_size=128"]], ids=["alone", "with"])
def test_a_flag_and_its_override_plan_alike(capsys, flags, overrides, more):
    # "with": another override, so both build the recipe's container and resolve it.
    code, by_flag = _explain(capsys, "--recipe", "llama3_8b", *flags, *more)
    code_kv, by_override = _explain(capsys, "--recipe", "llama3_8b", *overrides, *more)
    assert code == code_kv
    assert by_override == by_flag


def test_the_flag_and_the_override_together_agree_or_are_refused(capsys):
    code, both = _explain(
        capsys, "--recipe", "llama3_8b", "--precision", "fp8_cs", "mixed_precision=fp8_cs"
    )
    assert (code, both) == _explain(capsys, "--recipe", "llama3_8b", "--precision", "fp8_cs")
    for argv in (
        ["--precision", "bf16", "mixed_precision=fp8_cs"],
        ["--precision", "bf16", "mixed_precision=fp32_no_mixed"],
        ["--gpu", "h100", "gpu=b200"],
    ):
        code, doc = _explain(capsys, "--recipe", "llama3_8b", *argv)
        assert code == EXIT_INVALID
        assert argv[-1] in doc["error"] and "give one of them" in doc["error"]


def test_an_unknown_key_suggests_each_name_once(capsys):
    assert main(["explain", "--recipe", "llama3_8b", "precision=bf16"]) == EXIT_INVALID
    suggested = re.search(r"Did you mean (.*)\?", capsys.readouterr().err).group(1).split(", ")
    assert "'mixed_precision'" in suggested
    assert len(suggested) == len(set(suggested))


def test_a_field_the_section_replacement_would_lose_is_refused(capsys):
    for lost, match in (
        (["mixed_precision.fp8_wgrad=false", "mixed_precision=fp32_no_mixed"], "would be lost"),
        (["comm_overlap=null", "comm_overlap.tp_comm_overlap=false"], "removes"),
    ):
        code, doc = _explain(capsys, "--recipe", "llama3_8b", *lost)
        assert code == EXIT_INVALID
        assert match in doc["error"] and lost[0] in doc["error"]
    # A key given twice with one value is that value.
    code, twice = _explain(capsys, "--recipe", "llama3_8b", "gpu=H100", "gpu=h100")
    assert (code, twice) == _explain(capsys, "--recipe", "llama3_8b", "--gpu", "h100")


_SYNTAX_ERRORS = [
    ["ddp.overlap_grad_reduce"],
    ["model.hidden_size=1", "model.hidden_size=2"],
    ["foo.bar=1"],
    ["precision=bf16"],
    ["model.config.hidden_size=1"],
    ["gpu=h1000"],
    ["comm_overlap=true"],
    ["env_vars.CUDA_DEVICE_MAX_CONNECTIONS=many"],
    ["mixed_precision.fp8_wgrad=false", "mixed_precision=fp32_no_mixed"],
    ["--precision", "bf16", "mixed_precision=fp8_cs"],
]


def test_syntax_errors_are_reported_before_megatron_core_is_imported():
    # A fresh interpreter: this one may have imported megatron-core for other tests.
    script = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        from megatron.bridge.cli import main
        out = []
        for case in {_SYNTAX_ERRORS!r}:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = main(["explain", "--recipe", "llama3_8b", *case])
            heavy = sorted(m for m in ("torch", "megatron.core") if m in sys.modules)
            out.append([code, heavy, err.getvalue()])
        print(json.dumps(out))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    for case, (code, heavy, err) in zip(_SYNTAX_ERRORS, json.loads(result.stdout), strict=True):
        assert code == EXIT_INVALID, (case, err)
        assert heavy == [], (case, err)
        assert case[-1].partition("=")[0] in err, (case, err)


def test_the_import_of_megatron_core_prints_none_of_its_warnings():
    # The route that builds the container imports torch and megatron-core.
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from megatron.bridge.cli import main; sys.exit(main(sys.argv[1:]))",
            "explain",
            "--recipe",
            "llama3_8b",
            "--json",
            "train.global_batch_size=128",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["layout"]["gpu"] == "gb300"
    for noise in ("not installed", "No CUDA runtime", "SyntaxWarning"):
        assert noise not in result.stderr


def test_the_quiet_import_keeps_our_warnings_and_the_logging_state():
    ours = str(Path(megatron.bridge.__file__).parent / "training" / "overrides.py")
    theirs = str(Path(logging.__file__))
    before = logging.root.manager.disable
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with quiet_third_party_import():
            warnings.warn_explicit("ours", UserWarning, ours, 1)
            warnings.warn_explicit("theirs", UserWarning, theirs, 1)
            assert not logging.getLogger("torch.utils.cpp_extension").isEnabledFor(logging.WARNING)
    assert [str(w.message) for w in shown] == ["ours"]
    assert logging.root.manager.disable == before
    assert logging.getLogger("torch.utils.cpp_extension").isEnabledFor(logging.WARNING)
