"""The command line of ``bridge-overlap``: its subcommands (:data:`SUBCOMMANDS`) and the parser
that holds them (:func:`build_parser`), with each numeric flag's bound from ``LIMITS``.

A command line argparse rejects raises :class:`UsageError` instead of exiting, so that ``--json``
can answer with a JSON error document. The flags that describe the job are defined in
:mod:`~megatron.bridge.cli.job_arguments`, the types that read their values in
:mod:`~megatron.bridge.cli.argument_types`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from megatron.bridge.cli.argument_types import world_sizes_argument
from megatron.bridge.cli.errors import UsageError
from megatron.bridge.cli.flags import FLAG_FIELDS
from megatron.bridge.cli.job_arguments import add_job_flags
from megatron.bridge.training.validators import LIMITS, positive_int_argument
from megatron.bridge.training.validators import check_limit as _check_limit

__all__ = ["SUBCOMMANDS", "build_parser"]


#: The program's one-line description (``bridge-overlap --help``).
_DESCRIPTION = "``bridge-overlap``: read the overlap plan of a layout before launching it."


class _Parser(argparse.ArgumentParser):
    _checking_argument = False

    def error(self, message: str) -> None:
        # Raised rather than printed, so that --json can answer with a JSON error document.
        raise UsageError(f"{self.prog}: error: {message}")

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        self._checking_argument = True
        try:
            return super().add_argument(*args, **kwargs)
        finally:
            self._checking_argument = False

    def _get_formatter(self) -> argparse.HelpFormatter:
        # add_argument formats each new argument once, only to check its metavar against nargs;
        # that formatter's width is never used, so the terminal is not asked for it (HelpFormatter
        # imports shutil and reads the terminal size each time). Help and usage get the default.
        if self._checking_argument:
            return self.formatter_class(prog=self.prog, width=80)
        return super()._get_formatter()


#: ``explain`` options that are no job field, and their entry in ``LIMITS``.
_OPTION_LIMITS = {
    "layernorm_sm_margin": "layernorm_sm_margin",
    "nccl_pp_chunksize": "nccl_pp_comm_chunksize",
}


def _bounded(parse: Callable[[str], object], name: str, flag: str) -> Callable[[str], object]:
    """``parse``, then the value's bound in ``LIMITS[name]`` (the error names ``flag``)."""

    def read(text: str) -> object:
        value = parse(text)
        try:
            _check_limit(name, value, label=flag)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    read.__name__ = getattr(parse, "__name__", "value")
    read.parse = parse  # type: ignore[attr-defined]  # what reads the text, for introspection
    read.limit = name  # type: ignore[attr-defined]  # its entry in LIMITS
    return read


def _bound_numeric_flags(parser: argparse.ArgumentParser) -> None:
    """Give every flag whose field has a bound in ``LIMITS`` that bound: checked as the flag is
    read, before any work, and shown in its help."""
    for action in parser._actions:
        name = FLAG_FIELDS.get(action.dest, _OPTION_LIMITS.get(action.dest))
        if action.type is None or name not in LIMITS:
            continue
        action.type = _bounded(action.type, name, action.option_strings[-1])
        bound = f"at most {LIMITS[name].maximum}"
        action.help = f"{action.help}; {bound}" if action.help else bound


def _limits_epilog() -> str:
    """The bounds that no single flag's help shows (``LIMITS``)."""
    chunks, buckets = LIMITS["micro_batches_x_chunks"], LIMITS["buckets"]
    return (
        "Limits: every size and count has an upper bound, shown in its flag's help; KEY=VALUE "
        "overrides, YAML files and recipe keywords meet the same bounds. A value above its bound "
        f"exits 2 before any planning. The step laid out may hold at most {chunks.maximum} "
        f"micro-batches x model chunks ({chunks.why}) and {buckets.maximum} buckets per stage "
        f"({buckets.why})."
    )


