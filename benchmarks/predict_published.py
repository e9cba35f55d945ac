"""Predicted tokens/s/GPU beside the published ones, for every published row a recipe covers.

    uv run python benchmarks/predict_published.py [--fit]

Reads the published pre-training rows (``tests/unit_tests/recipes/data/published_rows.yaml``:
every row of the current release plus the archived rows kept there), plans each row's recipe at
the row's GPU and precision (the recipe picks the row's published layout, world size and batch
sizes), runs :func:`~megatron.bridge.training.estimate.estimate_step` on the plan and prints a
markdown table: predicted, published, the relative error per row, then the median and worst
absolute error over the rows the achievable-fraction table was not fitted on. Rows of models
without a recipe are listed as such. ``--fit`` prints instead, for each row of
:data:`~megatron.bridge.training.estimate.efficiency.FIT_ROWS`, the achievable fraction for which
the prediction equals the published figure (bisection): the figures ``efficiency.ACHIEVABLE``
holds. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from megatron.bridge.recipes import RECIPES, plan_recipe
from megatron.bridge.training import hardware
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.efficiency import FIT_ROWS, Achievable, FitRow
from megatron.bridge.training.estimate.kernels import SSM_FIT_ROWS, SsmFitRow
from megatron.bridge.training.precisions import published_precision

ROWS_FILE = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "unit_tests"
    / "recipes"
    / "data"
    / "published_rows.yaml"
)


@dataclass(frozen=True)
class Prediction:
    """One published row and what the estimate predicts for it."""

    row: dict
    """The published row, as the data file has it."""
    gpu: str
    """The catalogue's name of the row's GPU."""
    precision: str
    """The row's compute dtype."""
    predicted: float | None
    """Predicted tokens/s/GPU; None when no recipe covers the row's model."""
    fitted: bool
    """The achievable-fraction table was fitted on this row."""

    @property
    def label(self) -> str:
        """The row as the table names it: model, system, precision, release."""
        r = self.row
        return f"{r['model']} {r['system']} {r['precision']} ({r['release']})"

    @property
    def error(self) -> float | None:
        """(predicted - published) / published."""
        if self.predicted is None:
            return None
        return self.predicted / self.row["tokens_per_s_per_gpu"] - 1.0


def load_rows(path: Path = ROWS_FILE) -> list[dict]:
    """The published rows of the data file."""
    return yaml.safe_load(path.read_text())


def predict(row: dict) -> Prediction:
    """The estimate's tokens/s/GPU for ``row``'s recipe at its GPU and precision."""
    gpu = hardware.system_gpu(row["system"]).name
    precision = published_precision(row["precision"])
    fitted = any(
        (f.model, f.gpu, f.precision, f.release) == (row["model"], gpu, precision, row["release"])
        for f in (*FIT_ROWS.values(), *SSM_FIT_ROWS.values())
    )
    if row["model"] not in RECIPES:
        return Prediction(row, gpu, precision, None, fitted)
    plan = plan_recipe(row["model"], gpu=gpu, precision=precision)
    estimate = estimate_step(plan)
    return Prediction(row, gpu, precision, estimate.prediction.tokens_per_s_per_gpu, fitted)


def table(predictions: list[Prediction]) -> str:
    """The markdown table of ``predictions`` and its summary lines."""
    lines = [
        "| row | layout | predicted tok/s/GPU | published tok/s/GPU | error |",
        "|---|---|---:|---:|---:|",
    ]
    for p in predictions:
        r = p.row
        layout = (
            f"{r['gpus']} GPUs TP{r['tp']} PP{r['pp']} VP{r['vp'] or '-'} CP{r['cp']} EP{r['ep']}"
        )
        if p.predicted is None:
            lines.append(
                f"| {p.label} | {layout} | no recipe | {r['tokens_per_s_per_gpu']:.0f} | |"
            )
            continue
        mark = " (fit)" if p.fitted else ""
        lines.append(
            f"| {p.label}{mark} | {layout} | {p.predicted:.0f} | "
            f"{r['tokens_per_s_per_gpu']:.0f} | {p.error:+.1%} |"
        )
    rest = [abs(p.error) for p in predictions if p.error is not None and not p.fitted]
    if rest:
        worst = max(
            (p for p in predictions if p.error is not None and not p.fitted),
            key=lambda p: abs(p.error),
        )
        lines += [
            "",
            f"Rows predicted: {sum(p.predicted is not None for p in predictions)} of "
            f"{len(predictions)}; fitted on {sum(p.fitted for p in predictions)}.",
            f"Over the {len(rest)} rows not fitted on: median |error| {statistics.median(rest):.1%}, "
            f"worst {abs(worst.error):.1%} ({worst.label}).",
        ]
    return "\n".join(lines)


def fit(row: FitRow, *, steps: int = 40) -> float:
    """The achievable fraction for which ``row``'s predicted tokens/s/GPU is its published one."""
    plan = plan_recipe(row.model, gpu=row.gpu, precision=row.precision)
    low, high = 0.01, 1.0
    for _ in range(steps):
        mid = (low + high) / 2
        predicted = estimate_step(plan, achievable=Achievable(mid, "bisection"))
        if predicted.prediction.tokens_per_s_per_gpu < row.tokens_per_s_per_gpu:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def fit_ssm(row: SsmFitRow, *, steps: int = 40) -> float:
    """The SSM scan share of the BF16 peak for which ``row``'s prediction is its published one."""
    plan = plan_recipe(row.model, gpu=row.gpu, precision=row.precision)
    low, high = 0.001, 1.0
    for _ in range(steps):
        mid = (low + high) / 2
        predicted = estimate_step(plan, ssm_scan_fraction=mid)
        if predicted.prediction.tokens_per_s_per_gpu < row.tokens_per_s_per_gpu:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def main(argv: list[str] | None = None) -> int:
    """Print the table, or with ``--fit`` the fitted fractions."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="print the fitted fractions")
    args = parser.parse_args(argv)
    if args.fit:
        for key, row in FIT_ROWS.items():
            print(f"{key}: {fit(row):.3f}  ({row.source})")
        for gen, ssm in SSM_FIT_ROWS.items():
            print(f"ssm scan {gen}: {fit_ssm(ssm):.4f}  ({ssm.source})")
        return 0
    print(table([predict(row) for row in load_rows()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
