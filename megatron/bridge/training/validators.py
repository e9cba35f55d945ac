"""Checks of user-given values, shared by every config and command of the library.

Each raises ``TypeError`` for a value of the wrong type and ``ValueError`` for one out of range
(``check_int(type_error=ValueError)`` keeps the few settings that always raised ``ValueError``),
naming the setting (``owner.name``, or ``name`` alone when ``owner`` is empty) and what it
accepts. ``bool`` is never accepted where an int is expected: ``bucket_size=True`` is a typo,
not "one parameter". No ``assert``: these checks must hold under ``python -O``.
"""

from __future__ import annotations

from typing import Any, get_args

__all__ = [
    "check_bool",
    "check_choice",
    "check_int",
    "check_optional_bool",
    "is_int",
    "nonnegative_int_argument",
    "positive_int_argument",
]


def _label(owner: str, name: str) -> str:
    return f"{owner}.{name}" if owner else name


def is_int(value: object) -> bool:
    """True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_bool(owner: str, name: str, value: object) -> bool:
    """``value`` must be True or False."""
    if type(value) is not bool:
        raise TypeError(
            f"{_label(owner, name)} must be True or False, got {value!r} ({type(value).__name__})."
        )
    return value


def check_optional_bool(
    owner: str, name: str, value: object, *, none_means: str = ""
) -> bool | None:
    """``value`` must be True, False or None; ``none_means`` says what None does."""
    if value is not None and type(value) is not bool:
        meaning = f" ({none_means})" if none_means else ""
        raise TypeError(
            f"{_label(owner, name)} must be True, False or None{meaning}, got {value!r} "
            f"({type(value).__name__})."
        )
    return value


def _bounds(minimum: int | None, maximum: int | None) -> str:
    parts = [
        f">= {minimum}" if minimum is not None else "",
        f"<= {maximum}" if maximum is not None else "",
    ]
    return " and ".join(p for p in parts if p)


def check_int(
    owner: str,
    name: str,
    value: object,
    *,
    minimum: int | None = 1,
    maximum: int | None = None,
    optional: bool = False,
    unit: str = "",
    hint: str = "",
    type_error: type[Exception] = TypeError,
) -> Any:
    """``value`` must be an int in ``[minimum, maximum]`` (or None when ``optional``).

    ``unit`` names what it counts (shown in the type error); ``hint`` says how to fix it and ends
    every error. ``type_error`` is what a value that is not an int raises: ``TypeError``, except
    for the few settings whose contract is a ``ValueError`` for any bad value.
    """
    if value is None and optional:
        return None
    if (
        type(value) is int
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    ):
        return value  # the common case: no message to build
    label = _label(owner, name)
    bounds = _bounds(minimum, maximum)
    tail = f" {hint}" if hint else ""
    if not is_int(value):
        what = " ".join(p for p in ("an int", bounds, f"({unit})" if unit else "") if p)
        if optional:
            what += " or None"
        raise type_error(f"{label} must be {what}, got {value!r} ({type(value).__name__}).{tail}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{label} must be {bounds}, got {value}.{tail}")
    return value


def check_choice[T](
    owner: str, name: str, value: T, allowed: Any, *, optional: bool = False, hint: str = ""
) -> T:
    """``value`` must be one of ``allowed`` (a ``Literal`` type or an iterable); lists the choices.

    With ``optional`` None is accepted too (and listed); ``hint`` ends the error.
    """
    choices = get_args(allowed) if get_args(allowed) else tuple(allowed)
    if optional:
        choices = (*choices, None)
    if value not in choices:
        tail = f" {hint}" if hint else ""
        raise ValueError(
            f"{_label(owner, name)} must be one of {list(choices)}, got {value!r}.{tail}"
        )
    return value


def _int_argument(text: str, *, minimum: int, expected: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def positive_int_argument(text: str) -> int:
    """An ``argparse`` type for a size given on a command line: an int >= 1."""
    return _int_argument(text, minimum=1, expected="a positive integer")


def nonnegative_int_argument(text: str) -> int:
    """An ``argparse`` type for a count given on a command line: an int >= 0."""
    return _int_argument(text, minimum=0, expected="an integer >= 0")
