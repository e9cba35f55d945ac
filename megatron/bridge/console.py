"""The ``bridge-overlap`` console script: :func:`megatron.bridge.cli.main` in a process of its own.

Importing the command line makes some hundred thousand objects that live as long as the process
(modules, classes, functions, the recipes' tables) and no garbage. The cyclic garbage collector
would walk them in every collection the imports trigger and again in each later full collection:
about a tenth of a short command's run. :func:`bridge_overlap` imports with the collector paused,
moves what the imports made to the collector's permanent generation (``gc.freeze``) and resumes
it, so the command itself runs with the collector as usual.
"""

from __future__ import annotations

import gc

__all__ = ["bridge_overlap"]


def bridge_overlap() -> int:
    """Run ``bridge-overlap`` on ``sys.argv``; returns :func:`megatron.bridge.cli.main`'s exit
    code. For the console script: it freezes every object the process holds when it is called."""
    gc.disable()
    try:
        # Deliberately lazy: the command line is imported with the collector paused.
        from megatron.bridge.cli import main
    finally:
        gc.freeze()
        gc.enable()
    return main()
