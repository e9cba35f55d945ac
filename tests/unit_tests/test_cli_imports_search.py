"""What ``bridge-overlap explain`` and ``recipes`` leave unimported: the search package."""

from __future__ import annotations

import pytest

from tests.unit_tests.conftest import modules_loaded_by

_SEARCH_MODULES = (
    "megatron.bridge.search",
    "megatron.bridge.search.engine",
    "megatron.bridge.search.space",
    "megatron.bridge.search.overlap",
    "megatron.bridge.search.candidate",
    "megatron.bridge.search.rank",
    "megatron.bridge.search.report",
    "megatron.bridge.cli.search",
)


@pytest.mark.parametrize(
    "args",
    [["explain"], ["explain", "--json"], ["explain", "--recipe", "llama31_405b"], ["recipes"]],
    ids=" ".join,
)
def test_explain_and_recipes_leave_the_search_package_unimported(args):
    # The search (its layout space, engine and report) belongs to `bridge-overlap search` alone.
    code = f"from megatron.bridge.cli import main; main({args!r})"
    assert modules_loaded_by(code, _SEARCH_MODULES) == []


def test_the_search_command_module_loads_every_name_checked():
    # Every name above is a module the search command loads, so the check above can fail.
    loaded = modules_loaded_by("import megatron.bridge.cli.search", _SEARCH_MODULES)
    assert loaded == sorted(_SEARCH_MODULES)
