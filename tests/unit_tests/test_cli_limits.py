"""Sizes above their bounds (validators.LIMITS) and requests that would do nothing: each is a clear
error before any work (``bridge-overlap explain`` exit 2), never a hang, a traceback or silence."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, EXIT_REFUSED, REFERENCE, build_parser, main
from megatron.bridge.recipes import get_recipe, recipe_spec
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate import step as estimate_step_module
from megatron.bridge.training.job import (
    JobDescription,
    ModelDescription,
    check_micro_batch_chunks,
)
from megatron.bridge.training.pipeline_layout import parse_layout
from megatron.bridge.training.validators import (
    LIMITS,
    LimitError,
    nonnegative_int_argument,
    positive_int_argument,
)


def _explain(capsys, *argv: str) -> tuple[int, str]:
    code = main(["explain", *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


# --------------------------------------------------------------- bounds


@pytest.mark.parametrize("layout", ["Et*99999999999999|tL", "t*47999999", "(t*99999|)*99999"])
def test_a_layout_repeated_past_its_bound_is_refused_before_it_is_unrolled(layout, capsys):
    bound = LIMITS["model.pipeline_model_parallel_layout"].maximum
    with pytest.raises(LimitError, match=f"above its bound {bound}"):
        parse_layout(layout)
    code, err = _explain(capsys, "--pipeline-model-parallel-layout", layout)
    assert code == EXIT_INVALID
    assert "--pipeline-model-parallel-layout" in err and str(bound) in err


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--global-batch-size", "8000000000", "global_batch_size"),
        ("--hidden-size", "12288000000", "model.hidden_size"),
        ("--num-layers", "99999999999999999999", "model.num_layers"),
        ("--world-size", "4000000", "world_size"),
        ("--seq-length", "2147483648", "model.seq_length"),
    ],
)
def test_a_flag_above_its_bound_names_the_flag_and_the_bound(flag, value, field, capsys):
    code, err = _explain(capsys, flag, value)
    assert code == EXIT_INVALID
    assert flag in err and f"bound {LIMITS[field].maximum}" in err and LIMITS[field].why in err


def _explain_actions() -> list[argparse.Action]:
    # argparse has no public way to list a sub-command's options; _actions is where they live.
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices["explain"]._actions if a.option_strings]


ACTIONS = _explain_actions()
NUMERIC = [
    a
    for a in ACTIONS
    if getattr(a.type, "parse", a.type) in (int, positive_int_argument, nonnegative_int_argument)
]
BOUNDED = [a for a in ACTIONS if hasattr(a.type, "limit")]


@pytest.mark.parametrize("action", NUMERIC, ids=lambda a: a.dest)
def test_every_numeric_flag_has_a_bound(action):
    # Drawn from the parser itself: a new numeric flag without an entry in LIMITS fails here.
    assert getattr(action.type, "limit", None) in LIMITS


@pytest.mark.parametrize("action", BOUNDED, ids=lambda a: a.dest)
def test_one_past_a_flags_bound_is_refused_as_it_is_read(action, capsys):
    flag = action.option_strings[-1]
    past = str(LIMITS[action.type.limit].maximum + 1)
    # Spelled lazily: only the flag's own form is built (a bound on a count of elements is far
    # larger than a string of that many symbols can be).
    spelled = {
        "window_size": lambda: f"{past},0",  # LEFT,RIGHT
        "hybrid_layer_pattern": lambda: "M" * int(past),  # bounded in symbols
        "pipeline_model_parallel_layout": lambda: f"Et*{past}|L",  # in layers once unrolled
        "csa_compress_ratios": lambda: f"[0]*{int(past) - 1}+[0]",  # a per-layer list, in entries
    }
    past = spelled[action.dest]() if action.dest in spelled else past
    code, err = _explain(capsys, flag, past)
    assert code == EXIT_INVALID
    assert flag in err and "above its bound" in err


def test_the_bounds_are_in_the_help(capsys):
    assert main(["explain", "--help"]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"at most {LIMITS['model.hidden_size'].maximum}" in out
    assert str(LIMITS["micro_batches_x_chunks"].maximum) in out


def test_more_micro_batches_than_the_estimate_lays_out_are_refused_before_simulating(capsys):
    # 2048000 samples on DP 8 with VPP 2: 512000 chunks, each a segment of the simulation. The
    # plan has no such bound (a job may run it); the step estimate refuses it before simulating.
    plan = REFERENCE.changed(global_batch_size=2048000).plan()
    with pytest.raises(LimitError, match="512000 per step"):
        check_micro_batch_chunks(plan.job)
    with pytest.raises(LimitError, match="512000 per step"):
        estimate_step(plan)
    code, err = _explain(capsys, "--global-batch-size", "2048000")
    assert code == EXIT_INVALID and "global_batch_size=2048000" in err
    # At the bound the step is planned and estimated; then the memory, with this many micro-batches
    # in flight, is over an H100's: refused for that (exit 1), after the estimate.
    top = LIMITS["micro_batches_x_chunks"].maximum
    code, err = _explain(capsys, "--global-batch-size", str(top * 8 // 2))
    assert code == EXIT_REFUSED and "does not fit" in err, err


def test_more_gradient_buckets_than_the_estimate_runs_are_refused():
    plan = REFERENCE.changed(overlap=(("bucket_size", 1),)).plan()
    with pytest.raises(LimitError, match="bucket_size=1"):
        estimate_step(plan)


def _int_fields(cls: type) -> list[str]:
    hints = typing.get_type_hints(cls)
    return [
        f.name
        for f in dataclasses.fields(cls)
        if int in (hints[f.name], *typing.get_args(hints[f.name]))
    ]


def test_every_size_and_count_of_the_job_has_a_bound():
    # A new int field of the job description needs a bound (or it could hang the estimate).
    names = [f"model.{n}" for n in _int_fields(ModelDescription)] + [
        n for n in _int_fields(JobDescription)
    ]
    assert [n for n in names if n not in LIMITS] == []


@pytest.fixture(scope="module")
def container():
    return get_recipe("llama3_8b")


def test_an_override_above_its_bound_names_the_override(container):
    from megatron.bridge.training.overrides import apply_overrides

    cfg = copy.deepcopy(container)
    with pytest.raises(LimitError, match=r"model\.hidden_size=9{26}"):
        apply_overrides(cfg, ["model.hidden_size=99999999999999999999999999"])
    assert cfg.model.hidden_size == container.model.hidden_size  # nothing written


#: Override keys with a bound: the job's model fields and the batch sizes.
BOUNDED_KEYS = sorted(
    [n for n in LIMITS if n.startswith("model.") and n.removeprefix("model.") != "window_size"]
    + ["train.micro_batch_size", "train.global_batch_size"]
)
EXTREMES = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "yes", "99999999999999999999999999", "2048000"]),
    st.integers(-(2**64), 2**64).map(str),
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(key=st.sampled_from(BOUNDED_KEYS), value=EXTREMES)
def test_overrides_at_extreme_values_end_in_a_documented_code(key, value, capsys, monkeypatch):
    laid_out: list[int] = []
    simulate = estimate_step_module.simulate

    def counting(inp):
        # A spy: the simulation's segments and bucket runs, which LIMITS bounds.
        laid_out.append(inp.micro_batches * inp.vpp)
        laid_out.append(sum(g.buckets_per_chunk for g in inp.grad_streams) * inp.vpp)
        return simulate(inp)

    monkeypatch.setattr(estimate_step_module, "simulate", counting)
    code, err = _explain(capsys, "--recipe", "llama3_8b", f"{key}={value}")
    assert code in (EXIT_OK, EXIT_REFUSED, EXIT_INVALID), err
    bound = max(LIMITS["micro_batches_x_chunks"].maximum, LIMITS["buckets"].maximum)
    assert all(n <= bound for n in laid_out)


# --------------------------------------------------------------- nothing ignored


def test_a_flag_and_an_override_that_disagree_are_an_error(capsys):
    code, err = _explain(
        capsys, "--recipe", "llama3_70b", "--tp", "8", "model.tensor_model_parallel_size=2"
    )
    assert code == EXIT_INVALID
    assert "--tp 8" in err and "model.tensor_model_parallel_size=2" in err
    # Agreeing, they are one request.
    agree = ("--recipe", "llama3_70b", "--tp", "2", "model.tensor_model_parallel_size=2")
    # Planned, not refused as input: at TP2 the job does not fit an H100 (exit 1 for that).
    code, err = _explain(capsys, *agree)
    assert code == EXIT_REFUSED and "does not fit" in err


def test_vpp_1_on_a_recipe_whose_layout_interleaves_is_an_error(capsys):
    code, err = _explain(capsys, "--recipe", "deepseek_v3", "--vpp", "1")
    assert code == EXIT_INVALID
    assert "--vpp 1" in err and "pipeline_model_parallel_layout" in err


@pytest.mark.parametrize(
    ("argv", "off"),
    [
        (("--cpu-offloading-num-layers", "4"), "cpu_offloading is off"),
        (("--recompute-method", "uniform"), "only with full recompute"),
        (("--recompute-num-layers", "2"), "only with full recompute"),
        (("--recompute-modules", "core_attn"), "only with selective recompute"),
        (("--moe-router-topk", "4"), "no routed experts"),
        (("--moe-grouped-gemm",), "no routed experts"),
        (("--num-residual-streams", "4"), "no hyper-connections"),
        (("--mtp-use-repeated-layer",), "no multi-token-prediction layers"),
    ],
)
def test_a_flag_the_job_does_not_read_is_an_error(capsys, argv, off):
    code, err = _explain(capsys, *argv)
    assert code == EXIT_INVALID
    assert f"{argv[0]} would have no effect" in err and off in err


@pytest.mark.parametrize(
    "argv",
    [
        # With offloading on (which megatron-core runs without pipelining), the count is read.
        ("--cpu-offloading", "--cpu-offloading-num-layers", "4", "--pp", "1", "--vpp", "1"),
        (
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "2",
        ),
        ("--recompute-granularity", "selective", "--recompute-modules", "core_attn"),
        ("--recipe", "qwen3_30b_a3b", "--moe-router-topk", "4", "--moe-grouped-gemm"),
    ],
)
def test_the_same_flag_is_read_once_the_job_reads_it(capsys, argv):
    code, err = _explain(capsys, *argv)
    # Planned: some of these jobs do not fit in memory, refused for that (exit 1), not for input.
    assert code == EXIT_OK or (code == EXIT_REFUSED and "does not fit" in err), err


def test_an_empty_recipe_name_is_an_error(capsys):
    code, err = _explain(capsys, "--recipe", "")
    assert code == EXIT_INVALID and "--recipe ''" in err


@pytest.mark.parametrize(
    ("keywords", "error"),
    [
        ({"tp_size": 0}, ValueError),
        ({"tp_size": -4}, ValueError),
        ({"global_batch_size": -1}, ValueError),
        ({"tp_size": "8"}, TypeError),
        ({"seq_length": 2**40}, ValueError),
        ({"tp_comm_overlap": "yes"}, TypeError),
    ],
)
def test_recipe_keywords_are_checked_like_flags_naming_the_keyword(keywords, error):
    (keyword,) = keywords
    with pytest.raises(error, match=keyword):
        recipe_spec("llama3_70b", **keywords)
    with pytest.raises(error, match=keyword):
        get_recipe("llama3_70b", **keywords)


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "Yes", "ON"])
def test_booleans_are_true_or_false_only(word, container):
    from megatron.bridge.training.overrides import OverrideValueError, apply_overrides
    from megatron.bridge.training.serialization import from_yaml, to_yaml
    from megatron.bridge.training.value_types import ConfigValueError

    with pytest.raises(OverrideValueError, match="write true or false"):
        apply_overrides(copy.deepcopy(container), [f"model.sequence_parallel={word}"])
    text = to_yaml(container)
    line = "  sequence_parallel: false\n"
    assert line in text
    with pytest.raises(ConfigValueError, match="write true or false"):
        from_yaml(text.replace(line, f"  sequence_parallel: {word}\n"))
    # true/false in any YAML spelling stay booleans.
    assert from_yaml(text.replace(line, "  sequence_parallel: True\n")).model.sequence_parallel


def test_the_tiny_check_says_it_switched_the_dispatcher_and_warns_of_nothing_it_set():
    from megatron.bridge.check.cli import build_parser
    from megatron.bridge.check.config import build_check_config
    from megatron.bridge.training.resolve import resolve_config

    args = build_parser().parse_args(["--recipe", "qwen3_30b_a3b", "--tiny"])
    cfg, _, notes = build_check_config(args, world_size=4, on_cuda=False)
    assert any(
        n.startswith(
            "moe_token_dispatcher_type 'flex' turned to 'allgather' on the CPU, and "
            "moe_flex_dispatcher_backend 'hybridep'"
        )
        for n in notes
    ), notes
    plan = resolve_config(cfg, world_size=4, te="assume").plan
    assert not [w for w in plan.warnings if "moe_flex_dispatcher_backend" in w], plan.warnings


def test_the_limits_table_of_the_docs_says_what_the_flags_check():
    doc = (Path(__file__).parents[2] / "docs/training/communication-overlap.md").read_text()
    section = doc.partition("**Limits.**")[2].partition("Requests that would do nothing")[0]
    by_flag = {a.option_strings[-1]: a for a in BOUNDED} | {
        s: a for a in BOUNDED for s in a.option_strings
    }
    checked = 0
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) < 2 or not cells[1].split(" ")[0].isdigit():
            continue
        bound = int(cells[1].split(" ")[0])
        for flag in re.findall(r"`(--[a-z-]+)`", cells[0]):
            assert LIMITS[by_flag[flag].type.limit].maximum == bound, (flag, bound)
            checked += 1
    assert checked >= 20  # the table names the flags, not only derived counts
