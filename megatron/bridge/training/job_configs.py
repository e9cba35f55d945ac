"""The model description and megatron-core's model config, one function each way.

:func:`describe_model` reads a ``TransformerConfig`` (or a GPT provider) into a
:class:`~megatron.bridge.training.job.ModelDescription`; :func:`write_model` writes a description
onto one. Both go field by field over the description's fields, whose names are megatron-core's,
so a new field needs no edit here. Attribute access only: this module imports no torch.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable
from typing import Any

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.validators import LIMITS

__all__ = ["describe_model", "model_fields", "write_model"]


@functools.cache
def model_fields() -> tuple[dataclasses.Field, ...]:
    """The fields of :class:`ModelDescription`, in declaration order."""
    return dataclasses.fields(ModelDescription)


def _cuda_graph_modules(raw: Any) -> tuple[str, ...]:
    # megatron-core 0.19 normalizes cuda_graph_modules to CudaGraphModule members in
    # __post_init__ and migrates the deprecated cuda_graph_scope into it; a value set after
    # construction may still be a string or a list of strings. "full" (and an empty list) mean
    # the whole layer, which names no module.
    names: list[str] = []
    items = raw if isinstance(raw, list | tuple) else [] if raw is None else [raw]
    for item in items:
        name = getattr(item, "name", item)
        if isinstance(name, str) and name != "full" and name not in names:
            names.append(name)
    return tuple(names)


def _pipeline_layout(raw: Any) -> str | tuple[tuple[str, ...], ...] | None:
    # TransformerConfig.__post_init__ replaces a str or list layout by a
    # PipelineParallelLayerLayout, which keeps what the user gave as input_data. The list form
    # may name layers by LayerType members; the description holds their names.
    raw = getattr(raw, "input_data", raw)
    if raw is None or isinstance(raw, str):
        return raw
    return tuple(tuple(getattr(layer, "name", layer) for layer in stage) for stage in raw)


def _listed(value: Any) -> Any:
    # megatron-core's list forms (recompute_modules, moe_layer_freq, window_attn_skip_freq) are
    # tuples in the frozen description.
    return tuple(value) if isinstance(value, list) else value


# How describe_model reads the common fields, inline (every setup reads all of them): as held
# (a list as a tuple), for truth, or with megatron-core's 0 read as unset (None).
_AS_HELD = "as held"
_TRUTH = "truth"
_ZERO_UNSET = "zero unset"


def _reader(field: dataclasses.Field) -> tuple[str, Any, str | Callable[[Any], Any]]:
    """How field ``field`` of the description is read off a megatron-core model config:
    ``(name, default, how)``, ``how`` one of the kinds above or a function of the config."""
    name, default = field.name, field.default
    if name == "pipeline_model_parallel_layout":
        return name, default, lambda config: _pipeline_layout(getattr(config, name, None))
    if name == "cuda_graph_modules":
        return (
            name,
            default,
            lambda config: _cuda_graph_modules(
                [
                    *_cuda_graph_modules(getattr(config, "cuda_graph_modules", None)),
                    *_cuda_graph_modules(getattr(config, "cuda_graph_scope", None)),
                ]
            ),
        )
    if name == "activation_func":
        return (
            name,
            default,
            lambda config: getattr(
                value := getattr(config, name, default), "__name__", _listed(value)
            ),
        )
    if isinstance(default, bool):
        # megatron-core reads these flags for truth; the description holds the bool.
        return name, default, _TRUTH
    limit = LIMITS.get(f"model.{name}")
    if default is None and (limit is None or limit.minimum <= 0):
        # megatron-core's "unset" for the shape counts (num_layers, hidden_size, heads) is 0.
        # A 0 below the field's bound is held instead, so check_limits refuses it on every route
        # (a model built with hidden_size=0 plans negative or zero bytes and FLOPs).
        return name, None, _ZERO_UNSET
    return name, default, _AS_HELD


@functools.cache
def _readers() -> tuple[tuple[str, Any, str | Callable[[Any], Any]], ...]:
    # The plain fields (read by getattr, then converted by kind) first, then those read by a
    # function of the config; the description is built by keyword, so the order is free.
    readers = tuple(_reader(field) for field in model_fields())
    return tuple(r for r in readers if not callable(r[2])) + tuple(
        r for r in readers if callable(r[2])
    )


@functools.cache
def _plain() -> tuple[Callable[[Any], tuple[Any, ...]], tuple[tuple[str, Any, str], ...]]:
    """One C-level getter of every plain field (raises AttributeError for a field the config
    does not declare), and the plain readers, in :func:`_readers` order."""
    plain = tuple(r for r in _readers() if not callable(r[2]))
    return operator.attrgetter(*(name for name, _default, _how in plain)), plain


@functools.cache
def _functions() -> tuple[Callable[[Any], Any], ...]:
    return tuple(how for _name, _default, how in _readers() if callable(how))


#: The types of a plain value read off the config that the raw cache key holds as they are:
#: immutable, hashable, and converted by the field's kind alone.
_SCALARS = frozenset({type(None), bool, int, float, str})
_SCALARS_AND_TUPLES = _SCALARS | {tuple}


def describe_model(model_config: Any) -> ModelDescription:
    """The description of a megatron-core model config, read field by field as it stands.

    A field the config does not declare (``seq_length`` on a plain ``TransformerConfig``) keeps
    the description's default. The config need not be finalized.
    """
    getter, plain = _plain()
    try:
        raw = getter(model_config)
    except AttributeError:  # a field the config does not declare: read one by one
        raw = tuple(getattr(model_config, name, default) for name, default, _how in plain)
    computed = tuple(read(model_config) for read in _functions())
    raw_types = tuple(map(type, raw))
    if list in raw_types:
        # megatron-core's list fields (offload_modules, recompute_modules) as the tuples the
        # description holds: hashable, so the common case below still keys the cache.
        raw = tuple(tuple(v) if type(v) is list else v for v in raw)
        raw_types = tuple(map(type, raw))
    if _SCALARS_AND_TUPLES.issuperset(raw_types):
        # Every plain value a scalar or a tuple (the common case): the description is a pure
        # function of what was read, keyed with each value's type, inside tuples too (1, 1.0
        # and True are equal and hash alike).
        inner = tuple(_typed(v) for v in raw if type(v) is tuple) if tuple in raw_types else ()
        key = (raw, raw_types, inner, computed, tuple(map(_typed, computed)))
        try:
            hash(key)
        except TypeError:  # a computed value megatron-core holds unhashed
            return _description(_converted(raw, plain) + computed)
        return _described_raw(key)
    values = _converted(raw, plain) + computed
    # The values, their types, and the types inside the tuples among them (_typed).
    types = tuple(map(type, values))
    key = (
        values,
        types,
        tuple(_typed(v) for v in values if type(v) is tuple) if tuple in types else (),
    )
    try:
        hash(key)
    except TypeError:  # a value megatron-core holds unhashed: describe it without the cache
        return _description(values)
    return _described(key)


def _converted(raw: tuple[Any, ...], plain: tuple[tuple[str, Any, str], ...]) -> tuple[Any, ...]:
    """The plain values as the description holds them: flags as bools, megatron-core's 0 as
    unset (None) for the counts, lists as tuples."""
    read: list[Any] = []
    for (_name, _default, how), value in zip(plain, raw, strict=True):
        if how is _TRUTH:
            read.append(bool(value))
            continue
        if isinstance(value, list):  # _listed, without a call per field
            value = tuple(value)
        if how is _ZERO_UNSET and value == 0 and not isinstance(value, bool):
            value = None
        read.append(value)
    return tuple(read)


def _typed(value: Any) -> Any:
    # The cache key holds each value with its type, inside tuples too: 1, 1.0 and True are equal
    # and hash alike, but the description of one is not the description of the other.
    if type(value) is tuple:
        return (tuple, tuple(_typed(item) for item in value))
    return (type(value), value)


def _description(values: tuple[Any, ...]) -> ModelDescription:
    return ModelDescription(**dict(zip(_names(), values, strict=True)))


@functools.lru_cache(maxsize=256)
def _described(key: tuple[Any, ...]) -> ModelDescription:
    # A description is a pure, frozen function of the values read (key[0]): a setup that reads
    # the same configs again gets the same object instead of building every field anew.
    return _description(key[0])


@functools.lru_cache(maxsize=256)
def _described_raw(key: tuple[Any, ...]) -> ModelDescription:
    # The same, keyed by the plain values as read (key[0], lists as tuples) and the computed
    # values (key[3]): a setup that reads the same configs again skips the conversion too.
    return _description(_converted(key[0], _plain()[1]) + key[3])


@functools.cache
def _names() -> tuple[str, ...]:
    return tuple(name for name, _default, _how in _readers())


def write_model(model_config: Any, model: ModelDescription) -> None:
    """Write every field of ``model`` onto ``model_config`` (a GPT provider), by name.

    Tuples are written as the lists megatron-core holds (``recompute_modules``, a
    ``pipeline_model_parallel_layout`` as a list of lists); an empty ``cuda_graph_modules`` is
    megatron-core's "full" (the whole layer).
    """
    for field in model_fields():
        value = getattr(model, field.name)
        if field.name == "activation_func":
            value = _activation(value)
        elif field.name == "cuda_graph_modules":
            value = list(value) if value else "full"
        elif field.name == "pipeline_model_parallel_layout" and isinstance(value, tuple):
            # megatron-core's list form: a list of stages, each a list (its __init__ asserts).
            value = [list(stage) for stage in value]
        elif isinstance(value, tuple):
            value = list(value)
        setattr(model_config, field.name, value)


def _activation(name: str) -> Any:
    # The callable megatron-core's activation_func holds (torch: only when a config is written).
    # quick_gelu is fused_bias_geglu's: TransformerConfig.__post_init__ (bias_activation_fusion,
    # glu_linear_offset), MLP and TEGroupedMLP (the fused quick-GeGLU paths) compare the field
    # with that function by identity, and Megatron-Bridge's GPT-OSS provider sets it
    # (models/gpt_oss/gpt_oss_bridge.py); megatron.core.activations.quick_gelu is another object.
    import torch.nn.functional as F
    from megatron.core import activations
    from megatron.core.fusions import fused_bias_geglu

    functions = {
        "gelu": F.gelu,
        "silu": F.silu,
        "relu": F.relu,
        "quick_gelu": fused_bias_geglu.quick_gelu,
        "squared_relu": activations.squared_relu,
    }
    if name not in functions:
        raise ValueError(
            f"activation_func={name!r} is not one of megatron-core's activations; choose one of "
            f"{sorted(functions)}."
        )
    return functions[name]
