"""The ``bridge-overlap-check`` command: its arguments, the run on every rank, the exit code.

:func:`main` joins the process group (NCCL with CUDA, gloo without; a world of one outside
torchrun), has every rank build and report its chunks, gathers and compares the reports, times
the plan on CUDA, and rank 0 prints the report (text or ``--json``). Exit codes, the same on
every rank: :data:`EXIT_OK`, :data:`EXIT_DISAGREE`, :data:`EXIT_ERROR`, and argparse's 2 for a
command line it rejects. Under torchrun every worker exits with the code and torchrun itself
exits 0 or 1 (its ``ChildFailedError``): the code is in rank 0's report and in torchrun's
failure summary.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import socket
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from megatron.bridge.check.compare import compare_reports
from megatron.bridge.check.cuda import _cuda_timings
from megatron.bridge.check.ranks import _check_rank, gather_outcomes
from megatron.bridge.check.render import _error_lines, _render
from megatron.bridge.cli.job_arguments import add_cluster, add_gpu_and_precision
from megatron.bridge.training.validators import positive_int_argument

__all__ = ["EXIT_DISAGREE", "EXIT_ERROR", "EXIT_OK", "JSON_SCHEMA_VERSION", "build_parser", "main"]

EXIT_OK, EXIT_DISAGREE, EXIT_ERROR = 0, 1, 2

#: Version of the ``--json`` document layout; bumped when a key changes meaning or goes away.
JSON_SCHEMA_VERSION = 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``bridge-overlap-check``."""
    parser = argparse.ArgumentParser(
        prog="bridge-overlap-check",
        description="Check a recipe's overlap plan on a real multi-process world (run it "
        "under torchrun; without it, as a world of one).",
        epilog=(
            "Exit codes, the same on every rank: 0 all ranks agree; 1 they disagree; 2 an error "
            "on any rank. Under torchrun each worker exits with it, and torchrun itself exits 1 "
            "when any worker exits non-zero: rank 0's report ends with the code ('exit_code' "
            "with --json), and torchrun's failure summary lists each worker's."
        ),
    )
    parser.add_argument(
        "--recipe", required=True, help="recipe name (e.g. gpt3_175b) or 'module:function'"
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="fit the recipe's parallel shape to the world and shrink the model to build anywhere",
    )
    parser.add_argument("--tp", type=positive_int_argument, help="tensor-parallel size (exact)")
    parser.add_argument("--pp", type=positive_int_argument, help="pipeline-parallel size (exact)")
    parser.add_argument(
        "--vpp", type=positive_int_argument, help="virtual pipeline size (1 = none)"
    )
    parser.add_argument("--cp", type=positive_int_argument, help="context-parallel size (exact)")
    # The flags and choices of `bridge-overlap explain`: the recipe is changed the same way.
    add_gpu_and_precision(
        parser,
        gpu_default="the visible GPU; on a CPU none, planned as for Hopper or older",
        precision_default="the recipe's",
    )
    add_cluster(parser)
    parser.add_argument("--json", action="store_true", help="rank 0 prints one JSON document")
    parser.add_argument(
        "--timeout",
        type=positive_int_argument,
        default=600,
        help="seconds a collective may wait for the other ranks before failing (default 600)",
    )
    return parser


def _single_process_env() -> None:
    # Run outside torchrun as a world of one, so the command also works on its own.
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in (
        ("RANK", "0"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", str(port)),
    ):
        os.environ.setdefault(name, value)


def _quiet_warnings() -> None:
    # megatron-core warns on import that TE / Apex are missing and on a few config defaults;
    # four ranks repeating that would bury the report.
    warnings.filterwarnings("ignore", r"(Transformer Engine and Apex are|Apex is) not installed")
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", r".*moe_ffn_hidden_size is not set")
    warnings.filterwarnings("ignore", r"full scope is deprecated")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check on this rank; returns the exit code every rank shares."""
    args = build_parser().parse_args(argv)
    _single_process_env()
    rank = int(os.environ["RANK"])
    logging.basicConfig(
        level=logging.WARNING if rank == 0 else logging.ERROR,
        format=f"[rank {rank}] %(levelname)s %(name)s: %(message)s",
    )
    _quiet_warnings()

    import torch
    import torch.distributed as dist

    on_cuda = torch.cuda.is_available()
    backend = "nccl" if on_cuda else "gloo"
    if on_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    except Exception as exc:
        # No group, so nothing to agree on: each rank says why and stops.
        print(f"[rank {rank}] cannot join the process group: {exc}", file=sys.stderr)
        return EXIT_ERROR
    world = dist.get_world_size()

    kept: dict[str, Any] = {}
    try:
        outcomes = gather_outcomes(
            lambda: _check_rank(args, world_size=world, on_cuda=on_cuda, keep=kept)
        )
        errors = _error_lines(outcomes)
        reports = [o["value"] for o in outcomes if o["ok"]]
        disagreements = [] if errors else compare_reports(reports)
        code = EXIT_ERROR if errors else EXIT_DISAGREE if disagreements else EXIT_OK

        timings = None
        if on_cuda and code == EXIT_OK:
            timed = gather_outcomes(lambda: _cuda_timings(args, world_size=world, kept=kept))
            errors = _error_lines(timed)
            if errors:
                code = EXIT_ERROR
            else:
                # The slowest rank sets the step time.
                timings = {
                    key: max(o["value"][key] for o in timed) for key in ("planned_s", "all_off_s")
                }

        if rank == 0:
            document = {
                "schema_version": JSON_SCHEMA_VERSION,
                "recipe": args.recipe,
                "tiny": args.tiny,
                "gpu": args.gpu,
                "precision": args.precision,
                "world_size": world,
                "backend": backend,
                "exit_code": code,
                "agree": code == EXIT_OK,
                "errors": errors,
                "disagreements": disagreements,
                "cuda_timings": timings,
                "reports": reports,
            }
            if args.json:
                text = json.dumps(document, default=repr)
            else:
                plan = kept["cfg"].overlap_plan if "cfg" in kept else None
                text = _render(document, plan.render() if plan is not None else None)
            # One write: the ranks share torchrun's stdout.
            try:
                sys.stdout.write(text + "\n")
                sys.stdout.flush()
            except BrokenPipeError:
                # The reader is gone (``| head``); the other ranks still wait at the barrier
                # below, and the exit code stays the check's. Python's signal docs: point
                # stdout at devnull so that the interpreter's last flush does not fail again.
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
        # Nobody leaves before rank 0 has printed: torchrun stops every process as soon as one
        # exits non-zero, which would cut the report short.
        dist.barrier()
        return code
    finally:
        _teardown()


def _teardown() -> None:
    import torch.distributed as dist

    if "megatron.core.parallel_state" in sys.modules:
        from megatron.core import parallel_state

        parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()
