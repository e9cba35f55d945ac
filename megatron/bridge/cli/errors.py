"""How ``bridge-overlap`` fails: its exit codes, and the message and code of each failure.

Exit codes (every failure is a message on stderr, never a traceback):

- 0: the plan is valid (``recipes``: the list was printed);
- 1: refused: a layout that does not fit in memory, with or without ``--strict`` (without it the
  plan is printed first), or a requested overlap ``--strict`` refused;
- 2: invalid input: a flag, an override, a recipe (unknown, not importable, returning neither a
  ``RecipeSpec`` nor a ``ConfigContainer``, failing), or a configuration megatron-core's own
  validation rejects (its message is quoted);
- 3: an internal error, a bug of ``bridge-overlap`` (the message names the exception and where it
  was raised; please report it);
- 130: interrupted (Ctrl-C);
- 141: stdout was closed before everything was written (``bridge-overlap explain | head``): the
  command stops quietly, with the code a shell gives a program that SIGPIPE ends;
- 74: stdout could not take the output (no stdout, a full device, an I/O error): the message
  on stderr says why (``EX_IOERR`` of BSD's ``sysexits.h``).

With ``--json``, an error is a JSON document on stdout too (``{"error": ..., "exit_code": ...}``).
"""

from __future__ import annotations

import json
import sys

from megatron.bridge.exit_codes import (
    EXIT_INTERNAL,
    EXIT_INVALID,
    EXIT_REFUSED,
)
from megatron.bridge.training.comm_overlap import OverlapRefusedError
from megatron.bridge.utils.megatron_core_errors import megatron_core_rejection

_REJECTED = "megatron-core rejected the configuration: "


class UsageError(ValueError):
    """A command line argparse rejected (exit code 2)."""


def _fail(message: str, code: int, *, as_json: bool) -> int:
    """Report a failure: one line on stderr and, with ``--json``, the error document on stdout."""
    if as_json:
        print(json.dumps({"error": message, "exit_code": code}, indent=2))
    print(message, file=sys.stderr)
    return code


def _raised_at(exc: BaseException) -> str:
    tb = exc.__traceback__
    if tb is None:
        return "an unknown place"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"


def _fail_with(exc: Exception, *, as_json: bool) -> int:
    """The exit code and message of an exception out of a subcommand (see the exit codes above)."""
    if isinstance(exc, OverlapRefusedError):
        return _fail(f"bridge-overlap: refused (--strict): {exc}", EXIT_REFUSED, as_json=as_json)
    rejection = megatron_core_rejection(exc)
    if rejection is not None:
        return _fail(
            f"bridge-overlap: error: {_REJECTED}{rejection}", EXIT_INVALID, as_json=as_json
        )
    if isinstance(exc, ValueError | TypeError):
        return _fail(f"bridge-overlap: error: {exc}", EXIT_INVALID, as_json=as_json)
    return _fail(
        f"bridge-overlap: internal error (a bug in bridge-overlap, please report it with the "
        f"command line): {type(exc).__name__}: {exc} (raised at {_raised_at(exc)})",
        EXIT_INTERNAL,
        as_json=as_json,
    )
