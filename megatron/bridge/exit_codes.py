"""The exit codes of ``bridge-overlap`` (what each means: :mod:`megatron.bridge.cli.errors`).

Its own module, importing nothing, so that the console script can answer Ctrl-C with its code
while the command line is still being imported.
"""

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_CODES",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_OUTPUT",
    "EXIT_REFUSED",
]

EXIT_OK, EXIT_REFUSED, EXIT_INVALID, EXIT_INTERNAL = 0, 1, 2, 3
#: Ctrl-C: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130
#: The reader closed stdout early: 128 + SIGPIPE, as a shell reports a program SIGPIPE ends.
EXIT_BROKEN_PIPE = 141
#: stdout could not take the output: ``EX_IOERR`` of BSD's ``sysexits.h``.
EXIT_OUTPUT = 74
#: Every exit code ``main`` returns.
EXIT_CODES = frozenset(
    {
        EXIT_OK,
        EXIT_REFUSED,
        EXIT_INVALID,
        EXIT_INTERNAL,
        EXIT_INTERRUPTED,
        EXIT_BROKEN_PIPE,
        EXIT_OUTPUT,
    }
)
