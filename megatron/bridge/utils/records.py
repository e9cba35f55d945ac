"""``record``: the standard library's ``dataclasses.dataclass`` with shared comparison methods.

``dataclasses.dataclass`` compiles every method it adds from generated source text, class by
class, each time the module is imported: on Python 3.12 some 0.3 ms per method, six methods for a
frozen class. Built by the standard library alone, the 52 dataclasses on ``bridge-overlap
explain``'s import path spend about 90 ms compiling, some 40 % of its run. :func:`record` lets the
standard library build ``__init__`` (and a frozen class's ``__setattr__`` / ``__delattr__``) and
adds ``__eq__``, ``__hash__`` and ``__repr__`` as closures over the field names, which need no
compiling. They return exactly what the generated methods return:

- ``__eq__``: ``NotImplemented`` unless both objects are of the same class; otherwise the tuples
  of the ``compare`` fields, compared;
- ``__hash__``: the hash of the tuple of the fields whose ``hash`` is true (``compare`` where
  ``hash`` is None), on frozen classes; None (unhashable) on mutable ones; a ``__hash__`` the
  class body defines is kept;
- ``__repr__``: ``QualName(field=value!r, ...)`` over the ``repr`` fields, ``...`` for an object
  already being printed on this thread.

A method the class body defines is kept, as ``dataclass`` keeps it. Everything else is
``dataclass``'s own: fields, defaults, ``kw_only``, ``frozen``, ``__post_init__``,
``dataclasses.fields`` / ``replace`` / ``asdict``. Its ``__dataclass_params__`` says ``eq`` and
``repr`` False, since the standard library did not add those two. ``order`` and ``unsafe_hash``
are not offered: use ``dataclass`` for them.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from threading import get_ident
from typing import Any, dataclass_transform

__all__ = ["record"]


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
        cls = dataclasses.dataclass(
            cls, init=init, repr=False, eq=False, frozen=frozen, kw_only=kw_only
        )
        fields = dataclasses.fields(cls)
        if repr and "__repr__" not in cls.__dict__:
            _install(cls, _repr(tuple(f.name for f in fields if f.repr)))
        if eq:
            _add_eq_and_hash(cls, fields, frozen=frozen)
        return cls

    return wrap if cls is None else wrap(cls)


def _install(cls: type, method: Callable[..., Any]) -> None:
    # Set the method on the class under its own name, qualified by the class as dataclass does.
    method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
    setattr(cls, method.__name__, method)


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
