"""The knob table (comm_overlap/knobs.py) against megatron-core's real config classes and the
other places that name knobs.

Every knob is written to the configs its row names, under its own name: each of those must be a
field of megatron-core's class with the default the row states, and apply_plan must write there
and nowhere else. Knob names live in the table only: the request's fields, the JSON Schema of
``bridge-overlap explain --json`` and ``bridge-overlap-check``'s baseline are held to it here.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from typing import get_args

import pytest
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.transformer_config import TransformerConfig

import megatron.bridge
from megatron.bridge.check import overlap_off_request
from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.comm_overlap import KNOBS, CommOverlapConfig, apply_plan
from megatron.bridge.training.comm_overlap.knobs import Area, ConfigName
from megatron.bridge.training.comm_overlap.plan import Decision, OverlapPlan
from megatron.bridge.training.job import JobDescription, ModelDescription

CLASSES = {
    "model": GPTModelProvider,
    "ddp": DistributedDataParallelConfig,
    "optimizer": OptimizerConfig,
}


@pytest.mark.parametrize("knob", list(KNOBS))
def test_every_target_is_a_field_of_megatron_cores_config(knob):
    for target in KNOBS[knob].targets:
        fields = {f.name for f in dataclasses.fields(CLASSES[target])}
        assert knob in fields, f"{knob} is not a field of {CLASSES[target].__name__}"
    # Only the userbuffers config is ours on top of megatron-core's TransformerConfig.
    if "model" in KNOBS[knob].targets and knob != "tp_comm_overlap_cfg":
        assert knob in {f.name for f in dataclasses.fields(TransformerConfig)}


@pytest.mark.parametrize("knob", list(KNOBS))
def test_core_default_is_megatron_cores_default_on_every_target(knob):
    for target in KNOBS[knob].targets:
        field = CLASSES[target].__dataclass_fields__[knob]
        assert field.default is not dataclasses.MISSING, f"{target}.{knob} has no plain default"
        assert field.default == KNOBS[knob].core_default, (
            f"megatron-core's {CLASSES[target].__name__}.{knob} defaults to {field.default!r}, "
            f"the knob table says {KNOBS[knob].core_default!r}"
        )
        assert type(field.default) is type(KNOBS[knob].core_default), f"{target}.{knob}"


#: CommOverlapConfig fields that are not overlap knobs: how the request is checked, a size the
#: rules read and who chose the preset (none is written to a megatron-core config).
REQUEST_ONLY_FIELDS = ("strict", "data_parallel_size", "preset_chosen_by")


@pytest.mark.parametrize("knob", list(KNOBS))
def test_every_knob_is_a_request_field(knob):
    assert knob in {f.name for f in dataclasses.fields(CommOverlapConfig)}, (
        f"{knob} is in KNOBS but not a CommOverlapConfig field"
    )


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(CommOverlapConfig)])
def test_every_request_field_is_a_knob_or_request_only(field):
    assert field in KNOBS or field in REQUEST_ONLY_FIELDS, (
        f"CommOverlapConfig.{field} has no row in KNOBS (add one, or list it as request-only)"
    )
    assert not (field in KNOBS and field in REQUEST_ONLY_FIELDS), field


def _schema() -> dict:
    text = resources.files(megatron.bridge).joinpath("explain.schema.json").read_text("utf-8")
    return json.loads(text)


def _missing(listed, table) -> str:
    return (
        f"in KNOBS, not in the schema: {sorted(set(table) - set(listed))}; "
        f"in the schema, not in KNOBS: {sorted(set(listed) - set(table))}"
    )


def test_schema_lists_the_knobs_of_the_table_in_plan_order():
    decision = _schema()["$defs"]["plan"]["properties"]["decisions"]["items"]["properties"]
    listed = decision["knob"]["enum"]
    assert set(listed) == set(KNOBS), _missing(listed, KNOBS)
    assert listed == list(KNOBS), "explain.schema.json lists the knobs in another order"
    assert decision["area"]["enum"] == list(get_args(Area))


def test_schema_names_the_configs_a_direct_setting_can_be_on():
    job = _schema()["$defs"]["job"]["properties"]
    config = job["direct_settings"]["items"]["prefixItems"][0]["enum"]
    assert config == list(get_args(ConfigName))


@pytest.mark.parametrize("knob", [k for k, spec in KNOBS.items() if spec.switch])
def test_a_switch_is_a_flag_the_check_baseline_turns_off(knob):
    # overlap_off_request sets every switch False: only a bool knob can take that.
    assert KNOBS[knob].kind in ("auto_flag", "optional_flag")
    off = overlap_off_request(CommOverlapConfig(**{"tp_comm_overlap": True, knob: True}))
    assert getattr(off, knob) is False


def _sentinel(knob):
    return {"tp_comm_overlap_cfg": {"qkv_fprop": {"method": "ring_exchange"}}}.get(knob, 12345)


@pytest.mark.parametrize("knob", list(KNOBS))
def test_apply_plan_writes_each_knob_to_its_targets_only(knob):
    model = GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4)
    configs = {
        "model": model,
        "ddp": DistributedDataParallelConfig(),
        "optimizer": OptimizerConfig(),
    }
    before = {name: {k: getattr(c, k, None) for k in KNOBS} for name, c in configs.items()}
    decisions = tuple(
        Decision(k, _sentinel(k) if k == knob else before["model"].get(k), "user", "test")
        for k in KNOBS
    )
    # Write every other knob with the value its first target already has, so only `knob` moves.
    decisions = tuple(
        d if d.knob == knob else d._replace(value=before[KNOBS[d.knob].targets[0]][d.knob])
        for d in decisions
    )
    plan = OverlapPlan(job=JobDescription(model=ModelDescription()), decisions=decisions)
    apply_plan(plan, configs["model"], configs["optimizer"], configs["ddp"])
    for name, config in configs.items():
        written = getattr(config, knob, None)
        if name in KNOBS[knob].targets:
            assert written == _sentinel(knob)
        else:
            assert written == before[name][knob]
