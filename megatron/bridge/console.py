"""The ``bridge-overlap`` console script (:func:`main`): the command line, imported inside the
guard that turns Ctrl-C into exit code 130 and a one-line message."""

from __future__ import annotations

import sys

from megatron.bridge.exit_codes import EXIT_INTERRUPTED

__all__ = ["main"]


def main() -> int:
    """Run ``bridge-overlap`` on ``sys.argv``; returns :func:`megatron.bridge.cli.main`'s exit
    code, or 130 when Ctrl-C comes while the command line is imported."""
    try:
        # Deliberately lazy: the import of the command line is inside the Ctrl-C guard.
        from megatron.bridge.cli import main as run
    except KeyboardInterrupt:
        print("bridge-overlap: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return run()
