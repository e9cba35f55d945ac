"""TP overlap's default asks only for what the layout can run; an explicit request stays loud.

Recipes and ``bridge-overlap explain`` ask ``tp_comm_overlap="auto"``: a layout that cannot run
TP overlap (TP 1, no sequence parallelism, no Transformer Engine) is planned without it, with a
``derived`` decision saying why and no warning, so ``--strict`` passes. ``--tp-comm-overlap``,
a recipe's ``tp_comm_overlap=True`` and ``CommOverlapConfig(tp_comm_overlap=True)`` are requests:
refused with a warning where the layout cannot run them, exit 1 under ``--strict``.
"""

from __future__ import annotations

import json
import logging

import pytest

from megatron.bridge.cli import main
from megatron.bridge.exit_codes import EXIT_OK, EXIT_REFUSED
from megatron.bridge.recipes import RECIPES, get_recipe, plan_recipe, recipe_spec
from megatron.bridge.training.comm_overlap import (
    PUBLISHED_PRESETS,
    CommOverlapConfig,
    JobDescription,
    ModelDescription,
    plan_comm_overlap,
)
from megatron.bridge.training.comm_overlap.rules.tp import tp_overlap_blockers

NOT_REQUESTED = "not requested: the layout cannot run it (TP=1)"


def _explain(capsys, *argv: str) -> dict:
    # On a GPU whose memory holds these layouts: a job that does not fit is refused (exit 1).
    assert main(["explain", *argv, *FITS_AT_TP1, "--json"]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def _decision(doc: dict, knob: str) -> dict:
    return next(d for d in doc["overlap"]["decisions"] if d["knob"] == knob)


def _job(tp: int, *, sp: bool | None = None, te: bool = True, seq: int = 4096) -> JobDescription:
    return JobDescription(
        model=ModelDescription(
            tensor_model_parallel_size=tp,
            sequence_parallel=tp > 1 if sp is None else sp,
            seq_length=seq,
            bf16=True,
        ),
        world_size=tp * 8,
        micro_batch_size=1,
        te_available=te,
        te_reason="" if te else "transformer_engine.pytorch is not importable",
    )


# --- the CLI ------------------------------------------------------------------------------------


FITS_AT_TP1 = ("--gpu", "b300")
"""A GPU whose memory holds the TP1 layouts below (H100's 80 GB does not)."""
FULL_RECOMPUTE = (
    "--recompute-granularity",
    "full",
    "--recompute-method",
    "uniform",
    "--recompute-num-layers",
    "1",
)


def test_tp1_without_a_flag_plans_no_tp_overlap_and_warns_nothing(capsys):
    doc = _explain(capsys, "--tp", "1")
    tp = _decision(doc, "tp_comm_overlap")
    assert (tp["value"], tp["source"]) == (False, "derived")
    assert tp["reason"].startswith(NOT_REQUESTED)
    assert "tensor_model_parallel_size is 1" in tp["reason"]
    assert "refused" not in tp["reason"]
    assert doc["warnings"] == []
    assert _decision(doc, "tp_comm_overlap_cfg")["value"] is None
    # --strict also refuses a layout that does not fit: at TP1 the reference model needs a
    # 288 GB GPU and full recompute to fit, which leave the TP decision as it is.
    assert main(["explain", "--tp", "1", *FITS_AT_TP1, *FULL_RECOMPUTE, "--strict"]) == EXIT_OK
    assert "not requested" in capsys.readouterr().out


def test_tp1_with_an_explicit_request_is_refused_loudly(capsys):
    doc = _explain(capsys, "--tp", "1", "--tp-comm-overlap")
    tp = _decision(doc, "tp_comm_overlap")
    assert (tp["value"], tp["source"]) == (False, "refused")
    assert tp["reason"].startswith("requested but refused")
    assert any(
        "TP comm overlap turned OFF" in w and "tensor_model_parallel_size is 1" in w
        for w in doc["warnings"]
    )
    assert main(["explain", "--tp", "1", "--tp-comm-overlap", "--strict"]) == EXIT_REFUSED
    assert "tensor_model_parallel_size is 1" in capsys.readouterr().err


def test_no_tp_comm_overlap_is_the_users_off(capsys):
    tp = _decision(_explain(capsys, "--tp", "1", "--no-tp-comm-overlap"), "tp_comm_overlap")
    assert (tp["value"], tp["source"]) == (False, "user")


def test_tp4_with_sequence_parallel_and_no_flag_is_on_as_requested(capsys):
    auto = _explain(capsys, "--tp", "4")
    asked = _explain(capsys, "--tp", "4", "--tp-comm-overlap")
    tp = _decision(auto, "tp_comm_overlap")
    assert (tp["value"], tp["source"]) == (True, "derived")
    assert "TP=4 >= 2, sequence parallel on, Transformer Engine available" in tp["reason"]
    assert _decision(asked, "tp_comm_overlap")["source"] == "user"
    # Everything else is what the explicit request plans: preset, backend, the other areas.
    values = {d["knob"]: d["value"] for d in auto["overlap"]["decisions"]}
    assert values == {d["knob"]: d["value"] for d in asked["overlap"]["decisions"]}
    assert auto["preset"]["name"] == asked["preset"]["name"]
    assert auto["preset"]["name"] == "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048"
    assert auto["warnings"] == asked["warnings"] == []


def test_tp4_without_sequence_parallel_and_no_flag_is_not_requested(capsys):
    doc = _explain(capsys, "--tp", "4", "--no-sequence-parallel")
    tp = _decision(doc, "tp_comm_overlap")
    assert (tp["value"], tp["source"]) == (False, "derived")
    assert "sequence_parallel is False" in tp["reason"]
    assert doc["warnings"] == []


# --- recipe, flags and container routes ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_each_recipe_asks_auto_and_plans_tp_overlap_where_its_layout_runs_it(capsys, name):
    spec = recipe_spec(name)
    assert spec.tp_comm_overlap == "auto"
    plan = plan_recipe(name)
    decision = plan.decision("tp_comm_overlap")
    runs = spec.job.tp_size > 1 and spec.job.sequence_parallel
    assert (decision.value, decision.source) == (runs, "derived")
    assert not any("TP comm overlap" in w or "tp_comm_overlap" in w for w in plan.warnings)
    if spec.job.tp_size == 1:
        assert decision.reason.startswith(NOT_REQUESTED)
        assert main(["explain", "--recipe", name, "--strict"]) == EXIT_OK
        capsys.readouterr()


@pytest.mark.parametrize("name", ["gpt3_175b", "llama3_70b"])
def test_recipe_route_and_flags_route_agree_at_tp1(capsys, name):
    plan = plan_recipe(name, tp_size=1)
    doc = _explain(capsys, "--recipe", name, "--tp", "1")
    assert plan.to_dict()["decisions"] == doc["overlap"]["decisions"]
    assert plan.decision("tp_comm_overlap").reason.startswith(NOT_REQUESTED)
    assert plan.warnings == () and doc["warnings"] == []
    assert main(["explain", "--recipe", name, "--tp", "1", *FITS_AT_TP1, "--strict"]) == EXIT_OK
    capsys.readouterr()


def test_a_recipes_explicit_request_is_refused_at_tp1(capsys):
    plan = plan_recipe("llama3_70b", tp_size=1, tp_comm_overlap=True)
    assert plan.decision("tp_comm_overlap").source == "refused" and plan.warnings
    doc = _explain(capsys, "--recipe", "llama3_70b", "--tp", "1", "--tp-comm-overlap")
    assert _decision(doc, "tp_comm_overlap")["source"] == "refused"


def test_the_built_container_keeps_auto_and_resolves_it_at_build_time():
    from megatron.bridge.training.comm_overlap import te_status
    from megatron.bridge.training.resolve import resolve_config

    cfg = get_recipe("llama3_70b", tp_size=1)
    assert cfg.comm_overlap.tp_comm_overlap == "auto"
    assert cfg.comm_overlap.tp_comm_overlap_cfg is None  # no preset looked up at TP 1
    resolved = resolve_config(cfg, world_size=64, te=te_status("assume"))
    decision = resolved.plan.decision("tp_comm_overlap")
    assert (decision.value, decision.source) == (False, "derived")
    assert resolved.plan.warnings == ()
    assert cfg.model.tp_comm_overlap is False


# --- the Python API and the rule ----------------------------------------------------------------


def test_commoverlapconfig_true_stays_an_explicit_request():
    plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=True), _job(1))
    assert plan.decision("tp_comm_overlap").source == "refused"
    assert any("tensor_model_parallel_size is 1" in w for w in plan.warnings)


