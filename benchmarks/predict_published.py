"""Predicted tokens/s/GPU beside every published pre-training row, and how far off it is.

    uv run python benchmarks/predict_published.py [--json] [--write-accuracy] [--fit]

Reads every published pre-training row (``tests/unit_tests/recipes/data/published_rows.yaml``,
written by ``scripts/published_rows.py`` from Megatron-Bridge's current and archived release
tables). Each row is planned through its model's recipe at the row's GPU and precision with the
row's own layout (GPU count, batch sizes, sequence length, TP/PP/VP/CP/EP/ETP, Megatron-FSDP,
pipeline layout) given as job changes, the route ``bridge-overlap explain --recipe`` takes for
flags, with the two settings the data file reads from each release's perf configuration (the
experts' fused grouped MLP, EP overlap); everything else the tables leave out (recompute,
dispatcher) stays the recipe's. The step estimate then predicts its tokens/s/GPU. A row is
predicted or carries the reason it is not (no recipe for its model, a setting the tables do not
publish, a layout the plan refuses).

The report: one line per row; the median error per group (model, GPU, precision, release), per
model, per model family (:func:`~megatron.bridge.training.estimate.accuracy.model_family`) and per release
(signed: how much older software differs); the median |error| over every row and over the two
newest releases; the worst ten; and the same medians per family and per model out of group: each
(model, GPU, precision) group predicted with every constant fitted on its rows refit, by the
same rule, without them (:func:`predict_out_of_group`). Rows a constant of the estimate was fitted on
(:data:`~megatron.bridge.training.estimate.efficiency.FIT_ROWS`,
:data:`~megatron.bridge.training.estimate.kernels.UNFUSED_FIT_ROWS`,
:data:`~megatron.bridge.training.estimate.kernels.SSM_FIT_ROWS`,
:data:`~megatron.bridge.training.estimate.kernels.SPARSE_ATTENTION_FIT_ROWS`) are marked and
left out of every median. ``--json`` prints the same as one document. ``--write-accuracy``
writes the family figures, and each published model's (its architecture's), into
``megatron/bridge/training/estimate/accuracy.json``, which every estimate prints. ``--fit`` prints instead, for each fitted row planned as it ran, the
achievable fraction, the unfused experts' bytes per routed element, or the Mamba scan's or
DeepSeek-V4's attention kernels' share of the BF16 peak for which its prediction equals the
published figure (bisection), in the order the constants depend on each other. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from megatron.bridge.recipes import RECIPES, plan_recipe, recipe_spec
from megatron.bridge.recipes.published import offload_fields, recompute_fields, run
from megatron.bridge.training import hardware
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.accuracy import (
    ACCURACY_FILE,
    FAMILIES,
    architecture,
    model_family,
)
from megatron.bridge.training.estimate.efficiency import (
    ACHIEVABLE,
    FIT_ROWS,
    Achievable,
    FitRow,
    achievable_fraction,
)
from megatron.bridge.training.estimate.kernels import (
    SPARSE_ATTENTION,
    SPARSE_ATTENTION_FIT_ROWS,
    SSM_FIT_ROWS,
    SSM_SCAN,
    UNFUSED_EXPERTS,
    UNFUSED_FIT_ROWS,
    fused_expert_kernel,
    generation,
    tensor_core_format,
)
from megatron.bridge.training.precisions import published_precision

ROOT = Path(__file__).resolve().parent.parent
ROWS_FILE = ROOT / "tests" / "unit_tests" / "recipes" / "data" / "published_rows.yaml"

#: Rows of a release ranked among the newest of the report.
NEWEST_RELEASES = 2
#: Rows in the worst list.
WORST = 10


@dataclass(frozen=True)
class Prediction:
    """One published row and what the estimate predicts for it."""

    row: dict
    """The published row, as the data file has it."""
    predicted: float | None
    """Predicted tokens/s/GPU; None when the row is not predicted (see :attr:`reason`)."""
    reason: str | None = None
    """Why the row is not predicted; None when it is."""
    family: str | None = None
    """The model's family (:func:`model_family`); None without a recipe."""
    fitted: bool = False
    """A constant of the estimate was fitted on this row."""
    architecture: str | None = None
    """Which model it is (:func:`architecture`, as sorted JSON); None without a recipe."""

    @property
    def label(self) -> str:
        """The row as the report names it: model, system, precision, release (and GBS when
        the release publishes two runs that differ only in it)."""
        r = self.row
        return f"{r['model']} {r['system']} {r['precision']} ({r['release']}, GBS {r['gbs']})"

    @property
    def error(self) -> float | None:
        """(predicted - published) / published; None when not predicted."""
        if self.predicted is None:
            return None
        return self.predicted / self.row["tokens_per_s_per_gpu"] - 1.0

    @property
    def measured(self) -> bool:
        """Counted in the medians: predicted and not fitted on."""
        return self.predicted is not None and not self.fitted


