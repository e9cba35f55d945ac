"""A setup that changed nothing, remembered: the same inputs give its plan again, unresolved.

:meth:`CommOverlapConfig.setup <megatron.bridge.training.comm_overlap.CommOverlapConfig.setup>`
resolves the request against megatron-core's configs and writes the plan into them. The plan is a
function of its inputs alone: the request's fields, the configs' state, and the arguments
(data-parallel size, batch sizes, Transformer Engine status, GPU). A setup whose writes changed
no config left its inputs as it found them, so a later setup on the same inputs would resolve the
same plan and again write nothing. :func:`remember` keeps such a setup's inputs with its plan
when the setup repeats the previous one's request and arguments (:func:`call_key`; setups that
vary their arguments would pay for the copies and never use them); :meth:`SetupMemo.holds` tells
whether a later setup has those inputs.

The state of a config is everything it holds (``vars``: every field, and the record of the
library's own writes). Each value is compared by type and value, so a field set to 1.0 where it
held 1 is a new input. A container is copied when remembered and compared item by item with
``==``, so an edit in place is seen (but not an item replaced by an equal one of another type, 16
by 16.0). Nothing is remembered where an input cannot be compared that way:

- a value neither of a type that cannot change in place (None, bool, numbers, str, bytes, a bare
  sentinel ``object()``, an enum member, a function, a type, a torch dtype, a frozen dataclass
  holding only such values) nor a tuple, list, dict or set of those, nor a ``functools.partial``
  of a function over those (megatron-core's init methods), since an object of another type
  could be edited in place unseen;
- a config without ``__dict__``;
- a userbuffers config given as a file path (on the request or on a config), since every setup
  reads the file and its contents are not among the inputs compared.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import operator
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from megatron.bridge.training.comm_overlap.knobs import KNOBS
from megatron.bridge.training.userbuffers_file import reads_file

__all__ = ["SetupMemo", "call_key", "remember", "repeats"]

#: The knob whose value may name a file that setup reads (a userbuffers config as a YAML path).
_PRESET_KNOB = next(name for name, knob in KNOBS.items() if knob.kind == "preset")

#: Types whose values cannot change in place (a bare ``object()`` is a sentinel: it holds no
#: attributes and takes none).
_IMMUTABLE = frozenset(
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
        types.FunctionType,
        types.BuiltinFunctionType,
    }
)

#: Frozen dataclass objects found to hold only values that cannot change in place, by id (each
#: kept alive, so its id stays its own): such an object can never change, and a userbuffers
#: preset is some fifty of them. Emptied when it reaches ``_FROZEN_GRAPHS_KEPT`` entries.
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
    """Whether every item is of a type that cannot change in place (read at C speed)."""
    return _IMMUTABLE.issuperset(map(type, items))


def _settled(value: Any) -> Any:
    """``value`` itself where it cannot change in place, else an equal copy of it that holds no
    container of the original; raises ``_Unsettled`` for a value it cannot copy that way."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is dict:
        if not _atoms(value):
            return {_settled(key): _settled(item) for key, item in value.items()}
        if _atoms(value.values()):
            return dict(value)
        return {key: _settled(item) for key, item in value.items()}
    if kind is list or kind is set:
        return kind(value) if _atoms(value) else kind(map(_settled, value))
    if kind is tuple or kind is frozenset:
        if _atoms(value):
            return value
        items = tuple(map(_settled, value))
        same = all(a is b for a, b in zip(items, value, strict=True))
        return value if same and kind is tuple else kind(items)
    if isinstance(value, enum.Enum) or _is_torch_dtype(kind) or id(value) in _FROZEN_GRAPHS:
        return value
    if kind is functools.partial:
        return _PartialCopy(value)
    if _is_frozen_dataclass(kind) and hasattr(value, "__dict__"):
        items = vars(value).values()
        if _atoms(items) or all(_settled(item) is item for item in items):
            if len(_FROZEN_GRAPHS) >= _FROZEN_GRAPHS_KEPT:
                _FROZEN_GRAPHS.clear()
            _FROZEN_GRAPHS[id(value)] = value
            return value
    raise _Unsettled(kind.__name__)


class _PartialCopy:
    """A ``functools.partial`` as it stood (megatron-core's init methods are partials): equal to
    a partial of the same function with equal arguments and keywords."""

    __slots__ = ("args", "func", "keywords")

    def __init__(self, partial: functools.partial) -> None:
        if type(partial.func) not in _IMMUTABLE:
            raise _Unsettled(type(partial.func).__name__)
        self.func = partial.func
        self.args = _settled(partial.args)
        self.keywords = _settled(partial.keywords)

    def __eq__(self, other: object) -> bool:
        # A partial defines no __eq__: comparing one with this copy lands here.
        return (
            type(other) is functools.partial
            and other.func is self.func
            and other.args == self.args
            and other.keywords == self.keywords
        )

    __hash__ = None  # type: ignore[assignment]


