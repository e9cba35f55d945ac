"""The ``bridge-overlap`` console script (``megatron.bridge.console``): the command line's exit
codes and output, with the collector paused while the command line is imported."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_console_script_is_bridge_overlap():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["bridge-overlap"] == "megatron.bridge.console:bridge_overlap"


def _console(argv: list[str]) -> subprocess.CompletedProcess:
    # A process of its own: the console function freezes every object the process holds.
    code = (
        "import gc, json, sys\n"
        f"sys.argv = ['bridge-overlap', *{argv!r}]\n"
        "from megatron.bridge.console import bridge_overlap\n"
        "code = bridge_overlap()\n"
        "print(json.dumps([code, gc.isenabled(), gc.get_freeze_count()]), file=sys.stderr)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def _main(argv: list[str]) -> subprocess.CompletedProcess:
    code = f"import sys; from megatron.bridge.cli import main; sys.exit(main({argv!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


@pytest.mark.parametrize(
    "argv",
    [["explain", "--json"], ["explain", "--recipe", "nope"], ["explain", "--tp", "0"], ["recipes"]],
    ids=" ".join,
)
def test_the_console_script_answers_as_main_does_with_the_collector_running(argv):
    console, direct = _console(argv), _main(argv)
    code, enabled, frozen = json.loads(console.stderr.strip().splitlines()[-1])
    assert code == direct.returncode
    assert console.stdout == direct.stdout
    assert console.stderr.strip().splitlines()[:-1] == direct.stderr.strip().splitlines()
    assert enabled  # the command ran with the collector on
    assert frozen > 10_000  # what the imports made sits in the permanent generation
