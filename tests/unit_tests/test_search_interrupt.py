"""Ctrl-C at any point of ``bridge-overlap search``: exit code 130 and one line on stderr, never a
traceback.

Each case runs the console script in a process of its own, with a prelude that sends the process
a real SIGINT (``os.kill``) at one point of the search: while its package is imported, while a
layout is planned, while its memory or its step is estimated, while the rows are rendered, while
the JSON is written. On a terminal, the progress bar's line is ended before the message.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tomllib

import pytest

from megatron.bridge.cli import main
from megatron.bridge.cli import search as cli_search
from megatron.bridge.exit_codes import EXIT_INTERRUPTED
from tests.unit_tests.repo_scripts import ROOT

SCRIPT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"][
    "bridge-overlap"
]
MODULE, FUNCTION = SCRIPT.split(":")

_ARGV = [
    "search",
    "--recipe",
    "qwen3_30b_a3b",
    "--num-layers",
    "4",
    "--moe-layer-freq",
    "1",
    "--world-size",
    "8",
    "--global-batch-size",
    "16",
]

# Wraps ``module.name`` so that its ``calls``-th call sends SIGINT first.
_AT_CALL = """
import functools, importlib, os, signal

def _interrupt_at(module, name, calls):
    owner = importlib.import_module(module)
    inner = getattr(owner, name)
    seen = [0]

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        seen[0] += 1
        if seen[0] == calls:
            os.kill(os.getpid(), signal.SIGINT)
        return inner(*args, **kwargs)

    setattr(owner, name, wrapper)

_interrupt_at({module!r}, {name!r}, {calls})
"""

# Sends SIGINT when the import of the search command's module begins.
_AT_IMPORT = """
import importlib.abc, os, signal, sys

class _Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "megatron.bridge.search.engine":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, _Interrupt())
"""

_RUN = "import sys\n{prelude}\nfrom {module} import {function}\nsys.exit({function}())\n"

POINTS = {
    "importing the search": (_AT_IMPORT, []),
    "planning a layout": (
        _AT_CALL.format(module="megatron.bridge.recipes.spec", name="plan_comm_overlap", calls=40),
        [],
    ),
    "estimating memory": (
        _AT_CALL.format(module="megatron.bridge.search.engine", name="memory_of", calls=3),
        [],
    ),
    "estimating a step": (
        _AT_CALL.format(module="megatron.bridge.search.engine", name="estimate_step", calls=3),
        [],
    ),
    "rendering the rows": (
        _AT_CALL.format(module="megatron.bridge.cli.search", name="render", calls=1),
        [],
    ),
    "writing the JSON": (
        _AT_CALL.format(module="megatron.bridge.cli.search", name="document", calls=1),
        ["--json"],
    ),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_ctrl_c_during_a_search_is_exit_130_without_a_traceback(point):
    prelude, extra = POINTS[point]
    code = _RUN.format(prelude=prelude, module=MODULE, function=FUNCTION)
    proc = subprocess.run(
        [sys.executable, "-c", code, *_ARGV, *extra],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == EXIT_INTERRUPTED, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "bridge-overlap: interrupted" in proc.stderr


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal: the search draws its progress bar there."""

    def isatty(self) -> bool:
        return True


def test_ctrl_c_ends_the_progress_bar_line_before_the_message(monkeypatch):
    def interrupted_search(*args, progress, **kwargs):
        progress(1, 10)
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_search, "search", interrupted_search)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(_ARGV) == EXIT_INTERRUPTED
    bar, message = terminal.getvalue().rsplit("\n", 2)[:2]
    assert bar.startswith("\rsearch [") and bar.endswith("(1/10)")
    assert message == "bridge-overlap: interrupted"
