"""One type check for a config value, whatever it came from: YAML, ``key=value``, Python.

:func:`check_field` checks a value against a dataclass field's annotation;
:func:`check_value` against an annotation. ``ConfigContainer`` values come in three ways and all
of them meet this check: ``serialization.from_yaml`` (values already typed by the YAML parser:
a check), ``overrides.apply_overrides`` (text: ``text=`` adds the few readings a command line
needs, then the same check) and Python code (``check_fields`` on each section, run by
``runtime_config_update``). A value that fails raises :class:`ConfigValueError` whose message
names where it came from, the expected type and the value::

    config.yaml: model.sequence_parallel: expected bool, got str 'yes'

What each annotation admits:

- ``bool``: True or False, nothing else (not 0/1, not "yes"; YAML is read by
  ``yaml_loader.YamlLoader``, whose booleans are ``true``/``false`` only);
- ``int``: an int that is not a bool; ``float``: an int or a float, not a bool (an int becomes
  a float); ``str``: a str;
- ``Optional[X]`` / ``X | None``: None or what X admits; a union: what any arm admits, exact
  matches first;
- ``Literal[...]``: one of its values, of the same type (``True`` is not ``1``);
- an enum class: one of its members; ``torch.dtype`` and other classes: an instance;
- ``list[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``, ``set[X]``: a list or tuple (a set for
  ``set``) whose items X admits (a list where a tuple is expected becomes a tuple, as YAML has
  no tuple); ``dict[K, V]`` / ``Mapping[K, V]``: a mapping whose keys and values K and V admit;
- ``Callable``: a callable;
- ``Any``, a type variable or an annotation that does not resolve: anything.

A field whose default is None also admits None: megatron-core annotates many such fields as
plain ``int`` or ``torch.dtype`` and fills them in later.

With ``text`` (the raw text of a ``key=value`` override, parsed as a YAML scalar), a str is also
read as a float (YAML 1.1 reads ``1e-5`` as a string), a ``torch.dtype`` name, an enum member's
name or a function's ``module:qualname`` path, and a str field takes the text as written
(``model.name=123`` is "123").

Low level: imports nothing of this library but :mod:`megatron.bridge.training.validators`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import importlib
import inspect
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any

from megatron.bridge.training.validators import is_int

__all__ = [
    "BOOLEAN_WORDS",
    "ConfigValueError",
    "check_field",
    "check_fields",
    "check_value",
    "describe_type",
    "field_types",
    "import_object",
    "type_hints",
]


#: The words YAML 1.1 (PyYAML's ``safe_load``) reads as booleans besides true/false: here they
#: stay strings, and a bool field refuses them asking for true or false.
BOOLEAN_WORDS = frozenset(
    f(w) for w in ("yes", "no", "on", "off", "y", "n") for f in (str.lower, str.title, str.upper)
)


class ConfigValueError(TypeError, ValueError):
    """A config value its field's annotation does not admit: a wrong type, or not one of a
    ``Literal``'s values or an enum's members.

    Both a ``TypeError`` (a wrong type given in Python) and a ``ValueError`` (a bad value in a
    file or on a command line), so either ``except`` catches it. ``where`` names the source
    (the file, when there is one) and the dotted key; ``problem`` says what was expected and
    what came; the message is ``"{where}: {problem}"``.
    """

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where = where
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


def import_object(path: str, where: str) -> Any:
    """The object at ``"module:qualname"``; ``ValueError`` naming ``where`` when there is none."""
    module_name, sep, qualname = path.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"{where}: {path!r} is not 'module:qualname'.")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{where}: cannot import {module_name!r} ({exc}).") from None
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{where}: {module_name} has no {qualname!r}.") from None
    return obj


@functools.cache
def field_types(cls: type) -> Mapping[str, Any]:
    """Resolved annotations of the dataclass ``cls``'s fields (``typing.get_type_hints``, through
    :func:`type_hints`).

    When the class's annotations do not all resolve (a forward reference to a name its module
    imports only for type checkers), each field is resolved on its own and one that does not
    resolve maps to ``Any``: it is not checked.
    """
    try:
        return types.MappingProxyType(type_hints(cls))
    except Exception:
        pass
    return types.MappingProxyType(
        {f.name: _resolve_one(cls, f.name, f.type) for f in dataclasses.fields(cls)}
    )


def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, each distinct annotation text of a class evaluated once.

    ``get_type_hints`` compiles every annotation text on its own, the same text again for each
    field that repeats it (about 0.2 ms each; a description of a hundred fields repeats a dozen
    texts). Here the annotations of each class of the MRO go to ``get_type_hints`` once, as a
    stand-in class holding each distinct text, with the namespaces ``get_type_hints`` uses for
    that class: its module's, then its own body's.
    """
    hints: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        annotations = inspect.get_annotations(base)
        if not annotations:
            continue
        stand_in: dict[str, Any] = {}
        slot_of_text: dict[str, str] = {}
        slots: dict[str, str] = {}
        for name, value in annotations.items():
            slot = slot_of_text.get(value) if isinstance(value, str) else None
            if slot is None:
                slot = f"a{len(stand_in)}"
                stand_in[slot] = value
                if isinstance(value, str):
                    slot_of_text[value] = slot
            slots[name] = slot
        module = sys.modules.get(base.__module__)
        resolved = typing.get_type_hints(
            type("_Annotations", (), {"__annotations__": stand_in}),
            # get_type_hints' order for a class without explicit namespaces: names are looked up
            # in the module first, then in the class body.
            globalns=dict(vars(base)),
            localns=getattr(module, "__dict__", {}),
        )
        for name, slot in slots.items():
            hints[name] = resolved[slot]
    return hints


