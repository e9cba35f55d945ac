"""How sure the step estimate is (``estimate/accuracy.py``), shown alike by text, JSON and picture.

The family rule is worked by hand on the shipped recipes' models; the figures come from
``estimate/accuracy.json`` (``tests/unit_tests/test_predict_published.py`` holds that file to
what ``benchmarks/predict_published.py`` measures on the current code). The picture's compute
lane is checked to hold compute only: exposed communication is drawn as a stall.
"""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.recipes import plan_recipe
from megatron.bridge.schema import shipped_schema
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.accuracy import (
    ACCURACY_FILE,
    FAMILIES,
    MeasuredAccuracy,
    measured_accuracy,
    model_family,
)
from megatron.bridge.training.estimate_plot import step_picture
from tests.unit_tests.jobs import recipe_job_model

FIGURES = json.loads(ACCURACY_FILE.read_text())["families"]


@pytest.mark.parametrize(
    ("recipe", "changes", "family"),
    [
        ("llama3_70b", {}, "dense"),
        ("qwen3_30b_a3b", {}, "moe"),
        ("gpt_oss_120b", {}, "moe"),
        ("deepseek_v3", {}, "moe_mla"),
        ("kimi_k2", {}, "moe_mla"),
        ("nemotron_3_nano", {}, "hybrid"),
        # The hybrid pattern decides before the experts: Nano has routed experts too.
        ("nemotron_3_nano", {"num_moe_experts": None}, "hybrid"),
        ("deepseek_v3", {"experimental_attention_variant": "dsa"}, "sparse_attention"),
        ("qwen3_30b_a3b", {"num_moe_experts": None}, "dense"),
        ("llama3_70b", {"multi_latent_attention": True}, "dense"),  # MLA without experts
    ],
)
def test_model_family_from_the_layer_kinds(recipe, changes, family):
    model = dataclasses.replace(recipe_job_model(recipe), **changes)
    assert model_family(model) == family


def test_the_line_says_the_figures_or_that_there_are_none():
    measured = MeasuredAccuracy("moe", 91, 0.536, 0.5)
    assert measured.line() == (
        "measured accuracy: tokens/s/GPU off by 53.6% median (signed +50.0%) over 91 "
        "published rows of MoE transformers"
    )
    none = MeasuredAccuracy("sparse_attention", 0, None, None)
    assert none.line() == (
        "measured accuracy: no published rows for this kind of model "
        "(models with an experimental attention variant)"
    )
    assert none.to_dict() == {
        "family": "sparse_attention",
        "description": FAMILIES["sparse_attention"],
        "rows": 0,
        "median_abs_error": None,
        "median_signed_error": None,
        "out_of_group_median_abs_error": None,
        "model": None,
    }
    held_out = MeasuredAccuracy("moe", 91, 0.536, 0.5, 0.61)
    assert held_out.line().endswith(
        "published rows of MoE transformers; 61.0% with each model's rows left out of the fit"
    )


def test_measured_accuracy_reads_the_familys_figures():
    model = recipe_job_model("deepseek_v3")
    figures = FIGURES["moe_mla"]
    measured = measured_accuracy(model)
    # The model's own figures are test_model_accuracy.py's.
    assert dataclasses.replace(measured, model=None) == MeasuredAccuracy(
        "moe_mla",
        figures["rows"],
        figures["median_abs_error"],
        figures["median_signed_error"],
        figures["out_of_group"]["median_abs_error"],
    )
    # DeepSeek-V4 Flash's rows are the sparse-attention family's (its dsv4_hybrid attention).
    sparse = dataclasses.replace(model, experimental_attention_variant="dsa")
    figures = FIGURES["sparse_attention"]
    flash = measured_accuracy(recipe_job_model("deepseek_v4_flash"))
    assert measured_accuracy(sparse) == dataclasses.replace(flash, model=None)
    assert measured_accuracy(sparse).rows == figures["rows"] > 0


@pytest.mark.parametrize("recipe", ["llama3_70b", "qwen3_30b_a3b", "nemotron_3_nano"])
def test_text_json_and_picture_show_the_same_figure(recipe, capsys):
    plan = plan_recipe(recipe)
    estimate = estimate_step(plan)
    expected = measured_accuracy(plan.job.model)
    assert expected.rows > 0 and estimate.accuracy == expected
    capsys.readouterr()
    assert main(["explain", "--recipe", recipe]) == EXIT_OK
    assert expected.line() in capsys.readouterr().out
    assert main(["explain", "--recipe", recipe, "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, shipped_schema())
    assert doc["estimate"]["accuracy"] == expected.to_dict()
    assert step_picture(estimate)["accuracy"] == expected.line()


def test_no_published_rows_is_said_in_every_output():
    # Every family the estimate prices has published rows; a family without any (here the
    # experimental attention variants, whose FLOPs the estimate refuses) reads the same way.
    none = MeasuredAccuracy("sparse_attention", 0, None, None)
    estimate = dataclasses.replace(estimate_step(plan_recipe("deepseek_v3")), accuracy=none)
    assert none.line() in estimate.render().splitlines()
    assert estimate.to_dict()["accuracy"] == none.to_dict()
    assert step_picture(estimate)["accuracy"] == none.line()


def _lane(prediction) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for kind, _start, secs in prediction.timeline:
        seconds[kind] = seconds.get(kind, 0.0) + secs
    return seconds


@pytest.mark.parametrize(
    ("recipe", "picks"),
    [
        ("qwen3_30b_a3b", {}),  # exposed EP all-to-alls
        ("deepseek_v3", {}),  # EP under the combined 1F1B, parameter stalls, a DP tail
        ("llama3_70b", {"gpu": "h100"}),  # exposed TP
    ],
)
def test_the_compute_lane_draws_exposed_communication_as_a_stall(recipe, picks):
    estimate = estimate_step(plan_recipe(recipe, **picks))
    for prediction in (estimate.prediction, estimate.without_overlap):
        lane = _lane(prediction)
        computed = sum(lane.get(kind, 0.0) for kind in ("forward", "backward", "1f1b"))
        assert computed == pytest.approx(prediction.compute_seconds, rel=1e-9)
        waited = lane.get("stall", 0.0) + lane.get("tail", 0.0)
        assert waited == pytest.approx(prediction.exposed_seconds, rel=1e-9)
        assert lane.get("bubble", 0.0) == pytest.approx(prediction.bubble_seconds, rel=1e-9)
    assert any(c.mode in ("ep", "tp") and c.exposed_seconds > 0 for c in estimate.communication)
    ms = {kind for kind, _s, _d in step_picture(estimate)["panels"][1]["compute"]}
    assert "stall" in ms
