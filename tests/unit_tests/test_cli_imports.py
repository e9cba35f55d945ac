"""What ``bridge-overlap explain`` imports for a plan of flags or of a shipped recipe."""

from __future__ import annotations

import pytest

from megatron.bridge.cli.parser import SUBCOMMANDS, build_parser
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


@pytest.mark.parametrize(
    "args", [["explain"], ["explain", "--recipe", "llama31_405b"], ["recipes"]], ids=" ".join
)
def test_a_command_line_that_prints_no_help_leaves_shutil_unimported(args):
    # argparse's HelpFormatter imports shutil (bz2, lzma) to read the terminal width: only help
    # and usage need it, not the formatter add_argument builds to check a metavar.
    code = f"from megatron.bridge.cli import main; main({args!r})"
    assert modules_loaded_by(code, ("shutil",)) == []


def test_the_parser_of_one_subcommand_reads_its_command_lines_as_the_whole_parser_does():
    full = build_parser()
    subparsers = full._subparsers._group_actions[0].choices
    assert list(subparsers) == list(SUBCOMMANDS)
    lines = {
        "explain": [["explain"], ["explain", "--recipe", "qwen3_30b_a3b", "--tp", "2", "--json"]],
        "search": [["search", "--recipe", "llama3_70b", "--world-size", "64:128", "--top", "3"]],
        "recipes": [["recipes", "--json"]],
    }
    for command, argvs in lines.items():
        one = build_parser(command)
        assert one.format_help() == full.format_help()
        mine = one._subparsers._group_actions[0].choices[command]
        assert mine.format_help() == subparsers[command].format_help()
        for argv in argvs:
            assert vars(one.parse_args(argv)) == vars(full.parse_args(argv))
        other = next(name for name in SUBCOMMANDS if name != command)
        # The other subcommands are listed, without their flags.
        assert len(one._subparsers._group_actions[0].choices[other]._actions) == 1  # -h
