"""What ``bridge-overlap explain`` imports for a plan of flags or of a shipped recipe."""

from __future__ import annotations

import pytest

from tests.unit_tests.conftest import modules_loaded_by


@pytest.mark.parametrize(
    "args",
    [["explain"], ["explain", "--json"], ["explain", "--recipe", "llama31_405b"]],
    ids=" ".join,
)
def test_explain_without_overrides_leaves_pyyaml_unimported(args):
    # PyYAML is read for YAML files and KEY=VALUE overrides only; importing it (and compiling its
    # resolvers' patterns) is about a tenth of explain's start-up.
    code = f"from megatron.bridge.cli import main; main({args!r})"
    assert modules_loaded_by(code, ("yaml",)) == []
