"""The JSON Schema of ``bridge-overlap explain --json``: the shipped file and what derives it.

``megatron/bridge/explain.schema.json`` ships with the package for consumers of the JSON. Its
parts that mirror a Python definition are generated from it, never written by hand: the job
description (``$defs/job``, from :class:`~megatron.bridge.training.job.JobDescription`'s fields
and annotations), the knob names (from ``KNOBS``) and the model families of the estimate's
accuracy (from ``estimate.accuracy.Family``). :func:`explain_schema` is the shipped
file with those parts regenerated; ``python -m megatron.bridge.schema`` rewrites the file, and a
test holds the shipped file equal to :func:`explain_schema`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any

from megatron.bridge.training.comm_overlap.knobs import KNOBS
from megatron.bridge.training.estimate.accuracy import Family
from megatron.bridge.training.job import JobDescription, ModelDescription

__all__ = ["SCHEMA_FILE", "dataclass_schema", "explain_schema", "shipped_schema"]

SCHEMA_FILE = "explain.schema.json"
"""The schema's file name inside the ``megatron.bridge`` package."""

_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def _type_schema(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_schema(a) for a in typing.get_args(annotation)]
        if all(set(p) == {"type"} for p in parts):
            names: list[str] = []
            for p in parts:
                names += p["type"] if isinstance(p["type"], list) else [p["type"]]
            return {"type": names if len(names) > 1 else names[0]}
        return {"anyOf": parts}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0])}
        return {"type": "array", "prefixItems": [_type_schema(a) for a in args], "items": False}
    if annotation is Any:
        return {}
    if dataclasses.is_dataclass(annotation):
        return dataclass_schema(annotation)
    return {"type": _SCALARS[annotation]}


def dataclass_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema of ``dataclasses.asdict`` output of ``cls`` (tuples as arrays)."""
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    return {
        "type": "object",
        "additionalProperties": False,
        "required": fields,
        "properties": {name: _type_schema(hints[name]) for name in fields},
    }


def shipped_schema() -> dict[str, Any]:
    """The schema file as shipped."""
    text = resources.files("megatron.bridge").joinpath(SCHEMA_FILE).read_text("utf-8")
    return json.loads(text)


def explain_schema() -> dict[str, Any]:
    """The shipped schema with its generated parts regenerated from the Python definitions."""
    schema = shipped_schema()
    defs = schema["$defs"]
    defs["model"] = dataclass_schema(ModelDescription)
    job = dataclass_schema(JobDescription)
    job["properties"]["model"] = {"$ref": "#/$defs/model"}
    defs["job"] = job
    plan = defs["plan"]["properties"]
    plan["decisions"]["items"]["properties"]["knob"] = {"enum": list(KNOBS)}
    accuracy = defs["estimate"]["properties"]["accuracy"]["properties"]
    accuracy["family"] = {"enum": list(typing.get_args(Family))}
    return schema


def main() -> int:
    """Rewrite the shipped schema file with its generated parts regenerated."""
    path = Path(__file__).with_name(SCHEMA_FILE)
    path.write_text(json.dumps(explain_schema(), indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
