"""Dry-run a Slurm launch of the GPT-3 175B recipe with NeMo-Run and PerfEnvPlugin.

Builds the recipe, derives the launch environment from it (the plugin reads the parallel sizes
from the config; nothing is repeated here), and asks NeMo-Run for the sbatch script it would
submit, without a cluster. The task is this repository's own entry point,
``python -m megatron.bridge.check --recipe gpt3_175b``: on the cluster it builds every rank's
model chunks, checks that all ranks resolve the same plan and environment, and times a few
steps with the plan's overlap on and off (see ``examples/launch_check.py`` for a real 4-process
run on a laptop):

    uv run python examples/launch_gpt3_175b.py              # 1024 x H100, published layout
    uv run python examples/launch_gpt3_175b.py --gpu b200   # Blackwell: 32 connections, B200 preset
    uv run python examples/launch_gpt3_175b.py --gpu b200 --precision fp8_cs
    uv run python examples/launch_gpt3_175b.py --nsys       # also profile steps 10-11 on rank 0

The task gets the same ``--gpu`` and ``--precision`` (:func:`check_args`), so the check plans
the config whose environment the sbatch script exports. It prints an excerpt of the generated sbatch script: node count, exports, the srun line. For a
real launch, replace the LocalTunnel by ``run.SSHTunnel(...)`` for your login node, swap the
task for your training entry point if you like, and call ``exp.run()`` instead of
``exp.dryrun()``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

import nemo_run as run

from megatron.bridge.cli.job_arguments import add_gpu_and_precision
from megatron.bridge.recipes import gpt3_175b
from megatron.bridge.recipes.run_plugins import NsysPlugin, PerfEnvPlugin, no_script_args
from megatron.bridge.utils.root_logger import root_logger_preserved

#: The entry point the job runs: the multi-process check of this repository.
CHECK_MODULE = "megatron.bridge.check"
GPUS_PER_NODE = 8


def check_args(*, gpu: str, precision: str | None) -> list[str]:
    """The check's arguments: the recipe at the GPU and precision the launch exports for."""
    args = ["--recipe", "gpt3_175b", "--gpu", gpu]
    if precision is not None:
        args += ["--precision", precision]
    return [*args, "--json"]


def sbatch_for(
    *,
    gpu: str,
    job_dir: Path,
    nsys: bool,
    precision: str | None = None,
    account: str = "acct",
    partition: str = "batch",
) -> str:
    """Dry-run the launch into ``job_dir`` and return the sbatch script NeMo-Run wrote.

    ``precision`` None is the recipe's own.
    """
    keywords = {"gpu": gpu} if precision is None else {"gpu": gpu, "precision": precision}
    cfg = gpt3_175b.gpt3_175b(**keywords)
    num_gpus = gpt3_175b.SPEC.num_gpus
    # The check runs no training loop, so it takes no manual-GC overrides.
    plugins: list[run.Plugin] = [
        PerfEnvPlugin.from_config(cfg, num_gpus=num_gpus, gpu=gpu, enable_manual_gc=False)
    ]
    if nsys:
        # nsys wraps every rank; the check takes no step-window arguments (it times its few
        # steps whole), so the converter passes none.
        plugins.append(
            NsysPlugin(
                profile_step_start=10, profile_step_end=11, script_args_converter_fn=no_script_args
            )
        )

    executor = run.SlurmExecutor(
        account=account,
        partition=partition,
        nodes=num_gpus // GPUS_PER_NODE,
        ntasks_per_node=GPUS_PER_NODE,
        gpus_per_node=GPUS_PER_NODE,
        time="04:00:00",
        # LocalTunnel writes the job files on this machine; a plain Packager needs no git repo.
        tunnel=run.LocalTunnel(job_dir=str(job_dir / "jobs")),
        packager=run.Packager(),
    )
    task = run.Script(
        path=CHECK_MODULE,
        m=True,
        entrypoint="python",
        args=check_args(gpu=gpu, precision=precision),
    )

    # LocalTunnel runs shell commands through invoke, which forwards our stdin; a dry run needs
    # none, and an interactive or closed stdin would otherwise get in the way.
    with open(os.devnull) as devnull:
        saved, sys.stdin = sys.stdin, devnull
        try:
            # NeMo-Run's Experiment replaces the root logger's handlers; the caller's come back.
            with root_logger_preserved():
                _dry_run(executor, task, plugins, job_dir)
        finally:
            sys.stdin = saved
    (script,) = job_dir.rglob("pretrain_sbatch.sh")
    return script.read_text()


def _dry_run(executor: run.Executor, task: run.Script, plugins: list[run.Plugin], job_dir: Path):
    # Its own frame, so the experiment is garbage on return and finalized inside the guard.
    with run.Experiment(
        "gpt3-175b-dryrun", executor=executor, base_dir=str(job_dir), log_level="WARN"
    ) as exp:
        exp.add(task, executor=executor, name="pretrain", plugins=plugins)
        exp.dryrun(log=False, delete_exp_dir=False)


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, dry-run the launch and print what the plugins put in the sbatch script."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_gpu_and_precision(parser, gpu_default="h100", precision_default="the recipe's, bf16")
    parser.set_defaults(gpu="h100")
    parser.add_argument("--nsys", action="store_true", help="add NsysPlugin (steps 10-11)")
    parser.add_argument("--job-dir", type=Path, help="where to write the job files (default: temp)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    job_dir = args.job_dir or Path(tempfile.mkdtemp(prefix="gpt3-175b-dryrun-"))
    sbatch = sbatch_for(gpu=args.gpu, precision=args.precision, job_dir=job_dir, nsys=args.nsys)
    print(f"sbatch script written under {job_dir}; excerpt:")
    for line in sbatch.splitlines():
        if line.startswith(("#SBATCH --nodes", "export ", "srun --output")):
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
