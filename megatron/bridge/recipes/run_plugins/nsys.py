"""``NsysPlugin``: turns on Nsight Systems profiling in a NeMo-Run executor's launcher for a
window of training steps on chosen ranks, and passes the window to the task, so a trace shows
whether communication really overlaps with compute.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

import nemo_run as run
from nemo_run.core.execution.base import Executor

from megatron.bridge.recipes.run_plugins.script_args import (
    NsysPluginScriptArgs,
    add_script_overrides,
    check_converter,
    nsys_hydra_overrides,
    nsys_overrides,
)
from megatron.bridge.training.validators import check_bool, check_int, check_optional_bool

__all__ = ["NsysPlugin"]

# Each part logs under the plugins' import path, megatron.bridge.recipes.run_plugins: the
# logger name a user's logging configuration names.
logger = logging.getLogger(__package__)


def _validate_ranks(owner: str, ranks: object) -> list[int]:
    if not isinstance(ranks, list | tuple) or not ranks:
        raise TypeError(f"{owner}.profile_ranks must be a non-empty list of ints, got {ranks!r}.")
    for i, rank in enumerate(ranks):
        # Any bad rank is a ValueError here, a wrong type included (the contract).
        check_int(
            owner, f"profile_ranks[{i}]", rank, minimum=0, unit="global rank", type_error=ValueError
        )
    return list(ranks)


@dataclasses.dataclass(kw_only=True)
class NsysPlugin(run.Plugin):
    """Profile training steps ``[profile_step_start, profile_step_end)`` with Nsight Systems.

    The launcher wraps every rank in ``nsys profile`` with capture range
    ``cudaProfilerApi``; the training loop starts and stops the capture on the steps and
    ranks given here, which this plugin passes to the task.
    """

    profile_step_start: int
    """First profiled training step."""
    profile_step_end: int
    """Step at which profiling stops (exclusive); must be > profile_step_start."""
    profile_ranks: list[int] = dataclasses.field(default_factory=lambda: [0])
    """Global ranks that start the capture."""
    nsys_trace: list[str] = dataclasses.field(default_factory=lambda: ["nvtx", "cuda"])
    """APIs nsys traces (``nsys profile -t``)."""
    nsys_extra_args: list[str] = dataclasses.field(default_factory=list)
    """Extra ``nsys profile`` arguments, added after the launcher's defaults."""
    nsys_gpu_metrics: bool = False
    """Sample GPU metrics (SM and memory utilization) in the trace."""
    record_memory_history: bool | None = None
    """Also record the PyTorch CUDA memory history in the window (None: do not pass)."""
    record_shapes: bool | None = None
    """Also record operator input shapes (None: do not pass)."""
    script_args_converter_fn: Callable[[NsysPluginScriptArgs], list[str]] | None = None
    """Turns an NsysPluginScriptArgs into script args (called once); default is hydra style."""

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        owner = type(self).__name__
        start = check_int(
            owner, "profile_step_start", self.profile_step_start, minimum=0, unit="training step"
        )
        end = check_int(
            owner, "profile_step_end", self.profile_step_end, minimum=0, unit="training step"
        )
        if start >= end:
            raise ValueError(
                f"{owner}.profile_step_start ({start}) must be < profile_step_end ({end})."
            )
        _validate_ranks(owner, self.profile_ranks)
        if not isinstance(self.nsys_trace, list | tuple) or not all(
            isinstance(t, str) and t for t in self.nsys_trace
        ):
            raise TypeError(
                f"{owner}.nsys_trace must be a list of nsys trace names such as ['nvtx', "
                f"'cuda'], got {self.nsys_trace!r}."
            )
        if not isinstance(self.nsys_extra_args, list | tuple) or not all(
            isinstance(a, str) for a in self.nsys_extra_args
        ):
            raise TypeError(f"{owner}.nsys_extra_args must be a list of str.")
        check_bool(owner, "nsys_gpu_metrics", self.nsys_gpu_metrics)
        for name in ("record_memory_history", "record_shapes"):
            check_optional_bool(owner, name, getattr(self, name), none_means="not passed")
        check_converter(owner, self.script_args_converter_fn)

    def script_args(self) -> NsysPluginScriptArgs:
        """What ``setup`` hands the converter for a ``run.Script`` task."""
        return NsysPluginScriptArgs(
            profile_step_start=self.profile_step_start,
            profile_step_end=self.profile_step_end,
            profile_ranks=list(self.profile_ranks),
            record_shapes=bool(self.record_shapes),
            record_memory_history=self.record_memory_history,
            record_shapes_set=self.record_shapes is not None,
        )

    def profiling_overrides(self) -> dict[str, Any]:
        """What the training loop needs to know, as ``profiling.*`` overrides."""
        return nsys_overrides(self.script_args())

    def setup(self, task: run.Partial | run.Script, executor: Executor) -> None:
        """Turn on nsys in the executor's launcher and pass the profile window to ``task``."""
        self._validate()
        launcher = executor.get_launcher()
        launcher.nsys_profile = True
        launcher.nsys_trace = list(self.nsys_trace)
        launcher.nsys_gpu_metrics = self.nsys_gpu_metrics
        for arg in self.nsys_extra_args:
            if arg not in launcher.nsys_extra_args:
                launcher.nsys_extra_args.append(arg)
        if isinstance(executor, run.SlurmExecutor):
            # nsys expands %q{VAR}; one file per node and rank instead of one per pid.
            launcher.nsys_filename = (
                "profile_%p_%q{SLURM_JOB_ID}_node%q{SLURM_NODEID}_rank%q{SLURM_PROCID}"
            )
        logger.info(
            "NsysPlugin: nsys on %s (trace %s), steps [%d, %d) on ranks %s.",
            type(executor).__name__,
            ",".join(launcher.nsys_trace),
            self.profile_step_start,
            self.profile_step_end,
            self.profile_ranks,
        )
        if isinstance(task, run.Script):
            add_script_overrides(
                task,
                self.script_args(),
                self.script_args_converter_fn,
                nsys_hydra_overrides,
                owner="NsysPlugin",
            )
        else:
            self._apply_to_partial(task, self.profiling_overrides())

    def _apply_to_partial(self, task: run.Partial, overrides: Mapping[str, Any]) -> None:
        fn = task.__fn_or_cls__
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):  # builtins and some C callables have no signature
            params = {}
        applied, missing = [], []
        for key, value in overrides.items():
            name = key.removeprefix("profiling.")
            if name in params:
                setattr(task, name, value)
                applied.append(name)
            else:
                missing.append(name)
        if applied:
            logger.info("NsysPlugin: set %s on the run.Partial task.", applied)
        window = {"profile_step_start", "profile_step_end", "profile_ranks"}
        if window - set(applied):
            logger.warning(
                "NsysPlugin: %s takes no %s; set them in the training config's profiling "
                "section, or nsys (capture range cudaProfilerApi) records nothing.",
                getattr(fn, "__qualname__", fn),
                missing,
            )
        elif missing:
            logger.info(
                "NsysPlugin: %s takes no %s; not passed.", getattr(fn, "__qualname__", fn), missing
            )
