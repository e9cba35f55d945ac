"""``bridge-overlap`` never ends in a traceback: every failure is a message and a documented code.

One test per way the command used to fail badly (a traceback, or a message that blamed the wrong
thing), then a fuzz test that feeds random command lines built from ``build_parser()``'s real
flags into ``main``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from megatron.bridge.cli import (
    EXIT_BROKEN_PIPE,
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_REFUSED,
    build_parser,
    main,
)
from megatron.bridge.recipes import (
    ENTRY_POINT_GROUP,
    RECIPES,
    get_recipe,
    plan_recipe,
    recipe_spec,
)
from megatron.bridge.training import launch_env
from megatron.bridge.training.comm_overlap import PUBLISHED_PRESETS
from megatron.bridge.training.estimate import step as estimate_step_module
from megatron.bridge.training.validators import (
    LIMITS,
    nonnegative_int_argument,
    positive_int_argument,
)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    """``main``'s exit code, stdout and stderr; a failure's stderr is a message, not a traceback."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def _error_document(out: str, code: int) -> str:
    """The error of a ``--json`` error document, checking that it is exactly one."""
    doc = json.loads(out)
    assert doc == {"error": doc["error"], "exit_code": code}
    return doc["error"]


# --------------------------------------------------------------- 1. comm_overlap=null


def test_override_that_drops_the_overlap_request_says_there_is_no_plan(capsys):
    code, out, err = _run(capsys, "explain", "--recipe", "gpt3_175b", "comm_overlap=null", "--json")
    assert code == EXIT_INVALID
    error = _error_document(out, EXIT_INVALID)
    assert error in err
    assert "'comm_overlap=null'" in error and "no overlap plan to explain" in error
    # The fix the message suggests is one that works.
    assert "comm_overlap.tp_comm_overlap=false" in error
    argv = ["explain", "--recipe", "gpt3_175b", "comm_overlap.tp_comm_overlap=false", "--json"]
    code, out, _ = _run(capsys, *argv)
    assert code == EXIT_OK
    assert {d["knob"]: d["value"] for d in json.loads(out)["overlap"]["decisions"]}[
        "tp_comm_overlap"
    ] is False


# --------------------------------------------------------------- 2. --plot paths


def test_plot_into_a_missing_directory_is_refused_before_planning(tmp_path, capsys):
    missing = tmp_path / "no" / "such"
    # --ep 8 alone is an invalid layout: the --plot error coming out instead shows that the
    # path is checked before any planning.
    argv = ["explain", "--ep", "8", "--plot", str(missing / "step.png")]
    code, out, err = _run(capsys, *argv)
    assert code == EXIT_INVALID
    assert "--plot" in err and str(missing) in err and "does not exist" in err
    assert not missing.exists()
    code, out, err = _run(capsys, *argv, "--json")
    assert code == EXIT_INVALID
    assert str(missing) in _error_document(out, EXIT_INVALID)


@pytest.mark.parametrize(
    ("name", "needle"),
    [("step.pdf", ".png or .svg"), (".", "is a directory")],
)
def test_plot_path_that_cannot_be_a_picture_names_the_flag(name, needle, tmp_path, capsys):
    code, _, err = _run(capsys, "explain", "--plot", str(tmp_path / name))
    assert code == EXIT_INVALID
    assert err.startswith("bridge-overlap: error: --plot ") and needle in err


# --------------------------------------------------------------- 3. a recipe returning 42

USER_MODULE = textwrap.dedent(
    """
    def returns_int(**overrides):
        return 42


    def raises_key_error(**overrides):
        return {}["no such table"]
    """
)


