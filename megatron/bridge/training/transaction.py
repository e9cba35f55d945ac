"""All or nothing: working copies of a container's megatron-core configs, and their commit.

A container here is anything with ``model``, ``optimizer`` and ``ddp`` attributes (a
``ConfigContainer``); this module sits below it, which reads its configs as written through
:func:`configs_as_written` when it writes itself out.

:func:`working_copies` copies ``cfg.model``, ``cfg.optimizer`` and ``cfg.ddp`` (field values
deep-copied, the owners' bookkeeping attributes relinked to the copies) so that every step of a
resolution runs on them; :meth:`Staged.commit` writes the copies back into the user's objects,
attribute by attribute, once every step succeeded. :func:`configs_as_written` gives the configs
as the user wrote them, without what an earlier update derived or wrote.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.comm_overlap.megatron_io import undo_plan

__all__ = ["Staged", "configs_as_written", "working_copies"]


#: The megatron-core configs runtime_config_update writes, by their ConfigContainer attribute.
_SECTIONS = ("model", "optimizer", "ddp")

_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    # Identity, else == between values of one type that answers a plain True: True and 1 are
    # not the same setting, and == on tensors or arrays answers no question asked here.
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        return (a == b) is True
    except Exception:
        return False


def _field_names(config: Any) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(config))


def _field_values(config: Any) -> dict[str, Any]:
    return {name: getattr(config, name) for name in _field_names(config)}


def _relink(value: Any, mapping: dict[int, Any]) -> Any:
    # Swaps each object ``mapping`` knows for its counterpart, rebuilding the plain containers
    # on the way to one; everything else stays the very same object (a list that is also a
    # field value keeps its identity, a sentinel such as a bare object() stays itself).
    mapped = mapping.get(id(value), _MISSING)
    if mapped is not _MISSING:
        return mapped
    if type(value) is dict:
        items = [(_relink(k, mapping), _relink(v, mapping)) for k, v in value.items()]
        if any(
            k is not k0 or v is not v0
            for (k, v), (k0, v0) in zip(items, value.items(), strict=True)
        ):
            return dict(items)
    elif type(value) in (list, tuple, set, frozenset):
        elements = [_relink(v, mapping) for v in value]
        if any(v is not v0 for v, v0 in zip(elements, value, strict=True)):
            return type(value)(elements)
    return value


def working_copies(cfg: Any) -> tuple[dict[str, Any], dict[int, Any]]:
    """Copies of cfg's megatron-core configs, and the memo: id(original value) -> its copy.

    Field values are deep-copied, since megatron-core's validation edits some in place (it
    appends to lists). Other attributes are bookkeeping kept next to the fields by their owners
    (the GPT provider's record of derived fields, comm overlap's record of its writes): they
    are rebuilt to point at the copied field values they refer to, everything else in them is
    shared. One memo for all three configs keeps values they share shared in the copies.
    """
    memo: dict[int, Any] = {}
    for name in _SECTIONS:
        for value in _field_values(getattr(cfg, name)).values():
            # Callables are shared, not copied: no step changes one in place, a copied
            # functools.partial init method no longer equals the user's, and a bound method (the
            # grad-sync hooks a training loop sets on the model config) would copy its model.
            if callable(value):
                memo[id(value)] = value
    copies = {}
    for name in _SECTIONS:
        work = copy.copy(getattr(cfg, name))
        for field_name, value in _field_values(work).items():
            # A value deepcopy refuses (a handle on a live resource) stays shared, as copy.copy
            # left it: the steps assign such fields, none changes an object like that in place.
            with contextlib.suppress(Exception):
                setattr(work, field_name, copy.deepcopy(value, memo))
        copies[name] = work
    # After every field is copied, so that a record on one config may refer to another's values.
    for work in copies.values():
        names = set(_field_names(work))
        for attr, value in vars(work).items():
            if attr not in names:
                object.__setattr__(work, attr, _relink(value, memo))
    return copies, memo


def configs_as_written(cfg: Any) -> dict[str, Any]:
    """Copies of ``cfg.model``, ``cfg.optimizer`` and ``cfg.ddp`` as the user wrote them.

    Keyed by section name. The fields an earlier :func:`runtime_config_update` derived are
    cleared and the overlap fields it wrote are given back their user values (``undo_plan``);
    what mixed precision wrote stays, as it writes the same values again. ``cfg`` is not
    changed. ``ConfigContainer.to_dict`` writes these.
    """
    work, _ = working_copies(cfg)
    work["model"].clear_derived()
    undo_plan(work["model"], work["optimizer"], work["ddp"])
    return work


def _commit(original: Any, work: Any, memo: dict[int, Any]) -> None:
    """Write ``work``'s fields, then its other attributes, into ``original`` (same object).

    A field value the update left as it was stays the user's own object instead of its copy,
    and the bookkeeping attributes are pointed at whichever of the two the field now holds.
    """
    back: dict[int, Any] = {}
    for name, new in _field_values(work).items():
        old = getattr(original, name)
        if new is old:
            continue
        if memo.get(id(old), _MISSING) is new and _same(old, new):
            back[id(new)] = old
            continue
        setattr(original, name, new)
    names = set(_field_names(work))
    theirs, ours = vars(original), vars(work)
    for attr in theirs.keys() - ours.keys():
        object.__delattr__(original, attr)
    for attr, value in ours.items():
        if attr not in names:
            # object.__setattr__, as their owners write them: not fields, no config checks. A
            # record that refers to a field value by identity must see the object now there.
            object.__setattr__(original, attr, _relink(value, back))


@dataclass(frozen=True)
class Staged:
    """Resolved working copies of a container, and what committing them needs."""

    work: dict[str, Any]
    """The copies of ``cfg.model``, ``cfg.optimizer`` and ``cfg.ddp``, by section name."""
    memo: dict[int, Any]
    """id(original field value) -> its copy (:func:`working_copies`'s memo)."""
    overlap: CommOverlapConfig | None
    """The shallow copy of ``cfg.comm_overlap`` the resolution ran on (None without one)."""

    @property
    def model(self) -> Any:
        """The working copy of ``cfg.model``."""
        return self.work["model"]

    def commit(self, cfg: Any) -> None:
        """Write the copies into ``cfg``'s sections and its ``comm_overlap``; never raises.

        The user's objects keep their identity; a value the resolution left as it was stays the
        user's own object.
        """
        for name, config in self.work.items():
            _commit(getattr(cfg, name), config, self.memo)
        if self.overlap is not None:
            _commit(cfg.comm_overlap, self.overlap, {})
