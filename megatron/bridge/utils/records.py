"""``record``: the standard library's ``dataclasses.dataclass``, with its methods added without
compiling them class by class.

``dataclasses.dataclass`` compiles every method it adds from generated source text, class by
class, each time the module is imported: on Python 3.12 some 0.3-0.5 ms per method, six methods
for a frozen class, about 90 ms for the 52 dataclasses on ``bridge-overlap explain``'s import
path. :func:`record` lets the standard library find the fields (``dataclasses.fields``, defaults,
default factories, ``kw_only`` and ``KW_ONLY``, the class attributes) and adds the methods itself:

- ``__init__``: the parameters, defaults, annotations, field assignments (through
  ``object.__setattr__`` on frozen classes) and ``__post_init__`` call of the generated one, from
  the same kind of source text. The text is compiled only when
  :mod:`megatron.bridge.utils.record_code` does not hold it ready-made: that module holds the
  text of every record class of the package (``python scripts/render_records.py`` writes it, and
  a test fails when it differs), so the package's classes compile nothing;
- on frozen classes, ``__setattr__`` and ``__delattr__``: closures over the field names raising
  ``FrozenInstanceError`` with the generated methods' messages;
- ``__eq__``: ``NotImplemented`` unless both objects are of the same class; otherwise the tuples
  of the ``compare`` fields, compared;
- ``__hash__``: the hash of the tuple of the fields whose ``hash`` is true (``compare`` where
  ``hash`` is None), on frozen classes; None (unhashable) on mutable ones; a ``__hash__`` the
  class body defines is kept;
- ``__repr__``: ``QualName(field=value!r, ...)`` over the ``repr`` fields, ``...`` for an object
  already being printed on this thread.

A method the class body defines is kept, as ``dataclass`` keeps it, and the errors for a
non-default field after a default one and for a frozen class that defines ``__setattr__`` are
``dataclass``'s. ``dataclasses.fields`` / ``replace`` / ``asdict`` work as on any dataclass.
Differences: ``__dataclass_params__`` says ``init``, ``repr``, ``eq`` and ``frozen`` False, since
the standard library added none of those methods; ``order``, ``unsafe_hash``, ``slots`` and
``InitVar`` fields are not offered (use ``dataclass`` for them), nor is a subclass of a frozen
class made by ``dataclass``.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import sys
import types
from collections.abc import Callable
from threading import get_ident
from typing import Any, dataclass_transform

from megatron.bridge.utils import record_code

__all__ = ["INIT_SOURCES", "record"]

INIT_SOURCES: dict[str, str] = {}
"""``module:QualName`` of every record class with a generated ``__init__`` -> that ``__init__``'s
source text (what :mod:`megatron.bridge.utils.record_code` holds compiled)."""

_FIELDS = "__dataclass_fields__"
_FROZEN = "__record_frozen__"
"""Class attribute: whether a record class is frozen (its ``__dataclass_params__`` says False)."""


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record[T](
    cls: type[T] | None = None,
    /,
    *,
    frozen: bool = False,
    kw_only: bool = False,
    init: bool = True,
    eq: bool = True,
    repr: bool = True,
) -> Any:
    """Make ``cls`` a dataclass, as ``@dataclasses.dataclass(frozen=..., kw_only=...)`` does."""

    def wrap(cls: type[T]) -> type[T]:
        _check_bases(cls, frozen=frozen)
        needs_doc = not cls.__doc__
        cls = dataclasses.dataclass(
            cls, init=False, repr=False, eq=False, frozen=False, kw_only=kw_only
        )
        setattr(cls, _FROZEN, frozen)
        fields = dataclasses.fields(cls)
        if any(f._field_type is dataclasses._FIELD_INITVAR for f in vars(cls)[_FIELDS].values()):
            raise TypeError(
                f"{cls.__qualname__}: record does not take InitVar fields; use dataclass"
            )
        if init and "__init__" not in cls.__dict__:
            _install(cls, _init(cls, fields, frozen=frozen))
        if frozen:
            _add_frozen(cls, fields)
        if repr and "__repr__" not in cls.__dict__:
            _install(cls, _repr(tuple(f.name for f in fields if f.repr)))
        if eq:
            _add_eq_and_hash(cls, fields, frozen=frozen)
        if needs_doc:
            cls.__doc__ = _signature_doc(cls)
        return cls

    return wrap if cls is None else wrap(cls)


def _is_frozen(cls: type) -> bool:
    return vars(cls).get(_FROZEN, cls.__dataclass_params__.frozen)


def _check_bases(cls: type, *, frozen: bool) -> None:
    # dataclass's rule: frozen and non-frozen dataclasses do not inherit from each other.
    bases = [b for b in cls.__mro__[1:] if _FIELDS in vars(b)]
    if not bases:
        return
    for base in bases:
        if _FROZEN not in vars(base) and base.__dataclass_params__.frozen:
            raise TypeError(
                f"{cls.__qualname__}: record does not extend {base.__qualname__}, a frozen class "
                "made by dataclass; make the subclass a dataclass"
            )
    any_frozen = any(_is_frozen(b) for b in bases)
    if any_frozen and not frozen:
        raise TypeError("cannot inherit non-frozen dataclass from a frozen one")
    if not any_frozen and frozen:
        raise TypeError("cannot inherit frozen dataclass from a non-frozen one")


def _install(cls: type, method: Callable[..., Any]) -> None:
    # Set the method on the class under its own name, qualified by the class as dataclass does.
    method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
    setattr(cls, method.__name__, method)


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _init(cls: type, fields: tuple[dataclasses.Field, ...], *, frozen: bool) -> Callable[..., None]:
    """``cls.__init__`` as dataclass generates it (its ``_init_fn``), over ``fields``."""
    positional = [f for f in fields if f.init and not f.kw_only]
    keyword = [f for f in fields if f.init and f.kw_only]
    seen_default = False
    for f in positional:
        if _has_default(f):
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
    this = "__dataclass_self__" if "self" in {f.name for f in fields} else "self"
    # The names the source text uses, bound by the factory that returns __init__.
    bound: dict[str, Any] = {
        "__record_set__": object.__setattr__,
        "__record_factory__": dataclasses._HAS_DEFAULT_FACTORY,
    }

    def parameter(f: dataclasses.Field) -> str:
        if f.default is not dataclasses.MISSING:
            bound[f"__record_default_{f.name}__"] = f.default
            return f"{f.name}=__record_default_{f.name}__"
        if f.default_factory is not dataclasses.MISSING:
            return f"{f.name}=__record_factory__"
        return f.name

    parameters = [this, *map(parameter, positional)]
    if keyword:
        parameters += ["*", *map(parameter, keyword)]
    lines = []
    for f in fields:
        if f.default_factory is not dataclasses.MISSING:
            factory = f"__record_make_{f.name}__"
            bound[factory] = f.default_factory
            value = f"{factory}() if {f.name} is __record_factory__ else {f.name}"
            value = value if f.init else f"{factory}()"
        elif f.init:
            value = f.name
        else:
            continue  # the class attribute holds the default
        if frozen:
            lines.append(f"__record_set__({this}, {f.name!r}, {value})")
        else:
            lines.append(f"{this}.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        lines.append(f"{this}.__post_init__()")
    source = (
        f"def __create_fn__({', '.join(bound)}):\n"
        f"    def __init__({', '.join(parameters)}):\n"
        + "".join(f"        {line}\n" for line in lines or ["pass"])
        + "    return __init__\n"
    )
    INIT_SOURCES[f"{cls.__module__}:{cls.__qualname__}"] = source
    module = sys.modules.get(cls.__module__)
    namespace = module.__dict__ if module is not None else {}
    ready = record_code.FACTORIES.get(source)
    if ready is not None:
        factory = types.FunctionType(ready.__code__, namespace, "__create_fn__")
    else:
        made: dict[str, Any] = {}
        exec(source, namespace, made)
        factory = made["__create_fn__"]
    init = factory(*bound.values())
    init.__annotations__ = {f.name: f.type for f in (*positional, *keyword)} | {"return": None}
    return init


def _add_frozen(cls: type, fields: tuple[dataclasses.Field, ...]) -> None:
    # dataclass's frozen methods: any assignment or deletion on the class itself, and of a field
    # on a subclass, raises; other names on a subclass go to the next class in the MRO.
    for name in ("__setattr__", "__delattr__"):
        if name in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
    names = frozenset(f.name for f in fields)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    _install(cls, __setattr__)
    _install(cls, __delattr__)


def _signature_doc(cls: type) -> str:
    # The docstring dataclass gives a class without one: its name and __init__'s signature.
    try:
        text = str(inspect.signature(cls)).replace(" -> None", "")
    except (TypeError, ValueError):
        text = ""
    return cls.__name__ + text


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    # The tuple (self.a, self.b, ...) the generated methods build: attrgetter returns a tuple for
    # two names or more, the bare value for one.
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names)


def _add_eq_and_hash(cls: type, fields: tuple[dataclasses.Field, ...], *, frozen: bool) -> None:
    # dataclass's rule for eq=True without unsafe_hash, read off the class body before __eq__ is
    # added: a __hash__ the body defines stays (the None Python sets because the body defines
    # __eq__ does not count); otherwise frozen classes hash their fields and mutable ones are
    # unhashable.
    body_hash = cls.__dict__.get("__hash__", dataclasses.MISSING)
    body_eq = "__eq__" in cls.__dict__
    explicit_hash = not (body_hash is dataclasses.MISSING or (body_hash is None and body_eq))
    if not body_eq:
        key = _values(tuple(f.name for f in fields if f.compare))

        def __eq__(self: Any, other: Any) -> Any:
            if other.__class__ is self.__class__:
                return key(self) == key(other)
            return NotImplemented

        _install(cls, __eq__)
    if explicit_hash:
        return
    if not frozen:
        cls.__hash__ = None
        return
    hashed = _values(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    _install(cls, __hash__)


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    running: set[tuple[int, int]] = set()

    def __repr__(self: Any) -> str:
        key = id(self), get_ident()
        if key in running:
            return "..."
        running.add(key)
        try:
            shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        finally:
            running.discard(key)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__
