"""Every published pre-training row (``data/published_rows.yaml``) through its recipe and its flags.

For each row: the recipe at the row's system and precision plans with exit 0, gives the row's
layout, and its model FLOPs per token are within 1% of the published figures' (TFLOP/s/GPU x
10^12 / tokens/s/GPU); the same job given as ``explain`` flags plans identically.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.cli.flags import FLAG_FIELDS, REFERENCE
from megatron.bridge.cli.parser import build_parser
from megatron.bridge.recipes import RECIPES, plan_recipe, recipe_spec
from megatron.bridge.training import hardware
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.precisions import published_precision

ALL_ROWS = yaml.safe_load((Path(__file__).parent / "data" / "published_rows.yaml").read_text())


def _release(text: str) -> tuple[int, ...]:
    # "26.04.01" -> (26, 4, 1): releases in the order they shipped.
    return tuple(int(part) for part in text.split("."))


#: The rows the recipes run: each model's rows of the newest release that publishes the model
#: (the archive's older rows ran older layouts and software; benchmarks/predict_published.py
#: sets its prediction beside every row).
ROWS = [
    row
    for row in ALL_ROWS
    if row["release"]
    == max((r["release"] for r in ALL_ROWS if r["model"] == row["model"]), key=_release)
]

#: Published models with rows and no recipe here, and why.
NO_RECIPE: dict[str, str] = {}

#: Rows whose model FLOPs per token miss the published figure by more than 1%, with the gap
#: measured against ModelCost.flops_per_token.
FLOPS_GAPS: dict[str, str] = {
    # The 26.08 figures imply 1.3% more FLOPs per token than the same model's rows of 26.06
    # (GB300 885/39749 and GB200 747/33522 TFLOP/s over tokens/s: 22.27 and 22.28 GFLOP/token),
    # and Nemotron 3.5 Lightning (Nano with two MTP depths) agrees to 0.01% in 26.08.
    "nemotron_3_nano-gb300-MXFP8-26.08": "ours 22.28 GFLOP/token vs 22.56 published (-1.25%)",
    # The published H100 row's figures imply 2.2% fewer FLOPs per token than the same model's
    # GB300/GB200 rows of the same release (447.4-452.7 GFLOP/token).
    "llama3_70b-h100-FP8-26.04.01": "ours 449.24 GFLOP/token vs 439.30 published (+2.26%)",
    # The GB200 row's figures (923/2528) imply 1.2% more FLOPs per token than the GB300 row of
    # the same model and release (1281/3552: 360.64 GFLOP/token, ours -0.48%); the padded
    # vocabulary is the same at TP2, so no one count can sit within 1% of both.
    "nemotron_3_ultra-gb200-MXFP8-26.08": "ours 358.91 GFLOP/token vs 365.11 published (-1.70%)",
}


def _row_id(row: dict) -> str:
    return f"{row['model']}-{row['system'].removeprefix('DGX-').lower()}-{row['precision']}-{row['release']}"


def _params(gaps: dict[str, str] | None = None) -> list:
    params = []
    for row in ROWS:
        reason = NO_RECIPE.get(row["model"]) or (gaps or {}).get(_row_id(row))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(row, id=_row_id(row), marks=marks))
    return params


def _gpu(row: dict) -> str:
    return hardware.system_gpu(row["system"]).name


def _picks(row: dict) -> dict[str, str]:
    return {"gpu": _gpu(row), "precision": published_precision(row["precision"])}


def _explain(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["explain", "--json", *argv]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def test_the_data_holds_every_row_once():
    ids = [_row_id(row) for row in ROWS]
    assert len(ids) == len(set(ids)) == 40
    assert {row["model"] for row in ROWS} - set(RECIPES) == set(NO_RECIPE)


@pytest.mark.parametrize("row", _params())
def test_recipe_plans_the_row_with_its_layout(row, capsys):
    picks = _picks(row)
    doc = _explain(
        capsys, "--recipe", row["model"], "--gpu", picks["gpu"], "--precision", picks["precision"]
    )
    layout = doc["layout"]
    assert (layout["gpu"], layout["compute_dtype"]) == (picks["gpu"], picks["precision"])
    assert {k: layout[k] for k in ("world_size", "tp", "pp", "vpp", "cp", "ep")} == {
        "world_size": row["gpus"],
        "tp": row["tp"],
        "pp": row["pp"],
        "vpp": row["vp"],
        "cp": row["cp"],
        "ep": row["ep"],
    }
    assert (layout["seq_length"], layout["micro_batch_size"]) == (row["seq_length"], row["mbs"])
    if "etp" in row:
        assert layout["etp"] == row["etp"]
    plan = plan_recipe(row["model"], **picks)
    assert plan.job.global_batch_size == row["gbs"]
    assert plan.job.model.pipeline_model_parallel_layout == row.get("pipeline_layout")
    assert plan.job.use_megatron_fsdp is row["fsdp"]


@pytest.mark.parametrize("row", _params(FLOPS_GAPS))
def test_model_flops_per_token_match_the_published_figures(row):
    spec = recipe_spec(row["model"], **_picks(row))
    ours = ModelCost(spec.job.model).flops_per_token(spec.job.tp_size)
    implied = row["model_tflops_per_gpu"] * 1e12 / row["tokens_per_s_per_gpu"]
    assert ours == pytest.approx(implied, rel=0.01)


def _explain_actions() -> dict[str, list[argparse.Action]]:
    # The explain parser's actions by destination (a destination can have several spellings).
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    actions: dict[str, list[argparse.Action]] = {}
    for action in sub.choices["explain"]._actions:
        actions.setdefault(action.dest, []).append(action)
    return actions


def _spelled(dest: str, value) -> list[str]:
    # The arguments that give ``dest`` the value ``value``, as the parser takes them.
    for action in _explain_actions()[dest]:
        if isinstance(action, argparse.BooleanOptionalAction):
            return [action.option_strings[0 if value else 1]]
        if action.nargs == 0:
            if action.const == value:
                return [action.option_strings[0]]
            continue
        if action.nargs in ("*", "+"):
            return [action.option_strings[0], *map(str, value)]  # --recompute-modules A B
        if dest == "window_size":
            value = ",".join(map(str, value))  # --window-size LEFT,RIGHT
        elif isinstance(value, tuple):
            # A per-layer tuple as Megatron-LM's list expression.
            value = "[" + ", ".join(map(str, value)) + "]"
        return [action.option_strings[0], str(value)]
    raise AssertionError(f"explain has no flag that sets {dest}={value!r}")


def _flag_args(spec) -> list[str]:
    # The job as explain flags: every field FLAG_FIELDS maps whose value differs from the
    # reference job's, spelled as the parser takes it.
    job, reference = spec.job, REFERENCE.job
    args: list[str] = []
    for flag, field in FLAG_FIELDS.items():
        if field in ("preset", "tp_comm_overlap"):
            continue
        if field.startswith("model."):
            value = getattr(job.model, field.removeprefix("model."))
            default = getattr(reference.model, field.removeprefix("model."))
        else:
            value = getattr(spec, field) if field == "precision" else getattr(job, field)
            default = getattr(REFERENCE if field == "precision" else reference, field)
        if value == default:
            continue
        if value is None:
            # Only the interleaving flag says "none" in a value: --vpp 1.
            assert flag == "vpp", f"--{flag} cannot say None"
            value = 1
        args += _spelled(flag, value)
    activation = job.model.activation_func
    if activation == "quick_gelu":
        args = [a for a in args if a != "--swiglu"] + ["--quick-geglu"]
    elif activation == "squared_relu":
        args.append("--squared-relu")
    if job.model.share_embeddings_and_output_weights != (
        reference.model.share_embeddings_and_output_weights
    ):
        # Megatron-LM's flag says the opposite of the field it sets.
        args += _spelled(
            "untie_embeddings_and_output_weights",
            not job.model.share_embeddings_and_output_weights,
        )
    return args


def _unflagged(spec) -> list[str]:
    # Model fields the recipe sets away from the reference that no flag reaches.
    flagged = {f.removeprefix("model.") for f in FLAG_FIELDS.values()}
    reference = REFERENCE.job.model
    return sorted(
        name
        for name in type(spec.job.model).__dataclass_fields__
        if name not in flagged
        and getattr(spec.job.model, name) != getattr(reference, name)
        and name not in ("bf16", "fp16", "fp8", "fp8_recipe", "fp4", "fp4_recipe")
        # --swiglu sets the activation with gated_linear_unit; --untie-embeddings-and-output-weights
        # the embedding sharing.
        and name not in ("activation_func", "share_embeddings_and_output_weights")
    )


def _flags_params() -> list:
    params = []
    for row in ROWS:
        reason = NO_RECIPE.get(row["model"])
        if reason is None:
            missing = _unflagged(recipe_spec(row["model"], **_picks(row)))
            if missing:
                reason = f"no explain flag for {', '.join(missing)}"
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(row, id=_row_id(row), marks=marks))
    return params


@pytest.mark.parametrize("row", _flags_params())
def test_the_row_as_flags_plans_identically(row, capsys):
    picks = _picks(row)
    spec = recipe_spec(row["model"], **picks)
    from_recipe = _explain(
        capsys, "--recipe", row["model"], "--gpu", picks["gpu"], "--precision", picks["precision"]
    )
    from_flags = _explain(capsys, *_flag_args(spec))
    for doc in (from_recipe, from_flags):
        doc.pop("recipe")
        doc["preset"].pop("source", None)
        doc["preset"].pop("detail", None)
    assert from_flags == from_recipe


def test_recipes_lists_each_recipe_with_its_systems_and_precisions(capsys):
    capsys.readouterr()
    assert main(["recipes", "--json"]) == EXIT_OK
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)["recipes"]}
    for name in RECIPES:
        pairs = [(r["gpu"], r["precision"]) for r in listed[name]["published"]]
        assert pairs == list(recipe_spec(name).published_pairs)
    for row in ROWS:
        if row["model"] in RECIPES:
            picks = _picks(row)
            assert (picks["gpu"], picks["precision"]) in recipe_spec(row["model"]).published_pairs