@pytest.fixture
def user_recipes(importable_module):
    """An importable module of recipes of the user's that are wrong in two ways."""
    return importable_module("wrong_recipes", USER_MODULE)


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param([], id="spec-path"),
        pytest.param(["--world-size", "8"], id="container-path"),
        pytest.param(["--world-size", "8", "--json"], id="container-path-json"),
        pytest.param(["train.global_batch_size=8"], id="overrides-path"),
    ],
)
def test_recipe_returning_neither_spec_nor_container_says_what_it_returned(
    extra, user_recipes, capsys
):
    code, out, err = _run(capsys, "explain", "--recipe", f"{user_recipes}:returns_int", *extra)
    assert code == EXIT_INVALID
    expected = (
        f"Recipe '{user_recipes}:returns_int' returned int; a recipe returns a RecipeSpec or a "
        "ConfigContainer."
    )
    assert expected in err
    if "--json" in extra:
        assert expected in _error_document(out, EXIT_INVALID)


@pytest.mark.parametrize("function", [recipe_spec, get_recipe, plan_recipe])
def test_every_recipe_entry_refuses_a_result_of_the_wrong_type(function, user_recipes):
    with pytest.raises(TypeError, match=r"returned int; a recipe returns a RecipeSpec or a"):
        function(f"{user_recipes}:returns_int")


def test_a_failing_user_recipe_is_invalid_input_naming_the_recipe(user_recipes, capsys):
    code, _, err = _run(capsys, "explain", "--recipe", f"{user_recipes}:raises_key_error")
    assert code == EXIT_INVALID
    assert f"Recipe '{user_recipes}:raises_key_error' failed: KeyError" in err
    assert "bug in bridge-overlap" not in err


# --------------------------------------------------------------- 4. stdout closed early


@pytest.mark.parametrize("argv", [["explain"], ["explain", "--json"], ["recipes"]])
def test_closed_stdout_stops_quietly_with_its_documented_code(argv):
    read_end, write_end = os.pipe()
    # No reader at all: the first write fails with EPIPE, as it does once `| head -1` has exited.
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "megatron.bridge.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (EXIT_BROKEN_PIPE, "")


# --------------------------------------------------------------- 5. a broken entry point

# Two installed distributions as a broken installation has them: a target that does not import,
# a shipped name registered again, one name registered by both with different targets.
BROKEN_DISTRIBUTIONS = {
    "pkg_a": [
        "missing_pkg = no_such_package_xyz.recipes:recipe",
        "gpt3_175b = someone_else.recipes:gpt3_175b",
        "twice = pkg_a.recipes:recipe",
    ],
    "pkg_b": ["twice = pkg_b.recipes:recipe"],
}


