"""The text of ``key=value`` overrides, read and checked without torch (:func:`parse_overrides`).

Everything the text alone decides is checked here, before a container exists (and before
megatron-core is imported, which takes seconds): each override is ``key=value`` with a key; a
key is a top-level setting (``gpu``, ``gpus_per_node``, ``nvlink_domain``, ``mixed_precision``,
``comm_overlap``) or ``SECTION.FIELD`` of a known section, one level deep (``env_vars.NAME`` for
a variable); a key given twice has one value; a field set before its section is replaced would
be lost; ``gpu=`` names a GPU of the catalogue; ``gpus_per_node=`` and ``nvlink_domain=`` take
an int within its bound or ``null``; ``comm_overlap=`` takes only ``null``;
``env_vars.NAME=VALUE`` is a name and value ``check_env_vars`` takes. What needs the target
config (a field's name in its section, the value's type, a preset name) is
:func:`~megatron.bridge.training.overrides.apply_overrides`'s to check.

Values are read as YAML scalars (``yaml_loader``: ``true``, ``8``, ``null``, ``[a, b]``); a text
YAML cannot read stays the text.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from megatron.bridge.training import hardware
from megatron.bridge.training.env_vars import check_env_vars
from megatron.bridge.training.job import CLUSTER_FIELDS, check_cluster_field
from megatron.bridge.training.value_types import ConfigValueError

__all__ = [
    "OVERRIDE_SECTIONS",
    "TOP_LEVEL_KEYS",
    "Override",
    "OverrideError",
    "OverrideValueError",
    "did_you_mean",
    "parse_override",
    "parse_overrides",
    "parse_value",
]

#: Sections a dotted key may start with (``env_vars`` takes one variable name after the dot).
OVERRIDE_SECTIONS = (
    "model",
    "train",
    "optimizer",
    "ddp",
    "mixed_precision",
    "comm_overlap",
    "env_vars",
)
#: Keys without a dot: the GPU and the cluster's node and NVLink domain, the mixed-precision
#: preset (or null), ``comm_overlap=null``.
TOP_LEVEL_KEYS = ("gpu", *CLUSTER_FIELDS, "mixed_precision", "comm_overlap")


class OverrideError(ValueError):
    """An override that names no setting, or gives a value of the wrong type."""


class OverrideValueError(OverrideError, ConfigValueError):
    """An override whose value its field's annotation does not admit.

    The same check, and the same kind of error, as a bad value in a YAML file or set in Python
    (:class:`~megatron.bridge.training.value_types.ConfigValueError`).
    """


@dataclass(frozen=True)
class Override:
    """One ``key=value`` override, read."""

    text: str
    """The override as typed."""
    key: str
    """The key, stripped: ``model.num_layers``, ``gpu``."""
    section: str
    """The part before the dot (the whole key for a top-level key)."""
    field: str
    """The part after the dot; empty for a top-level key."""
    raw: str
    """The value text as typed."""
    value: Any
    """The value read (:func:`parse_value`); ``gpu=``'s as the catalogue names the GPU, an
    environment variable's as the text."""


def parse_override(text: str) -> tuple[str, str]:
    """Split ``"key=value"`` into its key and its raw value text."""
    if not isinstance(text, str) or "=" not in text:
        raise OverrideError(f"Override {text!r} is not key=value (e.g. model.num_layers=32).")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise OverrideError(f"Override {text!r} has no key before '='.")
    return key, raw