def load_rows(path: Path = ROWS_FILE) -> list[dict]:
    """The published rows of the data file."""
    return yaml.safe_load(path.read_text())


def release_key(release: str) -> tuple[int, ...]:
    """A release in shipping order: "26.04.01" -> (26, 4, 1)."""
    return tuple(int(part) for part in release.split("."))


def gpu_of(row: dict) -> str:
    """The catalogue's name of the row's GPU."""
    return hardware.system_gpu(row["system"]).name


def fitted(row: dict) -> bool:
    """Whether a constant of the estimate was fitted on ``row`` (:data:`FIT_ROWS`,
    :data:`~megatron.bridge.training.estimate.kernels.SSM_FIT_ROWS`,
    :data:`~megatron.bridge.training.estimate.kernels.UNFUSED_FIT_ROWS`,
    :data:`~megatron.bridge.training.estimate.kernels.SPARSE_ATTENTION_FIT_ROWS`)."""
    key = (
        row["model"],
        gpu_of(row),
        published_precision(row["precision"]),
        row["release"],
        row["tokens_per_s_per_gpu"],
    )
    return any(
        (f.model, f.gpu, f.precision, f.release, f.tokens_per_s_per_gpu) == key for f in fit_rows()
    )


def fit_rows() -> tuple[FitRow, ...]:
    """Every row a constant of the estimate is fitted on."""
    return (
        *FIT_ROWS.values(),
        *SSM_FIT_ROWS.values(),
        *UNFUSED_FIT_ROWS.values(),
        *SPARSE_ATTENTION_FIT_ROWS.values(),
    )


def row_changes(row: dict) -> dict[str, Any]:
    """The row's layout as job changes on top of its recipe (:func:`plan_recipe`'s ``changes``).

    The sizes, batch sizes and Megatron-FSDP are a published run's (:func:`run`), and so is
    whether its experts ran the fused grouped MLP (the row's ``fused_grouped_mlp``, read from
    the perf configuration of the row's release); the recompute and activation offloading of the
    recipe's run on the row's GPU stay, since the tables publish neither. ``mtp: false`` (a run
    without MTP) drops the MTP layers. A row's ``ep_overlap`` (from the same configuration) sets
    ``overlap_moe_expert_parallel_comm`` beside the recipe's own overlap fields; a row without it
    keeps the recipe's.
    """
    published = run(
        row["system"],
        published_precision(row["precision"]),
        gpus=row["gpus"],
        gbs=row["gbs"],
        mbs=row["mbs"],
        tp=row["tp"],
        pp=row["pp"],
        vp=row["vp"],
        cp=row["cp"],
        ep=row["ep"],
        etp=row.get("etp"),
        layout=row.get("pipeline_layout"),
        fsdp=row["fsdp"],
        fuser=row.get("fused_grouped_mlp", False),
        hsdp=(row["hsdp_groups"], row["outer_dp_sharding_strategy"])
        if "hsdp_groups" in row
        else None,
        source=row["source"],
    )
    recipe_own = {f"model.{field}" for field in (*recompute_fields(""), *offload_fields(""))}
    changes = {k: v for k, v in published.changes.items() if k not in recipe_own}
    changes["model.seq_length"] = row["seq_length"]
    if row.get("mtp") is False:
        changes["model.mtp_num_layers"] = None
    if "ep_overlap" in row:
        spec = recipe_spec(row["model"]) if row["model"] in RECIPES else None
        overlap = dict(spec.overlap) if spec is not None else {}
        overlap["overlap_moe_expert_parallel_comm"] = row["ep_overlap"]
        changes["overlap"] = tuple(overlap.items())
    return changes