@pytest.fixture
def broken_entry_points(tmp_path, monkeypatch):
    """Installed entry points as a broken installation has them: real ``*.dist-info`` folders
    on ``sys.path``, which ``importlib.metadata`` reads as it reads any installed package."""
    for package, lines in BROKEN_DISTRIBUTIONS.items():
        dist = tmp_path / f"{package}-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {package.replace('_', '-')}\nVersion: 1.0\n"
        )
        (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_broken_entry_point_fails_only_its_own_recipe(broken_entry_points, capsys):
    code, _, err = _run(capsys, "explain", "--recipe", "missing_pkg")
    assert code == EXIT_INVALID
    assert "entry point missing_pkg = 'no_such_package_xyz.recipes:recipe'" in err
    assert ENTRY_POINT_GROUP in err and "cannot import 'no_such_package_xyz.recipes'" in err
    code, out, _ = _run(capsys, "explain", "--recipe", "twice", "--json")
    assert code == EXIT_INVALID
    error = _error_document(out, EXIT_INVALID)
    assert "registered twice" in error and "pkg_a.recipes:recipe" in error
    assert _run(capsys, "explain", "--recipe", "llama3_70b")[0] == EXIT_OK


def test_entry_point_shadowing_a_shipped_recipe_is_ignored_with_a_warning(
    broken_entry_points, capsys
):
    with pytest.warns(UserWarning, match=r"someone_else\.recipes:gpt3_175b.*shadows the shipped"):
        code, out, _ = _run(capsys, "explain", "--recipe", "gpt3_175b", "--json")
    assert code == EXIT_OK
    assert json.loads(out)["layout"]["world_size"] == 1024  # the shipped recipe's layout


def test_recipes_lists_a_broken_entry_point_with_its_error(broken_entry_points, capsys):
    with pytest.warns(UserWarning, match="shadows the shipped"):
        code, out, _ = _run(capsys, "recipes", "--json")
    assert code == EXIT_OK
    rows = {row["name"]: row for row in json.loads(out)["recipes"]}
    assert "cannot import 'no_such_package_xyz.recipes'" in rows["missing_pkg"]["error"]
    assert "registered twice" in rows["twice"]["error"]
    for name in RECIPES:
        assert rows[name]["error"] is None and rows[name]["layout"]["world_size"] >= 1
    with pytest.warns(UserWarning, match="shadows the shipped"):
        code, out, _ = _run(capsys, "recipes")
    assert code == EXIT_OK
    assert "missing_pkg      BROKEN: " in out and "llama3_70b       64 x H100" in out


# --------------------------------------------------------------- 6. megatron-core's own checks


def test_moe_bias_with_expert_tensor_parallelism_is_invalid_input(capsys):
    argv = [
        *("explain", "--recipe", "gpt3_175b", "--num-moe-experts", "8", "--ep", "8"),
        *("--ep-overlap", "--moe-token-dispatcher", "alltoall", "train.global_batch_size=2048"),
        "--json",
    ]
    code, out, err = _run(capsys, *argv)
    assert code == EXIT_INVALID
    error = _error_document(out, EXIT_INVALID)
    assert error in err
    # The torch-free mirror of megatron-core's "Bias in Moe is only supported when ETP==1".
    assert "expert_tensor_parallel_size=1" in error and "add_bias_linear" in error


def test_megatron_core_rejection_is_invalid_input_quoting_megatron_core(capsys):
    code, _, err = _run(capsys, "explain", "--recipe", "gpt3_175b", "model.fp8_output_proj=true")
    assert code == EXIT_INVALID
    assert err.strip() == (
        "bridge-overlap: error: megatron-core rejected the configuration: fp8_output_proj must be "
        "used together with fp8 mode. (ValueError in megatron.core.transformer.transformer_config)"
    )


# --------------------------------------------------------------- internal errors and signals


def test_internal_error_is_exit_three_naming_the_exception(monkeypatch, capsys):
    # Fault injection: no input reaches a bug on purpose, so one is planted in a step explain runs.
    def planted_bug(*args, **kwargs):
        raise KeyError("planted")

    monkeypatch.setattr(launch_env, "plan_launch_env_for", planted_bug)
    code, out, _ = _run(capsys, "explain", "--json")
    assert code == EXIT_INTERNAL
    error = _error_document(out, EXIT_INTERNAL)
    assert "internal error (a bug in bridge-overlap" in error
    assert "KeyError: 'planted'" in error and "in planted_bug" in error


def test_interrupt_is_exit_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch_env, "plan_launch_env_for", interrupted)
    code, out, _ = _run(capsys, "explain", "--json")
    assert code == EXIT_INTERRUPTED
    assert _error_document(out, EXIT_INTERRUPTED) == "bridge-overlap: interrupted"


def test_help_returns_zero_instead_of_raising(capsys):
    code, out, _ = _run(capsys, "explain", "--help")
    assert code == EXIT_OK and "--world-size" in out


# --------------------------------------------------------------- fuzz


def _explain_actions() -> list[argparse.Action]:
    # argparse has no public way to list a sub-command's options; _actions is where they live.
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices["explain"]._actions if a.option_strings]


EXPLAIN_ACTIONS = _explain_actions()

NUMBERS = st.one_of(
    st.integers(-2, 4096).map(str),
    st.sampled_from(["0", "1", "2", "8", "abc", "", "1.5", "1e3"]),
    # Extreme sizes: each is refused by its bound (LIMITS) before any work, or planned quickly.
    st.sampled_from(["2048000", "12288000000", "8000000000", "99999999999999999999999999"]),
    st.integers(-(2**70), 2**70).map(str),
)


