"""What the model rules read besides a description field, and the shape several of them share.

- :data:`UNDESCRIBED_DEFAULTS`: the megatron-core ``TransformerConfig`` fields the rules read that
  ``ModelDescription`` does not hold, at megatron-core's defaults;
- the Transformer Engine version where the job runs, ordered as megatron-core's
  ``is_te_min_version`` (``packaging.version``) orders it: :func:`version_key`, :func:`te_below`,
  :func:`te_found`;
- :func:`refuse_both`: two boolean fields megatron-core takes one at a time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from megatron.bridge.training.job import ModelDescription

__all__ = ["UNDESCRIBED_DEFAULTS", "refuse_both", "te_below", "te_found", "version_key"]


UNDESCRIBED_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "fp8_quantizer_factory": None,
        "fp4_quantizer_factory": None,
        "moe_enable_deepep": False,
        "moe_apply_probs_on_input": False,
    }
)
"""megatron-core ``TransformerConfig`` fields that :func:`check_model`'s rules read but
``ModelDescription`` does not hold, with megatron-core's defaults, which the rules assume. A
config that sets one of them differently (a provider with ``attention_dropout=0.0``) can pass a
rule that rejects its description."""


_VERSION = re.compile(
    r"\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[._-]?(?P<stage>dev|alpha|a|beta|b|rc|c|preview|pre|post)[._-]?(?P<number>\d*))?",
    re.IGNORECASE,
)
_STAGE_ORDER = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2}
_STAGE_ORDER.update({"rc": 3, "c": 3, "pre": 3, "preview": 3, "post": 5})
_FINAL = 4


def version_key(text: str) -> tuple[tuple[int, ...], int, int]:
    """A Transformer Engine version as a sort key; ``ValueError`` for text that is no version.

    Release, stage (dev < a < b < rc < final < post) and stage number: enough of PEP 440 to
    compare a Transformer Engine version with megatron-core's minimums the way its
    is_te_min_version (packaging.version) does. A local part (+abc) does not change the order.
    """
    match = _VERSION.match(text)
    if match is None:
        raise ValueError(
            f"te_version={text!r} is not a version number; pass Transformer Engine's "
            "__version__ (e.g. '2.8.0'), '0.0.0' when it is not installed, or None when unknown."
        )
    release = tuple(int(part) for part in match["release"].split("."))
    release = (*release, *(0,) * (3 - len(release)))
    stage = match["stage"]
    if stage is None:
        return release, _FINAL, 0
    return release, _STAGE_ORDER[stage.lower()], int(match["number"] or 0)


def te_below(te_version: str | None, minimum: str) -> bool:
    """Whether ``te_version`` is older than ``minimum``; None (unknown) is never below."""
    return te_version is not None and version_key(te_version) < version_key(minimum)


def te_found(te_version: str) -> str:
    """How an error names the version found; megatron-core reads a missing TE as 0.0.0."""
    return "not installed" if version_key(te_version)[0] == (0, 0, 0) else te_version


def refuse_both(
    model: ModelDescription, first: str, second: str, why: str, *, joined: str = "and"
) -> None:
    """Raise ``ValueError`` when the boolean fields ``first`` and ``second`` are both on.

    The message reads ``"{first}=True {joined} {second}=True: {why}"``; ``why`` says what
    megatron-core does instead and the fix.
    """
    if getattr(model, first) and getattr(model, second):
        raise ValueError(f"{first}=True {joined} {second}=True: {why}")
