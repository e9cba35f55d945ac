"""The mark on each rule that resolves a setting differently from upstream Megatron-Bridge.

A rule (a function or a class) whose result differs from upstream Megatron-Bridge's
``training/comm_overlap.py`` on some valid layout carries :func:`differs_from_upstream`. The
migration section of ``docs/training/communication-overlap.md`` ("Coming from Megatron-Bridge or
NeMo 2.0") has a bullet naming each marked rule, with upstream's result, ours and why; a test
holds the marks and the bullets equal, so a rule marked here without a bullet, or a bullet naming
a rule that is gone or unmarked, fails.

Pure standard library, importing nothing of ours: any module may mark its rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["DIVERGENT_RULES", "differs_from_upstream", "rule_name"]

_Rule = TypeVar("_Rule", bound=Callable[..., object])

_PACKAGE = "megatron.bridge.training."

DIVERGENT_RULES: dict[str, str] = {}
"""Each marked rule's name (:func:`rule_name`) and what it does differently, in one line. Filled
as the marked modules are imported (``megatron.bridge.training.comm_overlap`` imports them all)."""


def rule_name(rule: Callable[..., object]) -> str:
    """A rule's dotted name under ``megatron.bridge.training``, as the migration section writes it.

    E.g. ``comm_overlap.rules.dp.derive_overlap_param_gather``.
    """
    return rule.__module__.removeprefix(_PACKAGE) + "." + rule.__qualname__


def differs_from_upstream(summary: str) -> Callable[[_Rule], _Rule]:
    """Mark a rule whose result differs from upstream's; ``summary`` says how, in one line."""
    if not summary.strip():
        raise ValueError("differs_from_upstream needs a summary saying what differs.")

    def mark(rule: _Rule) -> _Rule:
        DIVERGENT_RULES[rule_name(rule)] = summary
        return rule

    return mark
