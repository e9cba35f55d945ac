"""The activation recompute of the published runs (published_runs.csv's recompute column).

Each row's recipe plan carries the row's recompute fields; the table's text form parses as
documented; the rows upstream's perf recipes set recompute on hold the upstream values.
"""

from __future__ import annotations

import csv

import pytest

from megatron.bridge.recipes import plan_recipe
from megatron.bridge.recipes.published import PUBLISHED_RUNS_TABLE, recompute_fields

_FIELDS = ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules")


def _rows() -> list[dict[str, str]]:
    with PUBLISHED_RUNS_TABLE.open(newline="", encoding="utf-8") as table:
        return list(csv.DictReader(line for line in table if not line.startswith("#")))


@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"{r['recipe']}-{r['gpu']}-{r['precision']}")
def test_each_published_plan_carries_its_rows_recompute(row):
    plan = plan_recipe(row["recipe"], gpu=row["gpu"], precision=row["precision"])
    model = plan.job.model
    assert {f: getattr(model, f) for f in _FIELDS} == recompute_fields(row["recompute"])


#: The rows whose upstream perf recipe leaves recompute on, with the final values of its call
#: chain (Megatron-Bridge src/megatron/bridge/perf_recipes/...): deepseek common.py
#: _deepseek_v3_common sets "selective", then gb300 deepseek_v3_pretrain_256gpu_gb300_fp8mx_config
#: recompute_modules = [] and gb200 ..._gb200_fp8mx_config ["mla_up_proj"];
#: gpt_oss/gb200 gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config ends with selective and [];
#: kimi/gb300 kimi_k2_pretrain_256gpu_gb300_fp8mx_config selective ["mla_up_proj"];
#: llama/h100 llama3_8b_pretrain_8gpu_h100_fp8cs_config full, block, 5;
#: deepseek/gb200 deepseek_v4_flash_pretrain_128gpu_gb200_fp8mx_config selective ["mla_up_proj"]
#: (gb300's function starts from it); nemotronh/gb300 _nemotron_3_ultra_gb300_fp8mx_config and
#: gb200 nemotron_3_ultra_pretrain_256gpu_gb200_fp8mx_config selective ["moe_act"].
UPSTREAM = {
    ("deepseek_v3", "gb300", "fp8_mx"): ("selective", None, None, ()),
    ("deepseek_v3", "gb200", "fp8_mx"): ("selective", None, None, ("mla_up_proj",)),
    ("deepseek_v4_flash", "gb300", "fp8_mx"): ("selective", None, None, ("mla_up_proj",)),
    ("deepseek_v4_flash", "gb200", "fp8_mx"): ("selective", None, None, ("mla_up_proj",)),
    ("nemotron_3_ultra", "gb300", "fp8_mx"): ("selective", None, None, ("moe_act",)),
    ("nemotron_3_ultra", "gb200", "fp8_mx"): ("selective", None, None, ("moe_act",)),
    ("gpt_oss_120b", "gb200", "fp8_mx"): ("selective", None, None, ()),
    ("kimi_k2", "gb300", "fp8_mx"): ("selective", None, None, ("mla_up_proj",)),
    ("llama3_8b", "h100", "fp8_cs"): ("full", "block", 5, None),
}


def test_the_rows_with_recompute_are_upstreams():
    found = {
        (r["recipe"], r["gpu"], r["precision"]): tuple(recompute_fields(r["recompute"]).values())
        for r in _rows()
        if r["recompute"]
    }
    assert found == UPSTREAM


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("", (None, None, None, None)),
        ("full:uniform:1", ("full", "uniform", 1, None)),
        ("selective", ("selective", None, None, None)),
        ("selective:", ("selective", None, None, ())),
        ("selective:layernorm+moe_act", ("selective", None, None, ("layernorm", "moe_act"))),
    ],
)
def test_the_text_forms(text, fields):
    assert tuple(recompute_fields(text)[f] for f in _FIELDS) == fields


@pytest.mark.parametrize("text", ["full", "full:block", "full:block:x", "partial:core_attn"])
def test_text_in_no_form_is_refused(text):
    with pytest.raises(ValueError, match="recompute"):
        recompute_fields(text)