def predict(row: dict) -> Prediction:
    """The estimate's tokens/s/GPU for ``row``, or the reason there is none."""
    if row.get("reason"):
        return Prediction(row, None, row["reason"])
    if row["model"] not in RECIPES:
        return Prediction(row, None, f"no recipe for {row['model']}")
    try:
        plan = plan_recipe(
            row["model"],
            gpu=gpu_of(row),
            precision=published_precision(row["precision"]),
            changes=row_changes(row),
        )
        estimate = estimate_step(plan)
    except ValueError as exc:
        return Prediction(row, None, f"the plan refuses the layout: {str(exc).splitlines()[0]}")
    return Prediction(
        row,
        estimate.prediction.tokens_per_s_per_gpu,
        family=model_family(plan.job.model),
        architecture=json.dumps(architecture(plan.job.model), sort_keys=True),
        fitted=fitted(row),
    )


# --- the report ---------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float | None:
    """The median of ``values``; None when there are none."""
    values = list(values)
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class Summary:
    """The medians of one set of rows (predicted and not fitted on)."""

    rows: int
    """Rows measured."""
    median_abs_error: float | None
    """Median |error|."""
    median_signed_error: float | None
    """Median error (positive: the estimate is optimistic)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "rows": self.rows,
            "median_abs_error": self.median_abs_error,
            "median_signed_error": self.median_signed_error,
        }


def summarize(predictions: Iterable[Prediction]) -> Summary:
    """The medians over the measured rows of ``predictions``."""
    errors = [p.error for p in predictions if p.measured]
    return Summary(len(errors), median(abs(e) for e in errors), median(errors))


def grouped(
    predictions: Iterable[Prediction], key: Callable[[Prediction], Any]
) -> dict[Any, Summary]:
    """:func:`summarize` per value of ``key``, over groups with at least one measured row, in
    the order the groups first appear."""
    groups: dict[Any, list[Prediction]] = {}
    for p in predictions:
        if p.measured:
            groups.setdefault(key(p), []).append(p)
    return {k: summarize(v) for k, v in groups.items()}


def group_key(p: Prediction) -> tuple[str, str, str, str]:
    """(model, GPU, precision, release) of a row."""
    r = p.row
    return (r["model"], gpu_of(r), r["precision"], r["release"])


def newest_releases(predictions: Iterable[Prediction], n: int = NEWEST_RELEASES) -> list[str]:
    """The ``n`` newest releases among the rows."""
    return sorted({p.row["release"] for p in predictions}, key=release_key)[-n:]


def worst(predictions: Iterable[Prediction], n: int = WORST) -> list[Prediction]:
    """The ``n`` measured rows with the largest |error|, largest first."""
    return sorted((p for p in predictions if p.measured), key=lambda p: -abs(p.error))[:n]


def out_of_group_report(out_of_group: list[Prediction], refits: list[OutOfGroup]) -> dict[str, Any]:
    """The leave-one-group-out figures (:func:`predict_out_of_group`): medians over every row,
    per family and per model, and what each group's refit was."""
    return {
        "overall": summarize(out_of_group).to_dict(),
        "families": {k: v.to_dict() for k, v in grouped(out_of_group, lambda p: p.family).items()},
        "models": {
            k: v.to_dict() for k, v in grouped(out_of_group, lambda p: p.row["model"]).items()
        },
        "refits": [{"group": list(r.group), "refit": r.note} for r in refits],
    }