def _add_search(se: argparse.ArgumentParser) -> None:
    """``bridge-overlap search``: the job flags without the layout, the world sizes, the output."""
    se.description = (
        "Search every layout megatron-core accepts for a model (a recipe, or the model flags "
        "explain takes) on a GPU, precision, world size(s) and global batch: keep those that "
        "fit by the memory estimate, plan their overlap as explain does (with and without TP and "
        "EP overlap), and rank them by predicted tokens/s/GPU in bands of the estimate's "
        "measured error, the simpler layout first within a band. Exit code 0: printed; 2: "
        "invalid input, or no layout fits."
    )
    se.add_argument(
        "--recipe",
        help="search a recipe's model (see 'bridge-overlap recipes'); flags change its model",
    )
    se.add_argument(
        "--world-size",
        dest="world_sizes",
        type=world_sizes_argument,
        help=(
            "GPU count(s): N, a list N,M,... or a doubling range A:B (64:256 = 64, 128, 256); "
            "default: the recipe's published count"
        ),
    )
    add_job_flags(se, layout=False)
    # Deliberately lazy: the search package is the search command's alone (explain and recipes
    # build only their own subcommand's parser, and stay without it).
    from megatron.bridge.search.overlap import OVERLAP_MODES

    for flag, dest, what in (
        (
            "--tp-comm-overlap",
            "search_tp_overlap",
            "TP comm overlap (tp_comm_overlap): 'auto' (default) tries each layout with it on, "
            "where the layout can run it, and off",
        ),
        (
            "--ep-overlap",
            "search_ep_overlap",
            "EP all-to-all overlap (overlap_moe_expert_parallel_comm): 'auto' (default) tries "
            "each MoE layout with EP > 1 with it on, where megatron-core's gate allows it, and "
            "off",
        ),
    ):
        se.add_argument(
            flag,
            dest=dest,
            nargs="?",
            const="on",
            default="auto",
            choices=OVERLAP_MODES,
            help=f"{what}; 'on' (the flag alone) requests it on every layout, as explain does "
            "(the rules refuse or turn it off where megatron-core would); 'off' never",
        )
    se.add_argument(
        "--top", type=positive_int_argument, default=10, help="rows to print (default 10)"
    )
    se.add_argument(
        "--plot",
        metavar="PATH",
        help="draw tokens/s/GPU against memory per GPU for every costed layout (PNG or SVG; "
        "needs the 'plot' extra)",
    )
    se.add_argument("--json", action="store_true", help="print the result as one JSON object")
    # What search chooses itself: the layout flags explain reads are absent here.
    se.set_defaults(
        world_size=None,
        vpp=None,
        pipeline_model_parallel_layout=None,
        strict=False,
        ep_overlap=False,
    )
    _bound_numeric_flags(se)


#: The subcommands of ``bridge-overlap``, in the order ``--help`` lists them, with their help.
SUBCOMMANDS: dict[str, str] = {
    "explain": "show every overlap decision for a layout, with reasons",
    "search": "rank the layouts that fit a GPU by predicted tokens/s/GPU",
    "recipes": "list the recipes available here, with each one's layout",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``bridge-overlap``.

    With ``command`` (one of :data:`SUBCOMMANDS`), only that subcommand gets its flags: the parser
    of a command line whose first word is ``command`` (the others are listed, with their help).
    """
    parser = _Parser(prog="bridge-overlap", description=_DESCRIPTION)
    # prog given: what argparse would format from the usage (a formatter asks the terminal).
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, prog="bridge-overlap"
    )
    fill = {"explain": _add_explain, "search": _add_search, "recipes": _add_recipes}
    for name, help in SUBCOMMANDS.items():
        subparser = sub.add_parser(name, help=help)
        if command is None or command == name:
            fill[name](subparser)
    return parser


def _add_explain(ex: argparse.ArgumentParser) -> None:
    """``bridge-overlap explain``: a recipe or the reference, the job flags, the output."""
    ex.description = (
        "Explain the communication-overlap plan of a layout. With no arguments: the "
        "reference layout (TP4 + SP, PP4 with VPP2, distributed optimizer, 128 H100 GPUs, "
        "bf16, GPT-3 175B's shape: 96 layers, hidden 12288, 96 heads, seq 2048, mbs 1)."
    )
    ex.epilog = _limits_epilog()
    ex.add_argument(
        "--recipe",
        help=(
            "explain a recipe: a name (see 'bridge-overlap recipes') or 'package.module:function'; "
            "flags given here override its sizes"
        ),
    )
    ex.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help=(
            "with --recipe: overrides of the recipe's ConfigContainer, e.g. "
            "model.tensor_model_parallel_size=8 comm_overlap.tp_comm_overlap=false "
            "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=8 (builds the container: imports torch); "
            "gpu=NAME and mixed_precision=PRECISION are --gpu and --precision"
        ),
    )
    add_job_flags(ex, layout=True)
    ex.add_argument(
        "--plot",
        metavar="PATH",
        help="draw one step as lanes, with the plan's overlap and with none (PNG or SVG; needs "
        "the 'plot' extra)",
    )
    ex.add_argument(
        "--strict",
        action="store_true",
        help=(
            "exit 1 instead of falling back, and for a layout that does not fit in memory "
            "before printing the plan (without --strict it exits 1 after)"
        ),
    )
    ex.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    _bound_numeric_flags(ex)


def _add_recipes(ls: argparse.ArgumentParser) -> None:
    """``bridge-overlap recipes``: the output."""
    ls.description = (
        "List the shipped recipes and those registered under the "
        "'megatron_bridge.recipes' entry-point group, with each one's published layout."
    )
    ls.add_argument("--json", action="store_true", help="print the list as one JSON object")
