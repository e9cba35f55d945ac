"""``benchmarks/predict_published.py``: its table predicts every published row a recipe covers.

Accuracy is reported by the script, not held here: these tests check that each covered row gets
a positive prediction and that the table lists every row once.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from megatron.bridge.recipes import RECIPES

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "predict_published.py"
_SPEC = importlib.util.spec_from_file_location("predict_published", _PATH)
predict_published = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = predict_published  # dataclasses look their module up there
_SPEC.loader.exec_module(predict_published)

ROWS = predict_published.load_rows()


def _id(row: dict) -> str:
    return f"{row['model']}-{row['system']}-{row['precision']}-{row['release']}"


@pytest.mark.parametrize("row", [r for r in ROWS if r["model"] in RECIPES], ids=_id)
def test_every_covered_row_gets_a_prediction(row):
    prediction = predict_published.predict(row)
    assert prediction.predicted is not None and prediction.predicted > 0
    assert prediction.error == pytest.approx(
        prediction.predicted / row["tokens_per_s_per_gpu"] - 1.0
    )


def test_the_table_lists_every_row_once_and_summarises_the_unfitted_ones():
    predictions = [predict_published.predict(row) for row in ROWS]
    text = predict_published.table(predictions)
    body = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(body) == len(ROWS) + 1  # the header and one line per row
    covered = [p for p in predictions if p.row["model"] in RECIPES]
    assert covered and all(p.predicted is not None for p in covered)
    assert sum("no recipe" in line for line in body) == len(ROWS) - len(covered)
    assert "median |error|" in text and "worst" in text
