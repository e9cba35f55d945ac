"""A published model's own accuracy figures (``estimate/accuracy.py``): which model a job's
model is, what its line says, and how ``benchmarks/predict_published.py`` writes the figures.

The shipped ``accuracy.json`` is held to what the current code measures by
``tests/unit_tests/test_predict_published.py``; here its per-model entries are read as the
estimate reads them.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from megatron.bridge.recipes import plan_recipe
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.accuracy import (
    ACCURACY_FILE,
    ARCHITECTURE_FIELDS,
    ModelAccuracy,
    architecture,
    measured_accuracy,
)
from megatron.bridge.training.job import ModelDescription
from tests.unit_tests.jobs import recipe_job_model
from tests.unit_tests.repo_scripts import load_script

predict_published = load_script("benchmarks/predict_published.py")

MODELS = json.loads(ACCURACY_FILE.read_text(encoding="utf-8"))["models"]


def _entry(recipe: str, changes: dict | None = None) -> dict:
    (entry,) = [m for m in MODELS if m["recipes"] == [recipe] and m["changes"] == (changes or {})]
    return entry


def test_every_architecture_field_is_a_model_field_and_none_is_how_it_is_trained():
    names = {f.name for f in dataclasses.fields(ModelDescription)}
    assert set(ARCHITECTURE_FIELDS) <= names
    assert len(set(ARCHITECTURE_FIELDS)) == len(ARCHITECTURE_FIELDS)
    trained = {
        "seq_length",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
        "sequence_parallel",
        "fp8",
        "fp8_recipe",
        "recompute_granularity",
        "recompute_modules",
        "hidden_dropout",
        "moe_grouped_gemm",
        "moe_token_dispatcher_type",
        "cuda_graph_impl",
    }
    assert not trained & set(ARCHITECTURE_FIELDS)


def test_a_published_model_reads_its_own_rows_figures():
    model = recipe_job_model("gpt_oss_120b")
    entry = _entry("gpt_oss_120b")
    assert entry["architecture"] == architecture(model)
    own = measured_accuracy(model).model
    assert own == ModelAccuracy(
        ("gpt_oss_120b",),
        {},
        entry["rows"],
        entry["median_abs_error"],
        entry["median_signed_error"],
        entry["out_of_group"]["median_abs_error"],
    )
    assert own.rows > 0 and own.median_signed_error > 0
    line = measured_accuracy(model).line()
    assert line.endswith(
        f"; this model (gpt_oss_120b): off by {own.median_abs_error:.1%} median (signed "
        f"{own.median_signed_error:+.1%}) over its {own.rows} published rows, "
        f"{own.out_of_group_median_abs_error:.1%} with them left out of the fit"
    )
    # The family's figure comes first, as for every model.
    assert line.startswith("measured accuracy: tokens/s/GPU off by")


@pytest.mark.parametrize(
    "changes",
    [
        {"seq_length": 8192},
        {"tensor_model_parallel_size": 2, "sequence_parallel": True},
        {"expert_model_parallel_size": 8},
        {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
        {"fp8": "hybrid", "fp8_recipe": "mxfp8"},
    ],
)
def test_how_the_model_is_trained_keeps_it_the_published_model(changes):
    model = recipe_job_model("gpt_oss_120b")
    assert measured_accuracy(dataclasses.replace(model, **changes)).model == (
        measured_accuracy(model).model
    )


@pytest.mark.parametrize(
    "changes",
    [{"num_layers": 24}, {"hidden_size": 4096}, {"num_moe_experts": 64}, {"window_size": None}],
)
def test_another_architecture_is_no_published_model(changes):
    model = dataclasses.replace(recipe_job_model("gpt_oss_120b"), **changes)
    measured = measured_accuracy(model)
    assert measured.model is None
    assert "this model" not in measured.line()
    assert measured.to_dict()["model"] is None
    # The family's figures stay.
    assert measured.rows == measured_accuracy(recipe_job_model("gpt_oss_120b")).rows


def test_a_published_model_unlike_its_recipe_is_named_by_the_difference():
    entry = _entry("deepseek_v3", {"mtp_num_layers": None})
    model = recipe_job_model("deepseek_v3", mtp_num_layers=None)
    own = measured_accuracy(model).model
    assert own.name == "deepseek_v3 with mtp_num_layers None"
    assert own.rows == entry["rows"]
    assert "this model (deepseek_v3 with mtp_num_layers None)" in measured_accuracy(model).line()
    assert own != measured_accuracy(recipe_job_model("deepseek_v3")).model


def test_the_words_say_what_is_measured():
    held_only = ModelAccuracy(("llama3_8b",), {}, 0, None, None, 0.05)
    assert held_only.words() == "this model (llama3_8b): 5.0% with them left out of the fit"
    one = ModelAccuracy(("a", "b"), {}, 1, 0.1, -0.1)
    assert (
        one.words()
        == "this model (a, b): off by 10.0% median (signed -10.0%) over its 1 published row"
    )
    assert one.to_dict() == {
        "recipes": ["a", "b"],
        "changes": {},
        "rows": 1,
        "median_abs_error": 0.1,
        "median_signed_error": -0.1,
        "out_of_group_median_abs_error": None,
    }


def test_explain_prints_the_models_own_figures():
    estimate = estimate_step(plan_recipe("gpt_oss_120b"))
    assert estimate.accuracy.model is not None
    assert estimate.accuracy.line() in estimate.render().splitlines()
    assert estimate.to_dict()["accuracy"]["model"]["recipes"] == ["gpt_oss_120b"]


def test_the_accuracy_document_groups_rows_by_architecture():
    base = recipe_job_model("llama3_8b")
    deeper = dataclasses.replace(base, num_layers=base.num_layers + 8)

    def prediction(model, published, predicted, fitted=False):
        row = {
            "model": "llama3_8b",
            "release": "26.02",
            "system": "DGX-H100",
            "precision": "FP8",
            "gbs": 128,
            "tokens_per_s_per_gpu": published,
        }
        key = json.dumps(architecture(model), sort_keys=True)
        return predict_published.Prediction(row, predicted, None, "dense", fitted, key)

    predictions = [
        prediction(base, 100.0, 110.0),  # +10 %
        prediction(base, 100.0, 70.0),  # -30 %
        prediction(base, 100.0, 300.0, fitted=True),  # fitted: left out of the medians
        prediction(deeper, 100.0, 95.0),  # -5 %, another model
    ]
    held = [dataclasses.replace(p, fitted=False) for p in predictions]
    doc = predict_published.accuracy_document(predictions, held)
    first, second = doc["models"]
    assert first["recipes"] == second["recipes"] == ["llama3_8b"]
    assert first["changes"] == {} and first["architecture"] == architecture(base)
    assert (first["rows"], first["median_abs_error"], first["median_signed_error"]) == (
        2,
        0.2,
        -0.1,
    )
    # Out of group the fitted row counts: |errors| 0.1, 0.3, 2.0.
    assert first["out_of_group"] == {
        "rows": 3,
        "median_abs_error": 0.3,
        "median_signed_error": 0.1,
    }
    assert second["changes"] == {"num_layers": base.num_layers + 8}
    assert (second["rows"], second["median_signed_error"]) == (1, -0.05)
