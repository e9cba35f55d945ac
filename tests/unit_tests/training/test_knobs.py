"""The knob table (comm_overlap/knobs.py) against megatron-core's real config classes.

Every knob is written to the configs its row names, under its own name: each of those must be a
field of megatron-core's class, and apply_plan must write there and nowhere else.
"""

from __future__ import annotations

import dataclasses

import pytest
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.comm_overlap import KNOBS, CommOverlapConfig, apply_plan
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
def test_every_knob_is_a_request_field(knob):
    assert knob in {f.name for f in dataclasses.fields(CommOverlapConfig)}


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
