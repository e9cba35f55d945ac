"""``bridge-overlap`` when its output cannot be written, and Ctrl-C before the command line has
been imported: a message on stderr and a documented exit code, never a traceback.

Each case runs the console script the package installs, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

from megatron.bridge.exit_codes import EXIT_INTERRUPTED, EXIT_OUTPUT
from tests.unit_tests.repo_scripts import ROOT

SCRIPT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"][
    "bridge-overlap"
]
MODULE, FUNCTION = SCRIPT.split(":")

# The console script as the installed wrapper runs it, with a prelude run first.
_RUN = "import sys\n{prelude}\nfrom {module} import {function}\nsys.exit({function}())\n"


def _console(argv, *, prelude="", **kwargs) -> subprocess.CompletedProcess:
    code = _RUN.format(prelude=prelude, module=MODULE, function=FUNCTION)
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
        check=False,
        **kwargs,
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("argv", [["explain"], ["explain", "--json"], ["recipes"]])
def test_a_full_device_is_exit_74_with_the_reason(argv):
    with open("/dev/full", "w") as full:
        proc = _console(argv, stdout=full)
    assert proc.returncode == EXIT_OUTPUT
    assert "the output could not be written to stdout" in proc.stderr
    assert "No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_command_started_without_stdout_is_exit_74_with_the_reason():
    proc = _console(["explain"], preexec_fn=lambda: os.close(1))
    assert proc.returncode == EXIT_OUTPUT
    assert "there is no stdout" in proc.stderr
    assert "Traceback" not in proc.stderr


# Ctrl-C while the command line is imported: the finder raises it when the import reaches the
# command line's package, as the signal does when it lands during the import.
_INTERRUPT_ON_IMPORT = """
import importlib.abc

class _Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "megatron.bridge.cli":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, _Interrupt())
"""


def test_ctrl_c_while_the_command_line_is_imported_is_exit_130():
    proc = _console(["explain"], prelude=_INTERRUPT_ON_IMPORT, stdout=subprocess.PIPE)
    assert (proc.returncode, proc.stdout) == (EXIT_INTERRUPTED, "")
    assert proc.stderr == "bridge-overlap: interrupted\n"