def _resolve_one(cls: type, name: str, annotation: Any) -> Any:
    # get_type_hints on a one-field class of the module that declared the field: the names the
    # annotation uses are looked up where it was written.
    owner = next(
        (c for c in cls.__mro__ if name in inspect.get_annotations(c)),
        cls,
    )
    probe = type("_Field", (), {"__annotations__": {name: annotation}})
    probe.__module__ = owner.__module__
    try:
        return typing.get_type_hints(probe)[name]
    except Exception:
        return Any


def _is_unchecked(tp: Any) -> bool:
    return tp is Any or tp is object or isinstance(tp, str | typing.TypeVar | typing.ForwardRef)


def _is_none(tp: Any) -> bool:
    return tp is None or tp is type(None)


def describe_type(tp: Any) -> str:
    """An annotation as an error message spells it: ``int``, ``bool or None``, ``list[str]``."""
    if _is_none(tp):
        return "None"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a) for a in args)
    if origin is typing.Literal:
        return f"one of {list(args)}"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return f"one of {[m.name for m in tp]} ({tp.__name__})"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        if origin is collections.abc.Callable:
            return "a function"
        if args:
            inner = ", ".join("..." if a is Ellipsis else describe_type(a) for a in args)
            return f"{name}[{inner}]"
        return name
    if tp is collections.abc.Callable:
        return "a function"
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _got(value: Any) -> str:
    if value is None:
        return "not null"
    return f"got {type(value).__name__} {value!r:.80}"


def _fail(where: str, tp: Any, value: Any) -> ConfigValueError:
    return ConfigValueError(where, f"expected {describe_type(tp)}, {_got(value)}")


def check_value(value: Any, annotation: Any, where: str, *, text: str | None = None) -> Any:
    """``value`` when ``annotation`` admits it (see the module docstring); else
    :class:`ConfigValueError` naming ``where``.

    Returns the value, widened where every source agrees: an int for a float becomes a float,
    a list for a tuple a tuple; with ``text``, the readings of a command line's text.
    """
    tp = annotation
    if _is_unchecked(tp):
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return check_value(value, args[0], where, text=text)
    if origin in (typing.Union, types.UnionType):
        return _check_union(value, tp, args, where, text)
    if origin is typing.Literal:
        for choice in args:
            if type(choice) is type(value) and choice == value:
                return choice
        if text is not None and text.strip() in args:
            return text.strip()
        raise _fail(where, tp, value)
    if _is_none(tp):
        if value is None:
            return None
        raise _fail(where, tp, value)
    if value is None:
        raise _fail(where, tp, value)
    if tp is bool:
        if type(value) is bool:
            return value
        if isinstance(value, str) and value.strip() in BOOLEAN_WORDS:
            raise ConfigValueError(
                where,
                f"expected bool, got str {value!r}: write true or false (booleans are "
                "true/false only; YAML 1.1's yes/no/on/off are not read as booleans)",
            )
    elif tp is int:
        if is_int(value):
            return value
    elif tp is float:
        if is_int(value) or isinstance(value, float):
            return float(value)
        if text is not None and isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
        if text is not None and not isinstance(value, list | dict):
            return text.strip()
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, tp):
            return value
        if text is not None and isinstance(value, str) and value in tp.__members__:
            return tp[value]
    elif origin is collections.abc.Callable or tp is collections.abc.Callable:
        if callable(value):
            return value
        if text is not None and isinstance(value, str) and ":" in value:
            return import_object(value, where)
    elif origin in (list, tuple, set, frozenset, collections.abc.Sequence):
        return _check_collection(value, tp, origin, args, where, text)
    elif origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping) or tp in (
        dict,
        collections.abc.Mapping,
    ):
        return _check_mapping(value, tp, args, where, text)
    elif tp in (list, tuple, set, frozenset):
        return _check_collection(value, tp, tp, (), where, text)
    elif _is_torch_dtype(tp):
        if isinstance(value, tp):
            return value
        if text is not None and isinstance(value, str):
            import torch

            dtype = getattr(torch, value.removeprefix("torch."), None)
            if isinstance(dtype, torch.dtype):
                return dtype
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    elif isinstance(origin, type):
        if isinstance(value, origin):
            return value
    else:
        return value  # a typing construct this check does not know: not checked
    raise _fail(where, tp, value)