def report(
    predictions: list[Prediction],
    out_of_group: tuple[list[Prediction], list[OutOfGroup]] | None = None,
) -> dict[str, Any]:
    """Every figure of the report as one JSON-ready document (with ``out_of_group``, the
    leave-one-group-out figures beside the in-sample ones)."""
    newest = newest_releases(predictions)
    by_release = grouped(predictions, lambda p: p.row["release"])
    extra = {} if out_of_group is None else {"out_of_group": out_of_group_report(*out_of_group)}
    return {
        "rows": [
            {
                "label": p.label,
                "model": p.row["model"],
                "gpu": gpu_of(p.row),
                "precision": p.row["precision"],
                "release": p.row["release"],
                "family": p.family,
                "published": p.row["tokens_per_s_per_gpu"],
                "predicted": p.predicted,
                "error": p.error,
                "fitted": p.fitted,
                "reason": p.reason,
            }
            for p in predictions
        ],
        "predicted": sum(p.predicted is not None for p in predictions),
        "fitted": sum(p.fitted for p in predictions),
        "overall": summarize(predictions).to_dict(),
        "newest_releases": {
            "releases": newest,
            **summarize(p for p in predictions if p.row["release"] in newest).to_dict(),
        },
        "families": {k: v.to_dict() for k, v in grouped(predictions, lambda p: p.family).items()},
        "models": {
            k: v.to_dict() for k, v in grouped(predictions, lambda p: p.row["model"]).items()
        },
        "releases": {
            k: by_release[k].to_dict() for k in sorted(by_release, key=release_key, reverse=True)
        },
        "groups": [
            {"model": m, "gpu": g, "precision": pr, "release": rel, **s.to_dict()}
            for (m, g, pr, rel), s in grouped(predictions, group_key).items()
        ],
        "worst": [p.label for p in worst(predictions)],
        **extra,
    }


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def _summary_rows(title: str, summaries: dict[Any, Summary]) -> list[str]:
    lines = [
        "",
        f"| {title} | rows | median abs error | median error |",
        "|---|---:|---:|---:|",
    ]
    for key, s in summaries.items():
        name = " ".join(key) if isinstance(key, tuple) else str(key)
        lines.append(
            f"| {name} | {s.rows} | {_pct(s.median_abs_error)} | "
            f"{_pct(s.median_signed_error, signed=True)} |"
        )
    return lines


def table(
    predictions: list[Prediction],
    out_of_group: tuple[list[Prediction], list[OutOfGroup]] | None = None,
) -> str:
    """The report as markdown: the rows, the medians by group, model, family and release, the
    worst; with ``out_of_group``, the leave-one-group-out medians by family and model."""
    lines = [
        "| row | layout | predicted tok/s/GPU | published tok/s/GPU | error |",
        "|---|---|---:|---:|---:|",
    ]
    for p in predictions:
        r = p.row
        layout = (
            f"{r['gpus']} GPUs TP{r['tp']} PP{r['pp']} VP{r['vp'] or '-'} CP{r['cp']} "
            f"EP{r['ep']}{' FSDP' if r['fsdp'] else ''} MBS{r['mbs']}"
        )
        published = f"{r['tokens_per_s_per_gpu']:.0f}"
        if p.predicted is None:
            lines.append(f"| {p.label} | {layout} | {p.reason} | {published} | |")
            continue
        mark = " (fit)" if p.fitted else ""
        lines.append(
            f"| {p.label}{mark} | {layout} | {p.predicted:.0f} | {published} | {p.error:+.1%} |"
        )
    overall = summarize(predictions)
    newest = newest_releases(predictions)
    recent = summarize(p for p in predictions if p.row["release"] in newest)
    by_release = grouped(predictions, lambda p: p.row["release"])
    lines += _summary_rows("model, GPU, precision, release", grouped(predictions, group_key))
    lines += _summary_rows("model", grouped(predictions, lambda p: p.row["model"]))
    lines += _summary_rows("family", grouped(predictions, lambda p: p.family))
    lines += _summary_rows(
        "release", {k: by_release[k] for k in sorted(by_release, key=release_key, reverse=True)}
    )
    lines += [
        "",
        f"Rows: {len(predictions)}; predicted {sum(p.predicted is not None for p in predictions)}; "
        f"fitted on (left out of the medians) {sum(p.fitted for p in predictions)}.",
        f"Median |error| over the {overall.rows} measured rows: "
        f"{_pct(overall.median_abs_error)} (median error "
        f"{_pct(overall.median_signed_error, signed=True)}).",
        f"Median |error| over the {recent.rows} measured rows of the newest releases "
        f"({', '.join(newest)}): {_pct(recent.median_abs_error)}.",
        "",
        f"Worst {WORST}:",
    ]
    lines += [f"- {p.label}: {p.error:+.1%}" for p in worst(predictions)]
    if out_of_group is not None:
        held_out, refits = out_of_group
        everything = summarize(held_out)
        lines += [
            "",
            "Leave one group out: each (model, GPU, precision) group predicted with the "
            "constants fitted on its rows refit without them.",
        ]
        lines += _summary_rows("family, out of group", grouped(held_out, lambda p: p.family))
        lines += _summary_rows("model, out of group", grouped(held_out, lambda p: p.row["model"]))
        lines += [
            "",
            f"Median |error| out of group over the {everything.rows} rows: "
            f"{_pct(everything.median_abs_error)} (in sample {_pct(overall.median_abs_error)}).",
            "",
            "Refits:",
        ]
        lines += [f"- {' '.join(r.group)}: {r.note}" for r in refits]
    return "\n".join(lines)


