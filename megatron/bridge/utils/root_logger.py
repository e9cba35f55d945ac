"""Keep the root logger as it was around code that reconfigures it (NeMo-Run, for one).

A library must leave its users' logging alone, but NeMo-Run does not when it runs in-process:

- ``run.Experiment(...)`` calls ``logging.basicConfig(..., handlers=[RichHandler(...)],
  force=True)``, which drops every handler on the root logger (a test runner's capture
  handlers, an application's own) and sets the root level;
- ``Experiment.__del__`` removes ``root.handlers[0]``, whatever that handler is by then.

An experiment sits in a reference cycle, so its ``__del__`` runs whenever the cyclic garbage
collector reaches it: possibly much later, in the middle of unrelated code, and possibly while
``Logger.callHandlers`` is iterating over ``root.handlers``, which then skips the handler after
the removed one. :func:`root_logger_preserved` makes both effects end at the block: on exit it
collects garbage, so an experiment created and dropped inside the block is finalized there, and
then puts back the root logger's handlers and level.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator

__all__ = ["root_logger_preserved"]


@contextlib.contextmanager
def root_logger_preserved() -> Iterator[None]:
    """Run a block, then restore the root logger's handlers (same objects, same order) and level.

    Objects that reconfigure logging when they are finalized (a NeMo-Run ``Experiment``) must be
    created and dropped inside the block: on exit the garbage collector runs before the restore,
    so their finalizers cannot touch the restored logger later.
    """
    root = logging.getLogger()
    handlers = list(root.handlers)
    level = root.level
    try:
        yield
    finally:
        gc.collect()
        # A new list rather than an in-place edit: a thread iterating over the old list while
        # it logs is not disturbed.
        root.handlers = handlers
        root.setLevel(level)
