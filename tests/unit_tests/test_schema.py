"""The shipped JSON Schema of ``explain --json`` is generated from the Python definitions."""

from __future__ import annotations

import dataclasses

import jsonschema

from megatron.bridge import schema
from megatron.bridge.training.comm_overlap import KNOBS
from megatron.bridge.training.job import JobDescription, ModelDescription


def test_shipped_schema_equals_the_generated_one():
    # A field added to the job description or a knob added to KNOBS without regenerating the
    # file (python -m megatron.bridge.schema) fails here.
    assert schema.shipped_schema() == schema.explain_schema()


def test_generated_job_schema_names_every_field_of_the_description():
    defs = schema.explain_schema()["$defs"]
    assert defs["model"]["required"] == [f.name for f in dataclasses.fields(ModelDescription)]
    assert defs["job"]["required"] == [f.name for f in dataclasses.fields(JobDescription)]
    knob = defs["plan"]["properties"]["decisions"]["items"]["properties"]["knob"]
    assert knob["enum"] == list(KNOBS)


def test_a_description_validates_and_a_wrong_type_does_not():
    job = JobDescription(
        model=ModelDescription(num_layers=4, recompute_modules=("core_attn",), fp8="hybrid"),
        world_size=8,
        direct_settings=(("ddp", "overlap_grad_reduce", False),),
        distributed_optimizer_turned_on="ddp",
    )
    defs = schema.explain_schema()["$defs"]
    validator = jsonschema.Draft202012Validator({"$defs": defs, "$ref": "#/$defs/job"})
    validator.validate(job.to_dict())
    bad = job.to_dict()
    bad["model"]["num_layers"] = "4"
    assert not validator.is_valid(bad)
    bad = job.to_dict()
    bad["distributed_optimizer_turned_on"] = "train"
    assert not validator.is_valid(bad)