def accuracy_document(
    predictions: list[Prediction], out_of_group: list[Prediction] | None = None
) -> dict[str, Any]:
    """What ``accuracy.json`` holds, every figure rounded to 0.1 %: per family the medians over
    its measured rows (the figure every estimate prints), and for the docs the medians over
    every measured row, over the newest releases' and per release; per published model (one
    :func:`architecture`: the recipes whose rows are of it, and the fields where it differs from
    the first recipe's model), the medians over its rows, which an estimate of that model prints
    too; with ``out_of_group`` (:func:`predict_out_of_group`) the same medians per family, per
    model and overall out of group."""

    def rounded(s: Summary) -> dict[str, Any]:
        return {
            "rows": s.rows,
            "median_abs_error": None
            if s.median_abs_error is None
            else round(s.median_abs_error, 3),
            "median_signed_error": (
                None if s.median_signed_error is None else round(s.median_signed_error, 3)
            ),
        }

    families = grouped(predictions, lambda p: p.family)
    by_release = grouped(predictions, lambda p: p.row["release"])
    newest = newest_releases(predictions)
    held = {} if out_of_group is None else grouped(out_of_group, lambda p: p.family)

    def family(f: str) -> dict[str, Any]:
        figures = rounded(families[f])
        if f in held:
            figures["out_of_group"] = rounded(held[f])
        return figures

    by_model = {
        key: [p for p in predictions if p.architecture == key] for key in _models(predictions)
    }
    held_by_model = {} if out_of_group is None else grouped(out_of_group, lambda p: p.architecture)

    def model(key: str) -> dict[str, Any]:
        recipes = sorted({p.row["model"] for p in by_model[key]})
        fields = json.loads(key)
        own = architecture(recipe_spec(recipes[0]).job.model)
        figures = {
            "recipes": recipes,
            "changes": {k: v for k, v in fields.items() if own[k] != v},
            "architecture": fields,
            **rounded(summarize(by_model[key])),
        }
        if key in held_by_model:
            figures["out_of_group"] = rounded(held_by_model[key])
        return figures

    return {
        "written_by": "benchmarks/predict_published.py --write-accuracy",
        "rows_file": "tests/unit_tests/recipes/data/published_rows.yaml",
        "families": {f: family(f) for f in FAMILIES if f in families},
        "models": sorted((model(key) for key in by_model), key=lambda m: m["recipes"]),
        "overall": rounded(summarize(predictions)),
        **({} if out_of_group is None else {"out_of_group": rounded(summarize(out_of_group))}),
        "newest_releases": {
            "releases": newest,
            **rounded(summarize(p for p in predictions if p.row["release"] in newest)),
        },
        "releases": {
            r: rounded(by_release[r]) for r in sorted(by_release, key=release_key, reverse=True)
        },
    }


def fit(row: FitRow) -> float:
    """The achievable fraction for which ``row``'s prediction, as it ran, is its published one."""
    plan = published_plan(row)
    return _bisect(
        row,
        0.01,
        1.0,
        lambda fraction: (
            estimate_step(
                plan, achievable=Achievable(fraction, "bisection")
            ).prediction.tokens_per_s_per_gpu
        ),
    )


def data_row(row: FitRow, rows: list[dict] | None = None) -> dict:
    """The data file's row that the fitted row ``row`` names, among ``rows`` (default: the data
    file's, read now)."""
    (found,) = [
        r
        for r in (load_rows() if rows is None else rows)
        if (r["model"], gpu_of(r), published_precision(r["precision"]), r["release"])
        == (row.model, row.gpu, row.precision, row.release)
        and r["tokens_per_s_per_gpu"] == row.tokens_per_s_per_gpu
    ]
    return found


