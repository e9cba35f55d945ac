"""Command-line style overrides of a ``ConfigContainer``: ``"model.tensor_model_parallel_size=8"``.

:func:`apply_overrides` takes ``key=value`` strings. A key is a dotted path into one of the
container's sections (``model``, ``train``, ``optimizer``, ``ddp``, ``mixed_precision``,
``comm_overlap``), ``env_vars.NAME``, or a top-level setting (``gpu``, the cluster's
``gpus_per_node`` and ``nvlink_domain``, ``mixed_precision`` as a preset name or ``null``,
``comm_overlap=null``).

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

What the text alone decides is checked first, for all overrides, by
:func:`~megatron.bridge.training.override_syntax.parse_overrides` (torch-free, so the CLI checks
it before megatron-core is imported): ``key=value`` form, known keys and sections, a key given
twice with different values, a field set before its section is replaced. An unknown key gets a
"did you mean" with the close names and raises :class:`OverrideError` (a ``ValueError``). A bad value raises :class:`OverrideValueError`, both
an ``OverrideError`` and a ``value_types.ConfigValueError`` (the error a bad value from YAML or
Python raises), naming the override as typed, the expected type and the value:
``model.sequence_parallel='maybe': expected bool, got str 'maybe'``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Any

from megatron.bridge.training import write_record
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.config import ConfigContainer, check_env_vars
from megatron.bridge.training.mixed_precision import get_mixed_precision_config
from megatron.bridge.training.override_syntax import (
    OVERRIDE_SECTIONS,
    OverrideError,
    OverrideValueError,
    did_you_mean,
    parse_override,
    parse_overrides,
)
from megatron.bridge.training.userbuffers import PUBLISHED_PRESETS
from megatron.bridge.training.validators import LIMITS, check_limit
from megatron.bridge.training.value_types import ConfigValueError, check_field

__all__ = [
    "OVERRIDE_SECTIONS",
    "OverrideError",
    "OverrideValueError",
    "apply_overrides",
    "parse_override",
    "parse_overrides",
]

#: Sections holding megatron-core configs, whose typed fields are recorded as the user's.
_MEGATRON_SECTIONS = write_record.TYPED_SECTIONS
#: Override keys outside ``model`` whose bound is a job field's (``validators.LIMITS``).
_LIMITED_KEYS = {
    "train.micro_batch_size": "micro_batch_size",
    "train.global_batch_size": "global_batch_size",
}


def _limit_of(key: str) -> str | None:
    """The ``LIMITS`` entry an override key meets (``model.<field>`` are the job's names)."""
    name = _LIMITED_KEYS.get(key, key)
    return name if name in LIMITS else None


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
            f"{did_you_mean(value, PUBLISHED_PRESETS)} Use null for TE's defaults."
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
    # The text is checked whole first (parse_overrides): a bad key or a conflict changes nothing.
    parsed = parse_overrides(overrides)
    top: dict[str, Any] = {}
    # Section objects are copied on first edit, so nothing is written until all checks pass.
    edited: dict[str, Any] = {}
    # Section -> the fields typed in it, in order.
    typed: dict[str, list[str]] = {}
    env = dict(cfg.env_vars)
    for o in parsed:
        key, head, rest, raw, value = o.key, o.section, o.field, o.raw, o.value
        if not rest:
            if head == "mixed_precision" and value is not None:
                try:
                    value = get_mixed_precision_config(str(value))
                except (ValueError, KeyError) as exc:
                    raise OverrideError(f"{key}={raw!r}: {exc}") from None
            top[head] = value
            continue
        if head == "env_vars":
            env[rest] = raw
            continue
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
                f"{rest!r}.{did_you_mean(rest, names)}"
            )
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


def _shallow_copy(obj: Any) -> Any:
    import copy

    return copy.copy(obj)
