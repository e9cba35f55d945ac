"""Command-line style overrides of a ``ConfigContainer``: ``"model.tensor_model_parallel_size=8"``.

:func:`apply_overrides` takes ``key=value`` strings. A key is a dotted path into one of the
container's sections (``model``, ``train``, ``optimizer``, ``ddp``, ``mixed_precision``,
``comm_overlap``), ``env_vars.NAME``, or a top-level setting (``gpu``, ``mixed_precision`` as a
preset name or ``null``, ``comm_overlap=null``).

Values are parsed as YAML scalars (``yaml.safe_load``: ``true``, ``8``, ``null``, ``[a, b]``),
the grammar upstream Megatron-Bridge's OmegaConf/Hydra overrides share for plain values (no
interpolation, no ``+``/``~`` prefixes), then checked against the target field's annotation:
``bool``, ``int``, ``float`` (YAML 1.1 reads ``1e-5`` as a string; it is accepted as a float),
``str``, ``Optional``, ``Literal`` (the error lists the values), ``torch.dtype`` by name, enums by
member name, functions as ``module:qualname``. ``comm_overlap.tp_comm_overlap_cfg=NAME`` takes a
published userbuffers preset by name (``null`` for TE's defaults, anything else is a YAML file
path that must exist). ``env_vars.NAME=VALUE`` takes VALUE verbatim as a string (it is exported
as text; ``true`` stays ``"true"``).

An unknown key gets a "did you mean" with the close field names; a bad value names the key and
the expected type. Both raise :class:`OverrideError` (a ``ValueError``).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import enum
import os
import types
import typing
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from megatron.bridge.training.config import ConfigContainer

__all__ = ["OVERRIDE_SECTIONS", "OverrideError", "apply_overrides", "parse_override"]

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


class OverrideError(ValueError):
    """An override that names no setting, or gives a value of the wrong type."""


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


def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # unresolvable forward references: fall back to what is there
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(key: str, raw: str, value: Any, tp: Any) -> Any:
    """``value`` (parsed from ``raw``) as type ``tp``; OverrideError naming ``key`` otherwise."""
    import torch

    origin = typing.get_origin(tp)
    if tp is Any or isinstance(tp, str | typing.TypeVar):
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arm in args:
            if arm is type(None):
                continue
            try:
                return _coerce(key, raw, value, arm)
            except OverrideError as exc:
                errors.append(exc)
        raise OverrideError(f"{key}={raw!r}: expected {_type_name(tp)}.")
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value in choices:
            return value
        raise OverrideError(f"{key}={raw!r}: expected one of {list(choices)}.")
    if value is None:
        raise OverrideError(f"{key}={raw!r}: expected {_type_name(tp)}, not null.")
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)  # YAML 1.1 reads 1e-5 (no dot) as a string
            except ValueError:
                pass
    elif tp is str:
        return value if isinstance(value, str) else raw.strip()
    elif tp is torch.dtype:
        dtype = getattr(torch, str(value).removeprefix("torch."), None)
        if isinstance(dtype, torch.dtype):
            return dtype
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, str) and value in tp.__members__:
            return tp[value]
        raise OverrideError(f"{key}={raw!r}: expected one of {list(tp.__members__)}.")
    elif origin in (list, tuple) and isinstance(value, list):
        args = typing.get_args(tp)
        item = args[0] if args else Any
        items = [_coerce(f"{key}[{i}]", str(v), v, item) for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    elif origin is dict or tp is dict:
        if isinstance(value, dict):
            return value
    elif origin is collections.abc.Callable or tp is collections.abc.Callable:
        # A function is named by its import path, "module:qualname".
        from megatron.bridge.training.serialization import _import_path

        if isinstance(value, str) and ":" in value:
            try:
                return _import_path(value, key)
            except ValueError as exc:
                raise OverrideError(str(exc)) from None
    elif isinstance(tp, type) and isinstance(value, tp):
        return value
    raise OverrideError(f"{key}={raw!r}: expected {_type_name(tp)}, got {type(value).__name__}.")


def _preset(key: str, raw: str, value: Any) -> Any:
    from megatron.bridge.training.userbuffers import PUBLISHED_PRESETS

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
    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.config import ConfigContainer, check_env_vars
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    if not isinstance(cfg, ConfigContainer):
        raise TypeError(f"apply_overrides expects a ConfigContainer, got {type(cfg).__name__}.")
    if isinstance(overrides, str):
        raise TypeError("apply_overrides takes a list of 'key=value' strings, not one string.")
    top: dict[str, Any] = {}
    # Section objects are copied on first edit, so nothing is written until all checks pass.
    edited: dict[str, Any] = {}
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
                from megatron.bridge.training import hardware

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
            continue
        if head == "env_vars":
            try:
                check_env_vars({rest: raw}, owner="env_vars")
            except (TypeError, ValueError) as exc:
                raise OverrideError(f"{key}: {exc}") from None
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
            value = _coerce(key, raw, value, _type_hints(type(target)).get(rest, Any))
        setattr(target, rest, value)

    try:
        check_env_vars(env)
    except (TypeError, ValueError) as exc:
        raise OverrideError(str(exc)) from None
    # Every override is valid: write.
    for head, value in top.items():
        setattr(cfg, head, value)
    for head, obj in edited.items():
        current = getattr(cfg, head)
        if current is obj:
            continue
        # Into the user's object, field by field, so references to it see the change.
        for f in dataclasses.fields(obj):
            new = getattr(obj, f.name)
            if getattr(current, f.name) is not new:
                setattr(current, f.name, new)
    cfg.env_vars.update(env)
    return cfg


def _parse(raw: str) -> Any:
    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


def _shallow_copy(obj: Any) -> Any:
    import copy

    return copy.copy(obj)