def published_plan(row: FitRow):
    """The plan of the published row ``row`` names, as it ran (:func:`row_changes`)."""
    changes = row_changes(data_row(row))
    return plan_recipe(row.model, gpu=row.gpu, precision=row.precision, changes=changes)


def _bisect(row: FitRow, low: float, high: float, predict_at: Callable[[float], float]) -> float:
    """The value in [low, high] at which ``predict_at`` (tokens/s/GPU, monotonic in the value)
    gives ``row``'s published figure (bisection, 40 halvings)."""
    rising = predict_at(high) > predict_at(low)
    for _ in range(40):
        mid = (low + high) / 2
        if (predict_at(mid) > row.tokens_per_s_per_gpu) == rising:
            high = mid
        else:
            low = mid
    return (low + high) / 2


def _fit_keyword(row: FitRow, keyword: str, low: float, high: float) -> float:
    """The value of :func:`estimate_step`'s ``keyword`` in [low, high] for which ``row``'s
    prediction, as it ran, is its published one."""
    plan = published_plan(row)
    return _bisect(
        row,
        low,
        high,
        lambda value: estimate_step(plan, **{keyword: value}).prediction.tokens_per_s_per_gpu,
    )


def fit_ssm(row: FitRow) -> float:
    """The SSM scan's share of the BF16 peak fitted on ``row``."""
    return _fit_keyword(row, "ssm_scan_fraction", 0.001, 1.0)


def fit_sparse_attention(row: FitRow) -> float:
    """DeepSeek-V4's attention kernels' share of the BF16 peak fitted on ``row``."""
    return _fit_keyword(row, "sparse_attention_fraction", 0.001, 1.0)


def fit_unfused(row: FitRow) -> float:
    """The bytes per routed token element of the experts outside the fused grouped MLP fitted
    on ``row``."""
    return _fit_keyword(row, "unfused_bytes", 0.0, 4096.0)


# --- leave one group out ------------------------------------------------------------------------
#
# Each constant of the estimate is fitted on one named row by a rule fixed before fitting (the
# Llama-3 70B row of a GPU and dtype, the Qwen3-30B-A3B rows of the unfused experts, ...). The
# check below asks whether that rule generalizes: for every group of rows (model, GPU, precision)
# each constant its rows use whose fit row is in the group is fitted again, by the same rule, on a
# row of another group, and the group's rows are predicted with it. A constant whose rule finds
# no other row falls back as the estimate does for a GPU without a fitted row.


@dataclass(frozen=True)
class FitConstant:
    """One fitted constant of the estimate: what kind, for which GPU (and dtype) or generation,
    and the row it is fitted on."""

    kind: str
    """achievable (per GPU and dtype), unfused, ssm or sparse (per GPU generation)."""
    key: Any
    """(gpu, dtype) for the achievable fraction, else the generation."""
    row: FitRow
    """The row it is fitted on."""


def fit_constants() -> tuple[FitConstant, ...]:
    """Every fitted constant of the estimate with its row."""
    return (
        *(FitConstant("achievable", k, r) for k, r in FIT_ROWS.items()),
        *(FitConstant("unfused", k, r) for k, r in UNFUSED_FIT_ROWS.items()),
        *(FitConstant("ssm", k, r) for k, r in SSM_FIT_ROWS.items()),
        *(FitConstant("sparse", k, r) for k, r in SPARSE_ATTENTION_FIT_ROWS.items()),
    )


def leave_out_key(row: dict) -> tuple[str, str, str]:
    """The group a row is left out with: (model, GPU, compute dtype), every release."""
    return (row["model"], gpu_of(row), published_precision(row["precision"]))


def _fit_key(row: FitRow) -> tuple[str, str, str]:
    return (row.model, row.gpu, row.precision)


def _row_plan(row: dict):
    """The plan of a data row as :func:`predict` makes it (ValueError where it refuses)."""
    return plan_recipe(
        row["model"],
        gpu=gpu_of(row),
        precision=published_precision(row["precision"]),
        changes=row_changes(row),
    )