def parse_value(raw: str) -> Any:
    """The value text read as a YAML scalar; a text YAML cannot read stays the text."""
    # PyYAML is imported only where a value is read: a command line without overrides, which
    # imports this module through the CLI's flags, does not pay for it.
    import yaml

    from megatron.bridge.training import yaml_loader

    try:
        return yaml_loader.load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'a', 'b'?`` with the close names among ``choices`` (each once), or ''."""
    close = difflib.get_close_matches(word, list(dict.fromkeys(choices)), n=3, cutoff=0.6)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _read(text: str) -> Override:
    """One override read and checked on its own (:func:`parse_overrides` has the rules)."""
    key, raw = parse_override(text)
    section, _, field = key.partition(".")
    if not field:
        if section not in TOP_LEVEL_KEYS:
            raise OverrideError(
                f"Unknown override key {key!r}: give a field as SECTION.FIELD (sections: "
                f"{', '.join(OVERRIDE_SECTIONS)}) or one of {list(TOP_LEVEL_KEYS)}."
                f"{did_you_mean(section, (*TOP_LEVEL_KEYS, *OVERRIDE_SECTIONS))}"
            )
        value = parse_value(raw)
        if section == "gpu" and value is not None:
            try:
                value = hardware.gpu_spec(str(value)).name
            except ValueError as exc:
                raise OverrideError(f"{key}={raw!r}: {exc}") from None
        elif section in CLUSTER_FIELDS:
            # A value outside its bound is the LimitError every source's bound check raises.
            try:
                value = check_cluster_field(section, value, key)
            except ConfigValueError as exc:  # it names the key
                raise OverrideValueError(exc.where, exc.problem) from None
        elif section == "comm_overlap" and value is not None:
            raise OverrideError(
                f"{key}={raw!r}: only comm_overlap=null is taken here; set its fields as "
                "comm_overlap.FIELD=VALUE."
            )
        return Override(text, key, section, "", raw, value)
    if section not in OVERRIDE_SECTIONS:
        raise OverrideError(
            f"Unknown override section {section!r} in {key!r}; sections: "
            f"{', '.join(OVERRIDE_SECTIONS)}.{did_you_mean(section, OVERRIDE_SECTIONS)}"
        )
    if section == "env_vars":
        try:
            check_env_vars({field: raw}, owner="env_vars")
        except ConfigValueError as exc:  # it names env_vars.NAME
            raise OverrideValueError(exc.where, exc.problem) from None
        except (TypeError, ValueError) as exc:
            raise OverrideError(str(exc)) from None
        return Override(text, key, section, field, raw, raw)
    if "." in field:
        raise OverrideError(f"{key!r}: {section} fields are one level deep ({section}.FIELD).")
    return Override(text, key, section, field, raw, parse_value(raw))


def _same(a: Any, b: Any) -> bool:
    # YAML reads 1, 1.0 and true as values Python holds equal; an override says one of them.
    return type(a) is type(b) and a == b


def parse_overrides(overrides: Iterable[str]) -> tuple[Override, ...]:
    """Read ``key=value`` overrides and check what their text decides; in the order given.

    Raises :class:`OverrideError` naming the override for: a text that is not ``key=value``, an
    unknown top-level key or section (with a "did you mean"), a field more than one level deep,
    a key given twice with different values ("give one of them"), a field of a section set
    before ``SECTION=...`` replaces the section (the field would be lost) or after
    ``SECTION=null`` removed it, an unknown GPU, ``comm_overlap=`` other than ``null``, and an
    environment variable ``check_env_vars`` refuses. Imports neither torch nor megatron-core.
    """
    if isinstance(overrides, str):
        raise TypeError("overrides are a list of 'key=value' strings, not one string.")
    read: list[Override] = []
    seen: dict[str, Override] = {}
    for text in overrides:
        override = _read(text)
        first = seen.setdefault(override.key, override)
        if not _same(first.value, override.value):
            raise OverrideError(
                f"The overrides {first.text!r} and {override.text!r} set {override.key} to "
                "different values; give one of them."
            )
        if not override.field:
            edit = next((o for o in read if o.field and o.section == override.section), None)
            if edit is not None:
                raise OverrideError(
                    f"The override {override.text!r} replaces {override.section} after "
                    f"{edit.text!r} set one of its fields, which would be lost; give "
                    f"{override.text!r} first."
                )
        else:
            top = seen.get(override.section)
            if top is not None and not top.field and top.value is None:
                raise OverrideError(
                    f"The override {override.text!r} sets a field of {override.section}, which "
                    f"{top.text!r} removes; drop one of them."
                )
        read.append(override)
    return tuple(read)
