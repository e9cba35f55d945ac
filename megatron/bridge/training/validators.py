"""Checks of user-given values, shared by every config and command of the library.

Each raises ``TypeError`` for a value of the wrong type and ``ValueError`` for one out of range,
naming the setting (``owner.name``, or ``name`` alone when ``owner`` is empty) and what it
accepts. ``bool`` is never accepted where an int is expected: ``bucket_size=True`` is a typo,
not "one parameter". No ``assert``: these checks must hold under ``python -O``.
"""

from __future__ import annotations

from typing import Any, get_args

__all__ = ["check_bool", "check_choice", "check_int", "check_optional_bool", "is_int"]


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
) -> Any:
    """``value`` must be an int in ``[minimum, maximum]`` (or None when ``optional``).

    ``unit`` names what it counts (shown in the type error); ``hint`` is appended to range errors.
    """
    if value is None and optional:
        return None
    label = _label(owner, name)
    if not is_int(value):
        what = f"an int ({unit})" if unit else "an int"
        if optional:
            what += " or None"
        raise TypeError(f"{label} must be {what}, got {value!r} ({type(value).__name__}).")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = " and ".join(
            b
            for b in (
                f">= {minimum}" if minimum is not None else "",
                f"<= {maximum}" if maximum is not None else "",
            )
            if b
        )
        raise ValueError(f"{label} must be {bounds}, got {value}.{' ' + hint if hint else ''}")
    return value


def check_choice[T](owner: str, name: str, value: T, allowed: Any) -> T:
    """``value`` must be one of ``allowed`` (a ``Literal`` type or an iterable); lists the choices."""
    choices = get_args(allowed) if get_args(allowed) else tuple(allowed)
    if value not in choices:
        raise ValueError(f"{_label(owner, name)} must be one of {list(choices)}, got {value!r}.")
    return value