def _uses(constant: FitConstant, row: dict, plan: Any) -> bool:
    """Whether ``constant``'s fitting rule could pick ``row`` (``plan``: its plan): a dense row
    of the GPU and dtype for the achievable fraction; on the generation, a MoE row (no MLA, no
    Mamba) in FP8/FP4 outside the fused grouped MLP, a hybrid row, or a sparse-attention row for
    the kernel constants."""
    model = plan.job.model
    family = model_family(model)
    gpu = hardware.gpu_spec(gpu_of(row))
    if constant.kind == "achievable":
        return family == "dense" and (gpu.name, plan.job.compute_dtype) == constant.key
    if generation(gpu) != constant.key:
        return False
    if constant.kind == "unfused":
        quantized = tensor_core_format(plan.job.compute_dtype) != "bf16"
        return family == "moe" and quantized and not fused_expert_kernel(model, gpu)
    return family == {"ssm": "hybrid", "sparse": "sparse_attention"}[constant.kind]


def _as_fit_row(row: dict) -> FitRow:
    return FitRow(
        model=row["model"],
        gpu=gpu_of(row),
        precision=published_precision(row["precision"]),
        release=row["release"],
        tokens_per_s_per_gpu=row["tokens_per_s_per_gpu"],
        source=row["source"],
    )


def plannable(rows: list[dict]) -> list[tuple[dict, Any]]:
    """The rows of ``rows`` a recipe plans, each with its plan (:func:`_row_plan`), planned once
    for every refit that picks among them."""
    out = []
    for row in rows:
        if row.get("reason") or row["model"] not in RECIPES:
            continue
        try:
            out.append((row, _row_plan(row)))
        except ValueError:
            continue
    return out


def replacement_row(
    constant: FitConstant, planned: list[tuple[dict, Any]], left_out: tuple[str, str, str]
) -> FitRow | None:
    """The row ``constant``'s rule picks once the group ``left_out`` is gone: among the planned
    rows (:func:`plannable`) of other groups it could be fitted on (:func:`_uses`), the fit row's
    model first, then the newest release, then the fit row's GPU; None when there is none."""
    candidates = [
        row
        for row, plan in planned
        if leave_out_key(row) != left_out and _uses(constant, row, plan)
    ]
    if not candidates:
        return None
    fit_row = constant.row
    best = min(
        candidates,
        key=lambda r: (
            r["model"] != fit_row.model,
            tuple(-part for part in release_key(r["release"])),
            gpu_of(r) != fit_row.gpu,
            -r["tokens_per_s_per_gpu"],
        ),
    )
    return _as_fit_row(best)


def refit(constant: FitConstant, row: FitRow) -> float:
    """``constant`` fitted on ``row`` by its bisection."""
    return {
        "achievable": fit,
        "unfused": fit_unfused,
        "ssm": fit_ssm,
        "sparse": fit_sparse_attention,
    }[constant.kind](row)


def _fallback(constant: FitConstant) -> dict[str, Any] | None:
    """The estimate's keyword for ``constant`` when no other row can fit it: the achievable
    fraction's fallback without it, or another generation's figure; None when there is none."""
    if constant.kind == "achievable":
        gpu, dtype = constant.key
        table = {k: v for k, v in ACHIEVABLE.items() if k != constant.key}
        return {"achievable": achievable_fraction(gpu, dtype, table=table)}
    table = {"unfused": UNFUSED_EXPERTS, "ssm": SSM_SCAN, "sparse": SPARSE_ATTENTION}[constant.kind]
    others = [v.value for gen, v in table.items() if gen != constant.key]
    if not others:
        return None
    return {_KEYWORD[constant.kind]: others[0]}


_KEYWORD = {
    "unfused": "unfused_bytes",
    "ssm": "ssm_scan_fraction",
    "sparse": "sparse_attention_fraction",
}


@dataclass(frozen=True)
class OutOfGroup:
    """One group's refit for the leave-one-group-out check."""

    group: tuple[str, str, str]
    """(model, GPU, dtype)."""
    keywords: dict[str, Any] | None
    """:func:`estimate_step`'s keywords that replace the constants fitted in the group (empty:
    none is; None: a constant has no other row and no fallback, the group is not predicted)."""
    note: str
    """What was refit on which row, in words."""


