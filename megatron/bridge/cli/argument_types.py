"""The ``argparse`` types of ``bridge-overlap``'s flags that take more than a plain number: the
per-layer list expressions Megatron-LM's ``moe_freq_type`` reads, factors and shares, the
sliding window, the layer patterns and layouts read by the job description's own parsers, and
``search``'s world sizes.

Each type raises ``argparse.ArgumentTypeError`` with the fix, so the command line names the flag.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from megatron.bridge.training.estimate.hybrid_pattern import parse_hybrid_pattern
from megatron.bridge.training.pipeline_layout import parse_layout
from megatron.bridge.training.validators import LIMITS, positive_int_argument
from megatron.bridge.training.validators import check_limit as _check_limit

__all__ = [
    "hybrid_layer_pattern_argument",
    "layer_freq_argument",
    "per_layer_ints_argument",
    "pipeline_layout_argument",
    "positive_float_argument",
    "share_argument",
    "window_argument",
    "world_sizes_argument",
]

#: The most layers a per-layer list expression may spell (a bound on what a typo can allocate).
_MAX_LAYERS = LIMITS["model.num_layers"].maximum


def _layer_list(text: str, *, binary: bool = True) -> tuple[int, ...]:
    """Megatron-LM's list expression of per-layer 0/1 entries (any integers with
    ``binary=False``), read without ``eval``.

    The grammar Megatron-LM's ``moe_freq_type`` patterns use: ``[a, b, ...]`` lists, ``*`` by
    an integer (either side), ``+`` to join, and parentheses: ``([0]*3+[1]*58)``.
    """
    tokens = re.findall(r"\d+|[\[\](),*+]|\S", text)
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal position
        token = peek()
        if token is None or (expected is not None and token != expected):
            found = "the end" if token is None else repr(token)
            raise ValueError(f"expected {expected or 'more'} at {found}")
        position += 1
        return token

    def chain(
        operand: Callable[[], list[int] | int],
        operator: str,
        combine: Callable[[list[int] | int, list[int] | int], list[int]],
    ) -> list[int] | int:
        # operand (operator operand)*, combined left to right.
        value = operand()
        while peek() == operator:
            take(operator)
            value = combine(value, operand())
        return value

    def join(left: list[int] | int, right: list[int] | int) -> list[int]:
        if isinstance(left, int) or isinstance(right, int):
            raise ValueError("'+' joins lists, not numbers")
        return left + right

    def repeat(left: list[int] | int, right: list[int] | int) -> list[int]:
        if isinstance(left, int) == isinstance(right, int):
            raise ValueError("'*' repeats a list by a number")
        items, count = (left, right) if isinstance(right, int) else (right, left)
        if len(items) * count > _MAX_LAYERS:
            raise ValueError(f"more than {_MAX_LAYERS} layers")
        return items * count

    def expression() -> list[int] | int:
        return chain(term, "+", join)

    def term() -> list[int] | int:
        return chain(atom, "*", repeat)

    def atom() -> list[int] | int:
        token = take()
        if token.isdigit():
            return int(token)
        if token == "(":
            value = expression()
            take(")")
            return value
        if token == "[":
            items = [int(take())] if peek() != "]" else []
            while peek() == ",":
                take(",")
                items.append(int(take()))
            take("]")
            return items
        raise ValueError(f"unexpected {token!r}")

    try:
        value = expression()
        if peek() is not None:
            raise ValueError(f"unexpected {peek()!r}")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r} ({exc}); write an int N or a list expression such as "
            "'([0]*3+[1]*58)'"
        ) from None
    if isinstance(value, int) or not value or (binary and set(value) - {0, 1}):
        entries = "0/1 entries" if binary else "integers"
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of {entries}, one per layer; write e.g. '([0]*3+[1]*58)'"
        )
    return tuple(value)


def per_layer_ints_argument(text: str) -> tuple[int, ...]:
    """A list expression of integers, one per layer (``[0,0]+[4,128]*20+[4,0]``)."""
    return _layer_list(text, binary=False)


def positive_float_argument(text: str) -> float:
    """An ``argparse`` type for a factor: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def share_argument(text: str) -> float:
    """An ``argparse`` type for a share: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def layer_freq_argument(text: str) -> int | tuple[int, ...]:
    """Megatron-LM's ``moe_freq_type``: an int N (every N-th layer) or a per-layer 0/1 list."""
    if "[" not in text:
        return positive_int_argument(text)
    return _layer_list(text)


def window_argument(text: str) -> tuple[int, int]:
    """Megatron-LM's ``tuple_type`` for --window-size: ``LEFT,RIGHT`` (parentheses optional)."""
    parts = text.strip().strip("()").split(",")
    try:
        left, right = (int(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected two integers LEFT,RIGHT (tokens before and after; -1 = unbounded), e.g. "
            f"'128,0'; got {text!r}"
        ) from None
    if left < -1 or right < -1:
        raise argparse.ArgumentTypeError(f"window sides are >= -1 (-1 = unbounded), got {text!r}")
    return left, right


def _read_by(parse: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse type that keeps the text once ``parse`` reads it; its ValueError is the error."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return check


hybrid_layer_pattern_argument = _read_by(parse_hybrid_pattern)
pipeline_layout_argument = _read_by(parse_layout)


def world_sizes_argument(text: str) -> tuple[int, ...]:
    """``search --world-size``: ``N``, a list ``N,M,...``, or a doubling range ``A:B`` (A, 2A,
    4A, ... up to B); at most 16 sizes, each within ``LIMITS["world_size"]``."""
    text = text.strip()
    try:
        if ":" in text:
            low_text, high_text = text.split(":")
            low, high = int(low_text), int(high_text)
            if low < 1 or high < low:
                raise ValueError
            sizes: list[int] = []
            while low <= high and len(sizes) <= 16:
                sizes.append(low)
                low *= 2
        else:
            sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r}: write a GPU count (256), a list (64,128,256) or a doubling "
            "range A:B (64:256 = 64, 128, 256)"
        ) from None
    if len(sizes) > 16:
        raise argparse.ArgumentTypeError(f"{text!r} names more than 16 world sizes; give fewer")
    for size in sizes:
        if size < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: a world size is a GPU count >= 1")
        try:
            _check_limit("world_size", size, label="--world-size")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return tuple(sorted(set(sizes)))