def _numbers(action: argparse.Action) -> st.SearchStrategy[str]:
    """NUMBERS, plus the flag's own bound and one past it."""
    name = getattr(action.type, "limit", None)
    if name is None:
        return NUMBERS
    top = LIMITS[name].maximum
    return st.one_of(NUMBERS, st.sampled_from([str(top), str(top + 1)]))


#: Megatron-LM's per-layer list expressions, well and badly formed.
LAYER_LISTS = [
    "([0]*3+[1]*93)",
    "[1]*96",
    "([1]*3+[0]*2)*2",
    "[0,1]*48",
    "[2]*96",
    "[1]*99999999",
    "[0,1]+3",
    "([1]*4",
    "__import__('os')",
    "[]",
]

OVERRIDES = st.builds(
    "{}={}".format,
    st.sampled_from(
        [
            "model.num_layers",
            "model.hidden_size",
            "model.fp4_param",
            "comm_overlap",
            "comm_overlap.tp_comm_overlap",
            "train.global_batch_size",
            "ddp.overlap_grad_reduce",
            "env_vars.CUDA_DEVICE_MAX_CONNECTIONS",
            "no_such_section.field",
        ]
    ),
    st.sampled_from(["null", "true", "false", "0", "-1", "8", "abc", "{}"]),
)


def _argument(action: argparse.Action, plot_dir: str) -> st.SearchStrategy[list[str]]:
    """One use of ``action``: its flag, with a plausible or implausible value when it takes one."""
    if isinstance(action, argparse.BooleanOptionalAction):
        return st.sampled_from(action.option_strings).map(lambda flag: [flag])
    flag = action.option_strings[-1]
    if action.nargs == 0:
        return st.just([flag])
    if action.choices is not None:
        values = st.sampled_from([*action.choices, "bogus", ""])
    elif getattr(action.type, "parse", action.type) in (
        int,
        positive_int_argument,
        nonnegative_int_argument,
    ):
        values = _numbers(action)
    elif action.dest == "recipe":
        values = st.sampled_from(
            [
                *sorted(RECIPES),
                "llama2_70b",
                "no_such_module:fn",
                "megatron.bridge.recipes.spec:RecipeSpec",
                "megatron.bridge.recipes.gpt3_175b:spec",
                "a:b:c",
                ":",
                "",
            ]
        )
    elif action.dest == "preset":
        values = st.sampled_from(["auto", "none", "bogus", "", *sorted(PUBLISHED_PRESETS)[:3]])
    elif action.dest == "te_version":
        values = st.sampled_from(["2.7", "2.12.0+abc", "1.0", "two", "", "3"])
    elif action.dest in ("moe_layer_freq", "window_attn_skip_freq"):
        values = st.one_of(_numbers(action), st.sampled_from(LAYER_LISTS))
    elif action.dest == "csa_compress_ratios":
        values = st.sampled_from(["([0,0]+[4,128]*20+[4,0])", "[0]*4", "[5]", "4", "x", ""])
    elif action.dest == "moe_router_topk_scaling_factor":
        values = st.sampled_from(["1.5", "5", "0", "-1", "inf", "nan", "x", ""])
    elif action.dest == "window_size":
        values = st.sampled_from(
            ["128,0", "(4096,0)", "-1,0", "-2,0", "128", "a,b", "", "99999999999999999999,0"]
        )
    elif action.dest == "hybrid_layer_pattern":
        values = st.sampled_from(
            ["M*M-", "M-M-|M*M-", "M*-/*-/*-", "MEME", "M*X", "M-/*/-", "", "M*" * 48]
        )
    elif action.dest == "pipeline_model_parallel_layout":
        values = st.sampled_from(
            [
                "Et*4|(t*4|)*14tmL",
                "Et|t|t|tL",
                "E|t*48|L",
                "Et*3",
                "(t|",
                "Ex|L",
                "",
                "|",
                "Et*99999999999999|tL",
                "t*47999999",
                "(t*99999|)*99999",
            ]
        )
    elif action.dest == "recompute_modules":
        # Any number of module names, known or not.
        names = st.sampled_from(["core_attn", "moe_act", "layernorm", "mla_up_proj", "bogus", ""])
        return st.lists(names, max_size=3).map(lambda modules: [flag, *modules])
    elif action.dest == "offload_modules":
        # One or more module names, known or not.
        names = st.sampled_from(["fused_group_mlp", "expert_fc1", "attn_proj", "bogus", ""])
        return st.lists(names, min_size=1, max_size=3).map(lambda modules: [flag, *modules])
    elif action.dest == "activation_offload_fraction":
        values = st.sampled_from(["0.5", "1", "0", "-0.1", "1.5", "inf", "nan", "x", ""])
    elif action.dest == "plot":
        names = ["step.png", "step.svg", "step.pdf", "missing/step.png", ""]
        values = st.sampled_from([os.path.join(plot_dir, name) for name in names])
    else:
        raise AssertionError(f"the fuzz test has no values for {flag}: add them")
    return values.map(lambda value: [flag, value])