def _is_torch_dtype(tp: Any) -> bool:
    return isinstance(tp, type) and tp.__module__ == "torch" and tp.__name__ == "dtype"


def _check_union(value: Any, tp: Any, args: tuple[Any, ...], where: str, text: str | None) -> Any:
    arms = [a for a in args if not _is_none(a)]
    if value is None and len(arms) < len(args):
        return None
    if len(arms) == 1:
        try:
            return check_value(value, arms[0], where, text=text)
        except ConfigValueError as exc:
            if exc.where != where:
                raise  # Optional[list[X]]: the error names the item
            raise _fail(where, tp, value) from None
    # Exact matches first: with text, a str arm would take any text.
    for reading in (None, text) if text is not None else (None,):
        for arm in arms:
            try:
                return check_value(value, arm, where, text=reading)
            except (ConfigValueError, ValueError):
                continue
    raise _fail(where, tp, value)


def _check_collection(
    value: Any, tp: Any, origin: Any, args: tuple[Any, ...], where: str, text: str | None
) -> Any:
    if origin in (set, frozenset):
        if not isinstance(value, set | frozenset):
            raise _fail(where, tp, value)
    elif not isinstance(value, list | tuple):
        raise _fail(where, tp, value)
    items = list(value)
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(items) != len(args):
            raise ConfigValueError(
                where,
                f"expected {describe_type(tp)} ({len(args)} items), got {len(items)} items "
                f"{value!r:.80}",
            )
        kinds = list(args)
    else:
        kinds = [args[0] if args else Any] * len(items)
    checked = [
        check_value(item, kind, f"{where}[{i}]")
        for i, (item, kind) in enumerate(zip(items, kinds, strict=True))
    ]
    if origin is tuple and not isinstance(value, tuple):
        return tuple(checked)
    if all(a is b for a, b in zip(checked, items, strict=True)):
        return value
    return type(value)(checked)


def _check_mapping(value: Any, tp: Any, args: tuple[Any, ...], where: str, text: str | None) -> Any:
    if not isinstance(value, collections.abc.Mapping):
        raise _fail(where, tp, value)
    key_tp, value_tp = args if len(args) == 2 else (Any, Any)
    out = {}
    changed = False
    for k, v in value.items():
        key = check_value(k, key_tp, f"{where} key {k!r}")
        item = check_value(v, value_tp, f"{where}.{k}")
        changed = changed or key is not k or item is not v
        out[key] = item
    return out if changed else value


def check_field(cls: type, name: str, value: Any, where: str, *, text: str | None = None) -> Any:
    """``value`` checked against field ``name`` of the dataclass ``cls`` (:func:`check_value`).

    None is admitted where the field's default is None, whatever the annotation says.
    """
    if value is None:
        for f in dataclasses.fields(cls):
            if f.name == name and f.default is None:
                return None
    return check_value(value, field_types(cls).get(name, Any), where, text=text)


def check_fields(obj: Any, where: str) -> None:
    """Check every init field of the dataclass instance ``obj`` (:func:`check_field`).

    ``where`` prefixes each key (``"cfg.model"`` gives ``cfg.model.num_layers: ...``). Fields
    whose names start with ``_`` are bookkeeping, not settings, and are skipped.
    """
    cls = type(obj)
    for f in dataclasses.fields(cls):
        if f.init and not f.name.startswith("_"):
            check_field(cls, f.name, getattr(obj, f.name), f"{where}.{f.name}")