def out_of_group(
    group: tuple[str, str, str],
    rows: list[dict],
    planned: list[tuple[dict, Any]] | None = None,
) -> OutOfGroup:
    """The refit that leaves ``group``'s rows out (see the section comment); ``planned``:
    :func:`plannable` of ``rows`` when already made."""
    keywords: dict[str, Any] = {}
    notes = []
    for constant in fit_constants():
        if _fit_key(constant.row) != group:
            continue
        planned = plannable(rows) if planned is None else planned
        replacement = replacement_row(constant, planned, group)
        if replacement is not None:
            value = refit(constant, replacement)
            where = f"{replacement.model} {replacement.gpu} {replacement.precision} {replacement.release}"
            if constant.kind == "achievable":
                keywords["achievable"] = Achievable(value, f"refit without the group on {where}")
            else:
                keywords[_KEYWORD[constant.kind]] = value
            notes.append(f"{constant.kind} {constant.key} refit on {where}: {value:.4g}")
            continue
        fallback = _fallback(constant)
        if fallback is None:
            return OutOfGroup(group, None, f"{constant.kind} {constant.key}: no other row")
        keywords.update(fallback)
        notes.append(f"{constant.kind} {constant.key}: no other row, the estimate's fallback")
    return OutOfGroup(group, keywords, "; ".join(notes))


def predict_out_of_group(rows: list[dict]) -> tuple[list[Prediction], list[OutOfGroup]]:
    """Every row predicted with the constants refit without its group (:func:`out_of_group`);
    a row whose group has no refit is not predicted. No row counts as fitted here."""
    refits: dict[tuple[str, str, str], OutOfGroup] = {}
    planned: list[tuple[dict, Any]] | None = None
    out = []
    for row in rows:
        p = predict(row)
        if p.predicted is None:
            out.append(p)
            continue
        group = leave_out_key(row)
        if group not in refits:
            if planned is None and any(_fit_key(c.row) == group for c in fit_constants()):
                planned = plannable(rows)
            refits[group] = out_of_group(group, rows, planned)
        refit_ = refits[group]
        if refit_.keywords is None:
            out.append(
                dataclasses.replace(p, predicted=None, reason=f"out of group: {refit_.note}")
            )
            continue
        if not refit_.keywords:
            out.append(dataclasses.replace(p, fitted=False))
            continue
        estimate = estimate_step(_row_plan(row), **refit_.keywords)
        predicted = estimate.prediction.tokens_per_s_per_gpu
        out.append(dataclasses.replace(p, predicted=predicted, fitted=False))
    return out, [r for r in refits.values() if r.note]


def _models(predictions: Iterable[Prediction]) -> list[str]:
    """The architectures (:attr:`Prediction.architecture`) of the predicted rows, in the order
    they first appear."""
    return list(
        dict.fromkeys(
            p.architecture
            for p in predictions
            if p.predicted is not None and p.architecture is not None
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Print the report (markdown or ``--json``), write the accuracy file, or fit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="print the fitted constants")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--write-accuracy",
        action="store_true",
        help=f"write the family and model figures into {ACCURACY_FILE.relative_to(ROOT)}",
    )
    args = parser.parse_args(argv)
    if args.fit:
        for key, row in FIT_ROWS.items():
            print(f"{key}: {fit(row):.3f}  ({row.source})")
        for gen, unfused in UNFUSED_FIT_ROWS.items():
            print(f"unfused experts {gen}: {fit_unfused(unfused):.1f}  ({unfused.source})")
        for gen, ssm in SSM_FIT_ROWS.items():
            print(f"ssm scan {gen}: {fit_ssm(ssm):.4f}  ({ssm.source})")
        for gen, sparse in SPARSE_ATTENTION_FIT_ROWS.items():
            print(f"sparse attention {gen}: {fit_sparse_attention(sparse):.4f}  ({sparse.source})")
        return 0
    rows = load_rows()
    predictions = [predict(row) for row in rows]
    held_out = predict_out_of_group(rows)
    if args.write_accuracy:
        text = json.dumps(accuracy_document(predictions, held_out[0]), indent=2) + "\n"
        ACCURACY_FILE.write_text(text, encoding="utf-8")
        print(f"wrote {ACCURACY_FILE.relative_to(ROOT)}", file=sys.stderr)
    if args.json:
        print(json.dumps(report(predictions, held_out), indent=2))
    else:
        print(table(predictions, held_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
