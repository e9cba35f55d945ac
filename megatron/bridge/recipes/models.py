"""The shipped recipes' model shapes, read from one data file.

:data:`MODELS_TABLE` (``models.json`` beside this module) holds one entry per shipped recipe
and per shared architecture, by name. An entry maps megatron-core's field names (the fields of
:class:`~megatron.bridge.training.job.ModelDescription`) to their values, and two keys of its
own:

- ``source`` (required): where the values come from (the upstream model provider, recipe or
  Hugging Face configuration);
- ``base`` (optional): the name of another entry whose fields this one starts from; its own
  fields replace the base's (``kimi_k2`` is ``deepseek_v3`` with its own heads, vocabulary,
  experts and dense layers; ``llama3_70b`` is the ``llama3`` architecture with its dimensions).

A recipe's entry may also hold parallel sizes (``tensor_model_parallel_size``, ...): they are
that recipe's default layout where it has no published run to take it from.

:func:`recipe_model` turns an entry into a ``ModelDescription``; every value is checked against
its field's annotation (``value_types.check_field``: lists become tuples, ``null`` is None), and
an error names the file and the key (``models.json: qwen3_30b_a3b.num_layers: expected int, got
str 'x'``). Pure data: importing this module loads no torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.value_types import check_field, check_value

__all__ = ["MODELS_TABLE", "recipe_model", "recipe_model_fields"]

MODELS_TABLE = Path(__file__).with_name("models.json")
"""The shipped recipes' model shapes and their shared architectures, one JSON entry each."""

_OWN_KEYS = ("base", "source")
_MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelDescription))


@functools.cache
def _entries(table: Path) -> Mapping[str, Mapping[str, Any]]:
    """The entries of ``table`` by name, as the file holds them (JSON objects)."""
    try:
        with table.open(encoding="utf-8") as f:
            entries = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{table.name}: not valid JSON: {exc}") from None
    if not isinstance(entries, dict):
        raise ValueError(f"{table.name}: expected an object of named entries at the top level")
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{table.name}: {name}: expected an object of fields")
    return entries


@functools.cache
def recipe_model_fields(name: str, table: Path = MODELS_TABLE) -> Mapping[str, Any]:
    """The model fields of entry ``name`` of ``table``: its base's, then its own, each checked.

    ``ValueError`` names the file and the key for an entry that is missing, a base that is
    missing or refers back to the entry, a field ``ModelDescription`` does not have, and a value
    its field's annotation does not admit (``value_types.ConfigValueError``).
    """
    return MappingProxyType(_resolve(name, table, ()))


def _resolve(name: str, table: Path, chain: tuple[str, ...]) -> dict[str, Any]:
    entries = _entries(table)
    if name not in entries:
        close = difflib.get_close_matches(name, entries, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{table.name}: no entry {name!r}{hint}")
    entry = entries[name]
    if "source" not in entry:
        raise ValueError(
            f"{table.name}: {name}.source: missing; every entry names where its values come from"
        )
    check_value(entry["source"], str, f"{table.name}: {name}.source")
    fields: dict[str, Any] = {}
    base = entry.get("base")
    if base is not None:
        check_value(base, str, f"{table.name}: {name}.base")
        if base in (*chain, name):
            cycle = " -> ".join((*chain, name, base))
            raise ValueError(f"{table.name}: {name}.base: {base!r} refers back to it ({cycle})")
        if base not in entries:
            raise ValueError(f"{table.name}: {name}.base: no entry {base!r}")
        fields.update(_resolve(base, table, (*chain, name)))
    for field, value in entry.items():
        if field in _OWN_KEYS:
            continue
        where = f"{table.name}: {name}.{field}"
        if field not in _MODEL_FIELDS:
            close = difflib.get_close_matches(field, _MODEL_FIELDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"{where}: {field!r} is not a ModelDescription field (megatron-core's "
                f"TransformerConfig names){hint}"
            )
        fields[field] = check_field(ModelDescription, field, value, where)
    return fields


def recipe_model(name: str, table: Path = MODELS_TABLE) -> ModelDescription:
    """The ``ModelDescription`` of entry ``name`` of ``table`` (:func:`recipe_model_fields`);
    fields the entry and its bases do not name keep megatron-core's defaults."""
    return ModelDescription(**recipe_model_fields(name, table))
