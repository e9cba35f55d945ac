"""A setup that changed nothing, remembered: the same inputs give its plan again, unresolved.

:meth:`CommOverlapConfig.setup <megatron.bridge.training.comm_overlap.CommOverlapConfig.setup>`
resolves the request against megatron-core's configs and writes the plan into them. The plan is a
function of its inputs alone: the request's fields, the configs' state, and the arguments
(data-parallel size, batch sizes, Transformer Engine status, GPU). A setup whose writes put only
values equal to those there (``apply_plan``; the resolution reads the fields it writes by ``==``
alone) leaves inputs that resolve to the same plan, so a later setup on those very inputs would
resolve that plan and again write nothing new. :func:`remember` keeps such a setup's inputs with its plan
when the setup repeats the previous one's request and arguments (:func:`call_key`; setups that
vary their arguments would pay for the copies and never use them); :meth:`SetupMemo.holds` tells
whether a later setup has those inputs.

What "the same inputs" means, strictly, since the resolution reads some objects by identity (a
preset the recipe chose, the write records' sentinel):

- each value a config holds (``vars``: every field, and the record of the library's writes) and
  each field of the request is the very object it was, and each container among them (a dict,
  list, tuple or set; a ``functools.partial``, as megatron-core's init methods are; a function,
  whose name the description reads) holds what it held, item by item with types (1, 1.0 and True
  differ; a dict's order counts). A private attribute (a leading underscore, as the write
  record) is compared as the same object only: its owner replaces it rather than editing it;
- the arguments are equal with the same types throughout; the values of the plan's decisions and
  of the settings it found on the configs are as resolved (a plan edited in place is not reused;
  its containers are compared with ``==``).

The values the plan's writes replaced (kept in the write record, and read through it) count as
the request's fields do. Nothing is remembered where an input cannot be compared that way: a
value that can change in place and is none of those containers, nor an enum member, a torch
dtype or a frozen dataclass holding only such values; a config without ``__dict__``; a
userbuffers config given as a file path, on the request or on a config, now or as the value a
write replaced (every setup reads the file, and its contents are not among the inputs
compared). A deep copy or a pickle of the request drops the memo: the copy's objects are new,
and so are their identities.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import marshal
import operator
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from megatron.bridge.training import write_record
from megatron.bridge.training.comm_overlap.knobs import KNOBS
from megatron.bridge.training.userbuffers_file import reads_file

__all__ = ["SetupMemo", "call_key", "remember", "repeats"]

#: The knob whose value may name a file that setup reads (a userbuffers config as a YAML path).
_PRESET_KNOB = next(name for name, knob in KNOBS.items() if knob.kind == "preset")

#: Types whose values hold nothing that can change (a bare ``object()`` is a sentinel: it holds no
#: attributes and takes none; a builtin function's name cannot be reassigned).
_ATOMS = frozenset(
    {
        object,
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        range,
        type,
        types.BuiltinFunctionType,
    }
)

#: ``marshal``'s format 2, the last without back-references (whose flags follow whether an item
#: is also referenced elsewhere): equal plain data of the same types, in the same order, writes
#: the same bytes, and equal bytes read back as equal data of the same types.
_MARSHAL_VERSION = 2

#: Frozen dataclass objects found to hold only values that cannot change, by id (each kept alive,
#: so its id stays its own): such an object can never change, and a userbuffers preset is some
#: fifty of them. Emptied when it reaches ``_FROZEN_GRAPHS_KEPT`` entries.
_FROZEN_GRAPHS: dict[int, Any] = {}
_FROZEN_GRAPHS_KEPT = 4096


class _Unsettled(Exception):
    """A value that could change in place without the comparison seeing it."""


def _is_torch_dtype(kind: type) -> bool:
    return kind.__module__ == "torch" and kind.__name__ == "dtype"


def _is_frozen_dataclass(kind: type) -> bool:
    # The package's records say frozen in __record_frozen__ (their __dataclass_params__ says
    # False); a standard library dataclass says it in __dataclass_params__.
    params = getattr(kind, "__dataclass_params__", None)
    return bool(getattr(kind, "__record_frozen__", False)) or (params is not None and params.frozen)


def _atoms(items: Iterable[Any]) -> bool:
    """Whether every item is of an atom type (read at C speed)."""
    return _ATOMS.issuperset(map(type, items))


def _fixed(value: Any) -> bool:
    """Whether ``value`` can never change: an atom, an enum member, a torch dtype, or a frozen
    dataclass holding only such values (or tuples of them)."""
    kind = type(value)
    if kind in _ATOMS or isinstance(value, enum.Enum) or _is_torch_dtype(kind):
        return True
    if id(value) in _FROZEN_GRAPHS:
        return True
    if kind is tuple or kind is frozenset:
        return _atoms(value) or all(map(_fixed, value))
    frozen = _is_frozen_dataclass(kind) and hasattr(value, "__dict__")
    if frozen and all(map(_fixed, vars(value).values())):
        if len(_FROZEN_GRAPHS) >= _FROZEN_GRAPHS_KEPT:
            _FROZEN_GRAPHS.clear()
        _FROZEN_GRAPHS[id(value)] = value
        return True
    return False


class _PartialCopy:
    """A ``functools.partial`` as it stood: the same function (under the same names), and equal
    arguments and keywords of the same types."""

    __slots__ = ("func", "names", "parts")

    def __init__(self, partial: functools.partial) -> None:
        self.func = partial.func
        self.names = _names(partial.func)
        self.parts = _content((partial.args, partial.keywords))

    def matches(self, value: Any) -> bool:
        return (
            type(value) is functools.partial
            and value.func is self.func
            and _names(value.func) == self.names
            and (self.parts is None or _unchanged((value.args, value.keywords), self.parts))
        )


def _names(function: Any) -> tuple[str, str, str] | None:
    # What a Python function's identity does not fix: its names can be reassigned.
    if type(function) is not types.FunctionType:
        return None
    return function.__name__, function.__qualname__, function.__module__


class _FunctionCopy:
    """A Python function as it stood: the same object under the same names."""

    __slots__ = ("function", "names")

    def __init__(self, function: types.FunctionType) -> None:
        self.function = function
        self.names = _names(function)

    def matches(self, value: Any) -> bool:
        return value is self.function and _names(value) == self.names


def _copied(value: Any) -> Any:
    """A copy of what ``value`` holds, for :func:`_exact`: containers copied item by item, a
    partial or a function as its parts, anything that can never change as itself; raises
    ``_Unsettled`` for anything else."""
    kind = type(value)
    if kind is dict:
        return {_copied(key): _copied(item) for key, item in value.items()}
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        return kind(map(_copied, value))
    if kind is functools.partial:
        return _PartialCopy(value)
    if kind is types.FunctionType:
        return _FunctionCopy(value)
    if _fixed(value):
        return value
    raise _Unsettled(kind.__name__)


def _exact(value: Any, copy: Any) -> bool:
    """Whether ``value`` holds what :func:`_copied` copied: the same types throughout, equal
    atoms, the same keys in the same order, the very objects where nothing could change."""
    kind = type(copy)
    if kind is _PartialCopy or kind is _FunctionCopy:
        return copy.matches(value)
    if type(value) is not kind:
        return False
    if kind is dict:
        return (
            len(value) == len(copy)
            and all(
                map(_exact, value, copy)  # the keys, in order
            )
            and all(map(_exact, value.values(), copy.values()))
        )
    if kind is list or kind is tuple:
        return len(value) == len(copy) and all(map(_exact, value, copy))
    if kind is set or kind is frozenset:
        return {(type(v), v) for v in value} == {(type(v), v) for v in copy}
    if kind in _ATOMS:
        return value == copy or value is copy
    return value is copy


_MARSHALLED = "marshal"
_COPIED = "copy"
_EQUAL = "equal"


def _content(value: Any, *, exact: bool = True) -> tuple[str, Any] | None:
    """What ``value`` holds, to compare later (:func:`_unchanged`): plain data as its ``marshal``
    bytes (types, order and values at C speed), anything else as :func:`_copied` copies it; None
    for a value that can never change. Not ``exact``: a copy, compared with ``==``."""
    if type(value) in _ATOMS:
        return None
    if not exact:
        return None if _fixed(value) else (_EQUAL, _copied(value))
    try:
        return _MARSHALLED, marshal.dumps(value, _MARSHAL_VERSION)
    except ValueError:  # holds something marshal does not write (an enum, a record, a sentinel)
        pass
    if _fixed(value):
        return None
    return _COPIED, _copied(value)


def _unchanged(value: Any, content: tuple[str, Any]) -> bool:
    how, held = content
    if how is _MARSHALLED:
        try:
            return marshal.dumps(value, _MARSHAL_VERSION) == held
        except ValueError:
            return False
    if how is _EQUAL:
        return bool(value == held)
    return _exact(value, held)


class _Objects:
    """A mapping's or a tuple's values as they stood: the same objects, holding the same."""

    __slots__ = ("_contents", "_keys", "_objects")

    def __init__(self, values: dict[Any, Any] | tuple[Any, ...]) -> None:
        is_dict = type(values) is dict
        self._objects = tuple(values.values()) if is_dict else values
        self._keys = tuple(values) if is_dict else None
        items = values.items() if is_dict else enumerate(values)
        contents = (
            (key, _content(value))
            for key, value in items
            if type(value) not in _ATOMS
            and not (is_dict and isinstance(key, str) and key.startswith("_"))
        )
        self._contents = {key: content for key, content in contents if content is not None}

    def matches(self, values: dict[Any, Any] | tuple[Any, ...]) -> bool:
        """Whether ``values`` holds the same objects under the same names, in the same order,
        each container holding what it held."""
        objects = self._objects
        if type(values) is dict:
            if tuple(values) != self._keys:
                return False
            live: Iterable[Any] = values.values()
        else:
            live = values
        if len(values) != len(objects) or not all(map(operator.is_, live, objects)):
            return False
        return all(_unchanged(values[key], held) for key, held in self._contents.items())


class _Equal:
    """Values as they stood, each equal and of the same type, and each container holding what it
    held: item by item with types, or (not ``exact``) equal to a copy of it."""

    __slots__ = ("_contents", "_types", "_values")

    def __init__(self, values: tuple[Any, ...], *, exact: bool = True) -> None:
        self._values = values
        self._types = tuple(map(type, values))
        contents = (
            (index, _content(value, exact=exact))
            for index, value in enumerate(values)
            if type(value) not in _ATOMS
        )
        self._contents = {index: content for index, content in contents if content is not None}

    def matches(self, values: tuple[Any, ...]) -> bool:
        if values != self._values or tuple(map(type, values)) != self._types:
            return False
        return all(_unchanged(values[index], held) for index, held in self._contents.items())


@functools.cache
def _field_getter(kind: type) -> Callable[[Any], tuple[Any, ...]]:
    # Every dataclass field of the request, read in one call (a tuple even for a single field).
    names = tuple(field.name for field in dataclasses.fields(kind))
    getter = operator.attrgetter(*names)
    return getter if len(names) > 1 else lambda request: (getter(request),)


def _plan_values(plan: Any) -> tuple[Any, ...]:
    # What a caller could edit in place on a plan: its decisions' values and the values of the
    # settings it found written on the configs.
    return (
        *(decision.value for decision in plan.decisions),
        *(value for _config, _knob, value in plan.job.direct_settings),
    )


def _forgotten() -> None:
    return None


class SetupMemo:
    """The inputs of a setup that changed nothing, and its plan."""

    __slots__ = (
        "_arguments",
        "_fields",
        "_plan_values",
        "_replaced",
        "_request_type",
        "_states",
        "plan",
        "preset",
    )

    def __init__(
        self, request: Any, configs: Sequence[Any], arguments: tuple[Any, ...], plan: Any
    ) -> None:
        self._request_type = type(request)
        self._fields = _Objects(_field_getter(type(request))(request))
        self._arguments = _Equal(arguments)
        self._states = tuple(
            None if config is None else (type(config), _Objects(vars(config))) for config in configs
        )
        # The user's values the plan's writes replaced: the resolution reads them through the
        # write record (a dict of the user's own, which the user may still edit in place). The
        # record is the same object when the configs match, so only what such a value holds
        # needs comparing: (config index, field, content) for each that can change.
        self._replaced = tuple(
            (index, field, content)
            for index, config in enumerate(configs)
            if config is not None
            for field, (_written, replaced) in write_record.records(config, "plan").items()
            if (content := _content(replaced)) is not None
        )
        self.plan = plan
        #: The request's loaded userbuffers config, as the remembered setup's finalize() left it.
        self.preset = getattr(request, "preset", None)
        # The plan's own containers, edited in place since, are seen as an unequal item (an
        # item made an equal one of another type is not: the plan is output, not input).
        self._plan_values = _Equal(_plan_values(plan), exact=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> None:
        # A deep copy's objects are new: none is the object the resolution compared by identity.
        return None

    def __reduce__(self) -> tuple[Callable[[], None], tuple[()]]:
        return _forgotten, ()

    def holds(self, request: Any, configs: Sequence[Any], arguments: tuple[Any, ...]) -> bool:
        """Whether a setup of ``request`` on ``configs`` with ``arguments`` has these inputs."""
        kind = self._request_type
        try:
            if type(request) is not kind or not self._arguments.matches(arguments):
                return False
            if not self._fields.matches(_field_getter(kind)(request)):
                return False
            if not self._plan_values.matches(_plan_values(self.plan)):
                return False
            for config, state in zip(configs, self._states, strict=True):
                if config is None or state is None:
                    if config is not state:
                        return False
                elif type(config) is not state[0] or not state[1].matches(vars(config)):
                    return False
            for index, field, content in self._replaced:
                if not _unchanged(write_record.records(configs[index], "plan")[field][1], content):
                    return False
        except Exception:  # a value whose comparison raises (a config without vars, ...)
            return False
        return True


def call_key(request: Any, arguments: tuple[Any, ...]) -> tuple[Any, ...]:
    """The request's fields and the arguments of a setup, as given (no copies): a setup that
    changed nothing is remembered when its call key equals the previous setup's
    (:func:`repeats`)."""
    return type(request), _field_getter(type(request))(request), arguments


def repeats(call: tuple[Any, ...], previous: tuple[Any, ...] | None) -> bool:
    """Whether a setup's call key equals the previous setup's (False where comparing raises)."""
    try:
        return previous is not None and bool(call == previous)
    except Exception:  # a field whose comparison raises: finalize() names it next
        return False


def remember(
    request: Any, configs: Sequence[Any], arguments: tuple[Any, ...], plan: Any
) -> SetupMemo | None:
    """The memo of a setup that changed nothing: its inputs as they stand now, and its plan.

    None where an input cannot be compared safely (the module's docstring lists the cases).
    Taking it copies every container the inputs hold (some hundreds of microseconds on a
    finalized model config): setup takes it only when a call repeats the previous one
    (:func:`call_key`).
    """
    presets = [getattr(request, _PRESET_KNOB, None)]
    for config in configs:
        if config is not None:
            recorded = write_record.records(config, "plan").get(_PRESET_KNOB)
            presets += [getattr(config, _PRESET_KNOB, None), *(recorded or ())]
    if any(map(reads_file, presets)):
        return None
    try:
        return SetupMemo(request, configs, arguments, plan)
    except Exception:  # _Unsettled; a config without __dict__; a value too deep to copy, ...
        return None
