"""One record of what the library wrote on a config, over what the field held before.

Two writers change fields of the user's megatron-core configs: megatron-core's
``TransformerConfig.__post_init__`` (run by ``GPTModelProvider.finalize``, which derives fields
such as ``ffn_hidden_size``) and the comm-overlap plan (``apply_plan``). Each records, per field,
the value it wrote and the value it replaced, under its own name, in one attribute of the config.
A later run reads the user's setting through the record, and undoing a writer puts back what it
replaced where its write still stands. The record is not a dataclass field (``fields()`` and
``asdict()`` do not see it) and is set with ``object.__setattr__`` (no config's own
``__setattr__`` checks run on it). The all-or-nothing update copies it with the config and
commits it back (``transaction.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["NOTHING", "TYPED_SECTIONS", "Writer", "forget", "record", "records"]

Writer = Literal["finalize", "plan", "typed"]
"""Who wrote: megatron-core's finalize derivations, the comm-overlap plan, or the user through a
typed override (``apply_overrides``: a value typed on the command line is the user's even where
it equals megatron-core's default, which a field alone cannot tell apart from an untouched one)."""

TYPED_SECTIONS = ("model", "optimizer", "ddp")
"""The container's sections that hold megatron-core configs: a value typed for one of their
fields (a KEY=VALUE override, a field a hand-written document lists) is recorded as "typed"."""

NOTHING = object()
"""What a write replaced when the field held nothing of the user's (megatron-core's default)."""

_ATTR = "_bridge_written"


def records(config: Any, writer: Writer) -> Mapping[str, tuple[Any, Any]]:
    """``writer``'s record on ``config``: field -> (value written, value replaced)."""
    return getattr(config, _ATTR, {}).get(writer, {})


def record(config: Any, writer: Writer, entries: Mapping[str, tuple[Any, Any]]) -> None:
    """Record that ``writer`` wrote into ``config``: ``entries`` maps each field written to
    (value written, value replaced). Nothing to record changes nothing."""
    if not entries:
        return
    mine = {**records(config, writer), **entries}
    object.__setattr__(config, _ATTR, {**getattr(config, _ATTR, {}), writer: mine})


def forget(config: Any, writer: Writer) -> None:
    """Drop ``writer``'s record on ``config`` (after it was undone or redone)."""
    kept = {k: v for k, v in getattr(config, _ATTR, {}).items() if k != writer}
    object.__setattr__(config, _ATTR, kept)
