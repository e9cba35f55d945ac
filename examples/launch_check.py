"""Launch ``bridge-overlap-check`` with NeMo-Run: 4 processes on this machine, and a Slurm dry run.

The check (``python -m megatron.bridge.check``) builds a recipe's model on every rank of a real
process group and verifies that all ranks resolve the same overlap plan and launch environment.
This example launches it twice:

- a real run with ``run.LocalExecutor(ntasks_per_node=4, launcher="torchrun")``: NeMo-Run starts
  torchrun, torchrun starts 4 processes, and the check runs them over gloo on the CPU (with
  ``--tiny``: the recipe's parallel shape fitted to 4 ranks, a small model). Rank 0's JSON report
  is read back from the job's log;
- a Slurm dry run: the sbatch script NeMo-Run would submit to check the same recipe on 2 nodes
  of 8 GPUs, written without a cluster; its srun line is printed.

    uv run python examples/launch_check.py                       # tiny gpt3_175b: TP2 x PP2 (VPP2)
    uv run python examples/launch_check.py --pp 1                # TP2 x DP2
    uv run python examples/launch_check.py --gpu b200 --precision fp8_mx   # planned for B200
    uv run python examples/launch_check.py --dry-run-only        # only the Slurm srun line

For a real Slurm launch, replace the LocalTunnel by ``run.SSHTunnel(...)`` for your login node,
set a container image, and call ``exp.run()`` instead of ``exp.dryrun()``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nemo_run as run

from megatron.bridge.cli.job_arguments import add_gpu_and_precision
from megatron.bridge.utils.root_logger import root_logger_preserved

CHECK_MODULE = "megatron.bridge.check"
GPUS_PER_NODE = 8


def check_task(recipe: str, extra_args: list[str]) -> run.Script:
    """The check as a NeMo-Run task: ``python -m megatron.bridge.check --recipe ... --tiny --json``."""
    return run.Script(
        path=CHECK_MODULE,
        m=True,
        entrypoint="python",
        args=["--recipe", recipe, "--tiny", "--json", *extra_args],
    )


@contextlib.contextmanager
def _nemo_run_guarded() -> Iterator[None]:
    # NeMo-Run runs shell commands through invoke, which forwards our stdin (none is needed, and
    # a closed or interactive one gets in the way); its Experiment replaces the root logger's
    # handlers, and the caller's must come back.
    with open(os.devnull) as devnull:
        saved, sys.stdin = sys.stdin, devnull
        try:
            with root_logger_preserved():
                yield
        finally:
            sys.stdin = saved


def run_locally(
    *, recipe: str, job_dir: Path, extra_args: list[str], nproc: int = 4
) -> tuple[str, dict[str, Any] | None]:
    """Run the check with a local torchrun of ``nproc`` processes; (job state, rank 0's report).

    The report is None when rank 0 wrote none (the log then says why).
    """
    executor = run.LocalExecutor(ntasks_per_node=nproc, launcher="torchrun")
    with _nemo_run_guarded():
        state = _run_local(executor, check_task(recipe, extra_args), job_dir)
    return state, _rank0_report(job_dir)


def _run_local(executor: run.LocalExecutor, task: run.Script, job_dir: Path) -> str:
    # Its own frame, so the experiment is garbage on return and finalized inside the guard.
    with run.Experiment(
        "bridge-overlap-check", executor=executor, base_dir=str(job_dir), log_level="WARN"
    ) as exp:
        exp.add(task, executor=executor, name="check")
        exp.run(sequential=True)
    return str(exp.jobs[0].state)


def _rank0_report(job_dir: Path) -> dict[str, Any] | None:
    # torchrun --tee prefixes each line of rank r with "[default<r>]:".
    for log in sorted(job_dir.rglob("*.out")) + sorted(job_dir.rglob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            _, sep, text = line.partition("[default0]:")
            if sep and text.startswith("{"):
                return json.loads(text)
    return None


def slurm_sbatch(
    *,
    recipe: str,
    job_dir: Path,
    extra_args: list[str],
    nodes: int = 2,
    account: str = "acct",
    partition: str = "batch",
) -> str:
    """Dry-run a Slurm launch of the check on ``nodes`` x 8 GPUs; return the sbatch script."""
    executor = run.SlurmExecutor(
        account=account,
        partition=partition,
        nodes=nodes,
        ntasks_per_node=GPUS_PER_NODE,
        gpus_per_node=GPUS_PER_NODE,
        time="00:20:00",
        launcher="torchrun",
        # LocalTunnel writes the job files on this machine; a plain Packager needs no git repo.
        tunnel=run.LocalTunnel(job_dir=str(job_dir / "jobs")),
        packager=run.Packager(),
    )
    with _nemo_run_guarded():
        _dry_run(executor, check_task(recipe, extra_args), job_dir)
    (script,) = job_dir.rglob("check_sbatch.sh")
    return script.read_text()


def _dry_run(executor: run.SlurmExecutor, task: run.Script, job_dir: Path) -> None:
    # Its own frame, so the experiment is garbage on return and finalized inside the guard.
    with run.Experiment(
        "bridge-overlap-check-dryrun", executor=executor, base_dir=str(job_dir), log_level="WARN"
    ) as exp:
        exp.add(task, executor=executor, name="check")
        exp.dryrun(log=False, delete_exp_dir=False)


def srun_line(sbatch: str) -> str:
    """The ``srun`` command of an sbatch script NeMo-Run wrote."""
    return next(line for line in sbatch.splitlines() if line.startswith("srun "))


def main(argv: list[str] | None = None) -> int:
    """Run the check locally (unless ``--dry-run-only``), then print the Slurm dry run's srun line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="gpt3_175b", help="recipe to check (default gpt3_175b)")
    parser.add_argument("--pp", help="pipeline-parallel size passed to the check")
    add_gpu_and_precision(
        parser, gpu_default="the visible GPU, none on a CPU", precision_default="the recipe's"
    )
    parser.add_argument("--dry-run-only", action="store_true", help="skip the local run")
    parser.add_argument("--job-dir", type=Path, help="where to write the job files (default: temp)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    extra = [
        *(["--pp", args.pp] if args.pp else []),
        *(["--gpu", args.gpu] if args.gpu else []),
        *(["--precision", args.precision] if args.precision else []),
    ]
    job_dir = args.job_dir or Path(tempfile.mkdtemp(prefix="bridge-overlap-check-"))

    code = 0
    if not args.dry_run_only:
        state, report = run_locally(recipe=args.recipe, job_dir=job_dir / "local", extra_args=extra)
        print(f"local run ({job_dir / 'local'}): {state}")
        if report is None:
            print("  rank 0 wrote no report; see the job's log")
            code = 1
        else:
            layout = report["reports"][0]["layout"] if report["reports"] else None
            print(f"  layout: {layout}")
            print(f"  ranks agree: {report['agree']} (exit code {report['exit_code']})")
            for problem in report["errors"] + report["disagreements"]:
                print(f"  - {problem}")
            code = report["exit_code"]

    sbatch = slurm_sbatch(recipe=args.recipe, job_dir=job_dir / "slurm", extra_args=extra)
    print(f"Slurm dry run ({job_dir / 'slurm'}), srun line:")
    print(f"  {srun_line(sbatch)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
