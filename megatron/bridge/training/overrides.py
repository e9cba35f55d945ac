"""Command-line style overrides of a ``ConfigContainer``: ``"model.tensor_model_parallel_size=8"``.

:func:`apply_overrides` takes ``key=value`` strings. A key is a dotted path into one of the
container's sections (``model``, ``train``, ``optimizer``, ``ddp``, ``mixed_precision``,
``comm_overlap``), ``env_vars.NAME``, or a top-level setting (``gpu``, ``mixed_precision`` as a
preset name or ``null``, ``comm_overlap=null``).

Values are parsed as YAML scalars (``yaml_loader.YamlLoader``, a ``yaml.SafeLoader`` whose
booleans are ``true``/``false`` only: ``true``, ``8``, ``null``, ``[a, b]``),
the grammar upstream Megatron-Bridge's OmegaConf/Hydra overrides share for plain values (no
interpolation, no ``+``/``~`` prefixes), then checked against the target field's annotation
by ``value_types.check_field``, the check ``serialization.from_yaml`` and
``runtime_config_update`` make too: ``bool``, ``int``, ``float``, ``str``, ``Optional``,
``Literal`` (the error lists the values), enums, lists, dicts. Text has a few readings on top
(``text=`` of that check): a float written ``1e-5`` (YAML 1.1 reads it as a string),
``torch.dtype`` by name, enums by member name, functions as ``module:qualname``, and a str field
takes the text as written. ``comm_overlap.tp_comm_overlap_cfg=NAME`` takes a published
userbuffers preset by name (``null`` for TE's defaults, anything else is a YAML file path that
must exist). ``env_vars.NAME=VALUE`` takes VALUE verbatim as a string (it is exported as text;
``true`` stays ``"true"``) after ``check_env_vars`` (a variable read as an integer must be one).

A value typed for a field of ``model``, ``optimizer`` or ``ddp`` is recorded as typed
(``write_record``, writer "typed"): the comm-overlap plan honours it as the user's even where it
equals megatron-core's default (``ddp.overlap_grad_reduce=false``), which a field set in Python
cannot show.

A size or count above its bound (``validators.LIMITS``, the table flags and recipes meet too)
raises ``validators.LimitError`` (a ``ValueError``) naming the key, before anything is written.

An unknown key gets a "did you mean" with the close field names and raises
:class:`OverrideError` (a ``ValueError``). A bad value raises :class:`OverrideValueError`, both
an ``OverrideError`` and a ``value_types.ConfigValueError`` (the error a bad value from YAML or
Python raises), naming the override as typed, the expected type and the value:
``model.sequence_parallel='maybe': expected bool, got str 'maybe'``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable
from typing import Any

import yaml

from megatron.bridge.training import hardware, write_record, yaml_loader
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.config import ConfigContainer, check_env_vars
from megatron.bridge.training.mixed_precision import get_mixed_precision_config
from megatron.bridge.training.userbuffers import PUBLISHED_PRESETS
from megatron.bridge.training.validators import LIMITS, check_limit
from megatron.bridge.training.value_types import ConfigValueError, check_field

__all__ = [
    "OVERRIDE_SECTIONS",
    "OverrideError",
    "OverrideValueError",
    "apply_overrides",
    "parse_override",
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
_TOP_LEVEL = ("gpu", "mixed_precision", "comm_overlap")
#: Sections holding megatron-core configs, whose typed fields are recorded as the user's.
_MEGATRON_SECTIONS = ("model", "optimizer", "ddp")
#: Override keys outside ``model`` whose bound is a job field's (``validators.LIMITS``).
_LIMITED_KEYS = {
    "train.micro_batch_size": "micro_batch_size",
    "train.global_batch_size": "global_batch_size",
}


def _limit_of(key: str) -> str | None:
    """The ``LIMITS`` entry an override key meets (``model.<field>`` are the job's names)."""
    name = _LIMITED_KEYS.get(key, key)
    return name if name in LIMITS else None


class OverrideError(ValueError):
    """An override that names no setting, or gives a value of the wrong type."""


class OverrideValueError(OverrideError, ConfigValueError):
    """An override whose value its field's annotation does not admit.

    The same check, and the same kind of error, as a bad value in a YAML file or set in Python
    (:class:`~megatron.bridge.training.value_types.ConfigValueError`).
    """


def parse_override(text: str) -> tuple[str, str]:
    """Split ``"key=value"`` into its key and its raw value text."""
    if not isinstance(text, str) or "=" not in text:
        raise OverrideError(f"Override {text!r} is not key=value (e.g. model.num_layers=32).")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise OverrideError(f"Override {text!r} has no key before '='.")
    return key, raw


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _check(cls: type, name: str, key: str, raw: str, value: Any) -> Any:
    """``value`` (parsed from ``raw``) checked against field ``name`` of ``cls``, with the
    readings of text (``value_types.check_field``); the error shows the override as typed."""
    try:
        return check_field(cls, name, value, key, text=raw)
    except ConfigValueError as exc:
        detail = exc.problem if exc.where == key else str(exc)  # else it names a list item
        raise OverrideValueError(f"{key}={raw!r}", detail) from None
    except ValueError as exc:  # a function's module:qualname that does not import
        raise OverrideError(f"{key}={raw!r}: {exc}") from None


def _preset(key: str, raw: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        if value in PUBLISHED_PRESETS:
            return PUBLISHED_PRESETS[value]
        if os.path.isfile(value):
            return value
        raise OverrideError(
            f"{key}={raw!r} is neither a published userbuffers preset nor a file."
            f"{_did_you_mean(value, PUBLISHED_PRESETS)} Use null for TE's defaults."
        )
    raise OverrideError(f"{key}={raw!r}: expected a published preset name, a file path or null.")


def apply_overrides(cfg: ConfigContainer, overrides: Iterable[str]) -> ConfigContainer:
    """Apply ``key=value`` overrides to ``cfg`` in place and return it.

    All or nothing: every override is parsed and checked first; the container changes only
    when all of them are valid (later overrides see earlier ones, so ``mixed_precision=NAME``
    then ``mixed_precision.fp8_param_gather=true`` edits the new preset). Raises
    :class:`OverrideError` naming the key (see the module docstring).
    """
    if not isinstance(cfg, ConfigContainer):
        raise TypeError(f"apply_overrides expects a ConfigContainer, got {type(cfg).__name__}.")
    if isinstance(overrides, str):
        raise TypeError("apply_overrides takes a list of 'key=value' strings, not one string.")
    top: dict[str, Any] = {}
    # Section objects are copied on first edit, so nothing is written until all checks pass.
    edited: dict[str, Any] = {}
    # Section -> the fields typed in it, in order.
    typed: dict[str, list[str]] = {}
    env = dict(cfg.env_vars)
    for text in overrides:
        key, raw = parse_override(text)
        head, _, rest = key.partition(".")
        if not rest:
            if head not in _TOP_LEVEL:
                raise OverrideError(
                    f"Unknown override key {key!r}: give a field as SECTION.FIELD (sections: "
                    f"{', '.join(OVERRIDE_SECTIONS)}) or one of {list(_TOP_LEVEL)}."
                    f"{_did_you_mean(head, (*_TOP_LEVEL, *OVERRIDE_SECTIONS))}"
                )
            value = _parse(raw)
            if head == "gpu":
                if value is not None:
                    try:
                        value = hardware.gpu_spec(str(value)).name
                    except ValueError as exc:
                        raise OverrideError(f"{key}={raw!r}: {exc}") from None
            elif head == "mixed_precision":
                if value is not None:
                    try:
                        value = get_mixed_precision_config(str(value))
                    except (ValueError, KeyError) as exc:
                        raise OverrideError(f"{key}={raw!r}: {exc}") from None
            elif value is not None:
                raise OverrideError(
                    f"{key}={raw!r}: only comm_overlap=null is taken here; set its fields as "
                    "comm_overlap.FIELD=VALUE."
                )
            top[head] = value
            edited.pop(head, None)
            typed.pop(head, None)
            continue
        if head == "env_vars":
            try:
                check_env_vars({rest: raw}, owner="env_vars")
            except ConfigValueError as exc:  # it names env_vars.NAME
                raise OverrideValueError(exc.where, exc.problem) from None
            except (TypeError, ValueError) as exc:
                raise OverrideError(str(exc)) from None
            env[rest] = raw
            continue
        if head not in OVERRIDE_SECTIONS:
            raise OverrideError(
                f"Unknown override section {head!r} in {key!r}; sections: "
                f"{', '.join(OVERRIDE_SECTIONS)}.{_did_you_mean(head, OVERRIDE_SECTIONS)}"
            )
        if "." in rest:
            raise OverrideError(f"{key!r}: {head} fields are one level deep ({head}.FIELD).")
        target = edited.get(head)
        if target is None:
            current = top[head] if head in top else getattr(cfg, head)
            if current is None:
                hint = "mixed_precision=PRESET" if head == "mixed_precision" else "it in the recipe"
                raise OverrideError(f"{key!r}: cfg.{head} is None; set {hint} first.")
            # A preset just created by this call is ours to edit; anything else is copied.
            target = current if head in top else _shallow_copy(current)
            edited[head] = target
        names = [
            f.name for f in dataclasses.fields(target) if f.init and not f.name.startswith("_")
        ]
        if rest not in names:
            raise OverrideError(
                f"Unknown override key {key!r}: {type(target).__name__} has no field "
                f"{rest!r}.{_did_you_mean(rest, names)}"
            )
        value = _parse(raw)
        if isinstance(target, CommOverlapConfig) and rest == "tp_comm_overlap_cfg":
            value = _preset(key, raw, value)
        else:
            value = _check(type(target), rest, key, raw, value)
            if (limit := _limit_of(key)) is not None:
                check_limit(limit, value, label=key)
        setattr(target, rest, value)
        typed.setdefault(head, []).append(rest)

    try:
        check_env_vars(env)
    except (TypeError, ValueError) as exc:
        raise OverrideError(str(exc)) from None
    # Every override is valid: write.
    for head, value in top.items():
        setattr(cfg, head, value)
    for head, obj in edited.items():
        current = getattr(cfg, head)
        if current is not obj:
            # Into the user's object, field by field, so references to it see the change.
            for f in dataclasses.fields(obj):
                new = getattr(obj, f.name)
                if getattr(current, f.name) is not new:
                    setattr(current, f.name, new)
        if head in _MEGATRON_SECTIONS and typed.get(head):
            # A typed value is the user's even where it equals megatron-core's default (the
            # plan reads a field at its default as not set, see comm_overlap.megatron_io).
            write_record.record(
                current,
                "typed",
                {name: (getattr(current, name), write_record.NOTHING) for name in typed[head]},
            )
    cfg.env_vars.update(env)
    return cfg


def _parse(raw: str) -> Any:
    try:
        return yaml_loader.load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


def _shallow_copy(obj: Any) -> Any:
    import copy

    return copy.copy(obj)
