"""``bridge-overlap``'s :func:`main`: parse the command line, run the
subcommand, print its answer, and turn every failure into a message and an exit code
(:mod:`megatron.bridge.cli.errors`), never a traceback."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from megatron.bridge.cli.errors import UsageError, _fail, _fail_with
from megatron.bridge.cli.parser import SUBCOMMANDS, build_parser
from megatron.bridge.cli.planning import explain
from megatron.bridge.cli.recipes import _render_recipes, list_recipes
from megatron.bridge.cli.render import _render
from megatron.bridge.exit_codes import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_REFUSED,
)


def _run(argv: list[str], *, as_json: bool) -> int:
    # The parser of the subcommand the command line names; anything else gets the whole parser.
    parser = build_parser(argv[0] if argv and argv[0] in SUBCOMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        if not as_json:
            parser.print_usage(sys.stderr)
        return _fail(str(exc), EXIT_INVALID, as_json=as_json)
    except SystemExit as exc:  # --help, after printing the help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    if args.command == "recipes":
        try:
            rows = list_recipes()
        except Exception as exc:
            return _fail_with(exc, as_json=as_json)
        print(json.dumps({"recipes": rows}, indent=2) if args.json else _render_recipes(rows))
        return EXIT_OK
    if args.command == "search":
        # Deliberately lazy: the search package (its space, engine and report) is the search
        # command's alone, and stays off the import path of ``explain`` and ``recipes``.
        from megatron.bridge.cli.search import run_search

        try:
            _result, doc, text = run_search(args)
        except Exception as exc:
            return _fail_with(exc, as_json=as_json)
        print(json.dumps(doc, indent=2) if args.json else text)
        return EXIT_OK
    try:
        doc, plan, env_plan = explain(args)
    except Exception as exc:
        return _fail_with(exc, as_json=as_json)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(_render(doc, plan, env_plan, args._estimate, args._memory))
    memory = args._memory
    if memory is not None and memory.error is not None:
        # The plan is printed (it says what to change), but a job that cannot run is refused:
        # exit 1 with or without --strict (--strict refuses before printing it).
        print(f"bridge-overlap: refused: {memory.error}", file=sys.stderr)
        return EXIT_REFUSED
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bridge-overlap`` console script; returns the exit code.

    Never raises: every failure is a message and one of the exit codes listed in
    :mod:`megatron.bridge.cli.errors` (``EXIT_CODES``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    if sys.stdout is None:  # started with stdout closed (``>&-``): print() would drop it all
        return _output_failed("there is no stdout (it was closed when the command started)")
    try:
        try:
            code = _run(argv, as_json=as_json)
        except KeyboardInterrupt:
            code = _fail("bridge-overlap: interrupted", EXIT_INTERRUPTED, as_json=as_json)
        # Written out here, inside the guard, rather than at interpreter exit.
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader is gone (``| head``): stop quietly. Python's signal docs: point stdout at
        # devnull so that the interpreter's last flush does not fail again.
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        # Every subcommand turns its own errors into messages: what reaches here failed to write
        # the answer (a full device, a descriptor closed under the command).
        _stdout_to_devnull()
        return _output_failed(f"{type(exc).__name__}: {exc}")
    return code


def _output_failed(why: str) -> int:
    print(
        f"bridge-overlap: error: the output could not be written to stdout: {why}", file=sys.stderr
    )
    return EXIT_OUTPUT


def _stdout_to_devnull() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # stdout is no file (a test's capture): nothing is flushed to it at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