def test_auto_off_for_each_blocker_without_a_warning_even_when_strict():
    for job, needle in (
        (_job(1), "tensor_model_parallel_size is 1"),
        (_job(4, sp=False), "sequence_parallel is False"),
        (_job(4, te=False), "Transformer Engine is not available"),
    ):
        assert any(needle in b for b in tp_overlap_blockers(job))
        plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap="auto", strict=True), job)
        decision = plan.decision("tp_comm_overlap")
        assert (decision.value, decision.source) == (False, "derived")
        assert needle in decision.reason and plan.warnings == ()


def test_auto_is_on_exactly_where_nothing_blocks():
    job = _job(4)
    assert tp_overlap_blockers(job) == ()
    plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap="auto"), job)
    assert plan.value("tp_comm_overlap") is True
    assert plan.decision("tp_comm_overlap").source == "derived"


def test_auto_does_not_ask_where_the_userbuffer_rows_do_not_divide():
    job = _job(4, seq=4098)  # 4098 tokens do not split over 4 TP ranks
    with pytest.raises(ValueError, match="divisible by tensor_model_parallel_size=4"):
        plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=True), job)
    plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap="auto", strict=True), job)
    decision = plan.decision("tp_comm_overlap")
    assert (decision.value, decision.source) == (False, "derived")
    assert "divisible by tensor_model_parallel_size=4" in decision.reason


def test_auto_with_a_users_preset_on_tp1_warns_that_the_preset_is_ignored():
    preset = PUBLISHED_PRESETS["userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"]
    request = CommOverlapConfig(tp_comm_overlap="auto", tp_comm_overlap_cfg=preset)
    plan = plan_comm_overlap(request, _job(1))
    assert plan.value("tp_comm_overlap") is False
    assert any("preset is ignored" in w for w in plan.warnings)


def test_a_value_other_than_a_bool_or_auto_is_refused_naming_both():
    with pytest.raises(TypeError, match="must be True or False, or 'auto'"):
        CommOverlapConfig(tp_comm_overlap="on").finalize()


def test_recipe_build_logs_no_preset_warning_at_tp1(caplog):
    with caplog.at_level(logging.WARNING, logger="megatron.bridge.recipes.spec"):
        get_recipe("gpt3_175b", tp_size=1)
    assert "preset" not in caplog.text