@pytest.mark.parametrize("action", EXPLAIN_ACTIONS, ids=lambda a: a.dest)
def test_the_fuzz_test_has_values_for_every_explain_flag(action, tmp_path):
    # The fuzz test draws a few flags per command line; this holds it to every flag at once.
    assert isinstance(_argument(action, str(tmp_path)), st.SearchStrategy)


@st.composite
def command_lines(draw, plot_dir: str) -> list[str]:
    """A random ``bridge-overlap`` command line; few build a recipe's container (slow)."""
    if draw(st.integers(0, 9)) == 9:
        return ["recipes", *draw(st.sampled_from([[], ["--json"]]))]
    argv = ["explain"]
    for action in draw(st.lists(st.sampled_from(EXPLAIN_ACTIONS), max_size=6, unique=True)):
        argv += draw(_argument(action, plot_dir))
    if draw(st.integers(0, 4)) == 4:
        if "--recipe" not in argv and draw(st.booleans()):
            argv += ["--recipe", draw(st.sampled_from(sorted(RECIPES)))]
        argv += draw(st.lists(OVERRIDES, min_size=1, max_size=2))
    return argv


@pytest.fixture(scope="module")
def plot_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("plots"))


@settings(
    max_examples=40,
    deadline=None,
    # capsys is read (so emptied) at the start of every example.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_command_lines_end_in_a_documented_code_never_an_exception(
    data, plot_dir, capsys, monkeypatch
):
    argv = data.draw(command_lines(plot_dir), label="argv")
    laid_out: list[tuple[int, int]] = []
    simulate = estimate_step_module.simulate

    def counting(inp):
        # The work the step estimate does: one segment per micro-batch chunk and one run per
        # gradient bucket; both are bounded (LIMITS) whatever the command line.
        buckets = sum(g.buckets_per_chunk for g in inp.grad_streams) * inp.vpp
        laid_out.append((inp.micro_batches * inp.vpp, buckets))
        return simulate(inp)

    monkeypatch.setattr(estimate_step_module, "simulate", counting)
    capsys.readouterr()
    code, out, err = _run(capsys, *argv)
    for chunks, buckets in laid_out:
        assert chunks <= LIMITS["micro_batches_x_chunks"].maximum, argv
        assert buckets <= LIMITS["buckets"].maximum, argv
    event(f"exit {code}")
    event("with overrides" if any("=" in a and not a.startswith("-") for a in argv) else "flags")
    assert code in EXIT_CODES
    # A command line alone reaches none of these: a 3 is a bug.
    assert code in (EXIT_OK, EXIT_REFUSED, EXIT_INVALID), err
    if code != EXIT_OK:
        assert err.strip(), "a failure must say why on stderr"
    if "--json" in argv and "--help" not in argv:
        doc = json.loads(out)
        if code != EXIT_OK:
            assert doc == {"error": doc["error"], "exit_code": code}