#: The types a value may have besides :data:`_IMMUTABLE` ones and still be compared: the
#: containers, and those :func:`_settled` accepts by kind.
_CONTAINERS = frozenset({dict, list, set, tuple, frozenset, functools.partial})


def _check_kinds(values: Iterable[Any]) -> None:
    """Raise ``_Unsettled`` at once for a value of a type :func:`_settled` refuses whatever it
    holds (the common refusal, found before any copy is made)."""
    for kind in set(map(type, values)) - _IMMUTABLE - _CONTAINERS:
        if not (issubclass(kind, enum.Enum) or _is_torch_dtype(kind) or _is_frozen_dataclass(kind)):
            raise _Unsettled(kind.__name__)


class _Held:
    """Values as they stood (a dict's, or a tuple's): each by type and value, containers copied."""

    __slots__ = ("_copies", "_shallow", "_types")

    def __init__(self, values: dict[Any, Any] | tuple[Any, ...]) -> None:
        _check_kinds(_values_of(values))
        self._shallow = dict(values) if type(values) is dict else values
        self._types = tuple(map(type, _values_of(values)))
        items = values.items() if type(values) is dict else enumerate(values)
        copies = (
            (key, value, _settled(value)) for key, value in items if type(value) not in _IMMUTABLE
        )
        self._copies = {key: copy for key, value, copy in copies if copy is not value}

    def matches(self, values: dict[Any, Any] | tuple[Any, ...]) -> bool:
        """Whether ``values`` holds the same names, in the same order, with values of the same
        types and equal (1, 1.0 and True are three values here), containers item by item."""
        if values != self._shallow or tuple(map(type, _values_of(values))) != self._types:
            return False
        return all(values[key] == copy for key, copy in self._copies.items())


def _values_of(values: dict[Any, Any] | tuple[Any, ...]) -> Iterable[Any]:
    return values.values() if type(values) is dict else values


@functools.cache
def _field_getter(kind: type) -> Callable[[Any], tuple[Any, ...]]:
    # Every dataclass field of the request, read in one call (a tuple even for a single field).
    names = tuple(field.name for field in dataclasses.fields(kind))
    getter = operator.attrgetter(*names)
    return getter if len(names) > 1 else lambda request: (getter(request),)


def _decision_values(plan: Any) -> tuple[Any, ...]:
    return tuple(decision.value for decision in plan.decisions)


class SetupMemo:
    """The inputs of a setup that changed nothing, and its plan."""

    __slots__ = ("_arguments", "_fields", "_request_type", "_states", "_values", "plan")

    def __init__(
        self, request: Any, configs: Sequence[Any], arguments: tuple[Any, ...], plan: Any
    ) -> None:
        self._request_type = type(request)
        self._fields = _Held(_field_getter(type(request))(request))
        self._arguments = _Held(arguments)
        self._states = tuple(
            None if config is None else (type(config), _Held(vars(config))) for config in configs
        )
        self.plan = plan
        # The decisions' values as resolved: a userbuffers dict of the plan edited in place
        # since makes the plan no longer the one these inputs resolve to.
        self._values = _Held(_decision_values(plan))

    def holds(self, request: Any, configs: Sequence[Any], arguments: tuple[Any, ...]) -> bool:
        """Whether a setup of ``request`` on ``configs`` with ``arguments`` has these inputs."""
        kind = self._request_type
        try:
            if type(request) is not kind:
                return False
            if not self._arguments.matches(arguments):
                return False
            if not self._fields.matches(_field_getter(kind)(request)):
                return False
            if not self._values.matches(_decision_values(self.plan)):
                return False
            for config, state in zip(configs, self._states, strict=True):
                if config is None or state is None:
                    if config is not state:
                        return False
                elif type(config) is not state[0] or not state[1].matches(vars(config)):
                    return False
        except Exception:  # a value whose comparison raises (an array, a config without vars)
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
    Taking it copies every container the configs hold, some hundred microseconds on a large
    model config: setup takes it only when a call repeats the previous one (:func:`call_key`).
    """
    if reads_file(getattr(request, _PRESET_KNOB, None)) or any(
        reads_file(getattr(config, _PRESET_KNOB, None)) for config in configs
    ):
        return None
    try:
        return SetupMemo(request, configs, arguments, plan)
    except (_Unsettled, TypeError):  # TypeError: a config without __dict__
        return None
