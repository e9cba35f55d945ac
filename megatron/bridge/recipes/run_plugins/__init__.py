"""NeMo-Run plugins that prepare the launch of a training job.

``PerfEnvPlugin`` writes the launch-time environment (``CUDA_DEVICE_MAX_CONNECTIONS``,
LayerNorm SM margins, NCCL P2P chunk size, HybridEP's NVLink topology) onto an executor and
passes manual-GC overrides to ``run.Script`` tasks. It decides nothing itself: the rules live in
``megatron.bridge.training.launch_env`` and the plugin only applies that plan.

``NsysPlugin`` turns on Nsight Systems profiling for a window of training steps on chosen
ranks, so a trace shows whether communication really overlaps with compute.

Both are idempotent: ``setup`` twice on the same task and executor gives the same result. Both
log under this package's name, ``megatron.bridge.recipes.run_plugins``.

One file per part:

- ``perf_env``: :class:`PerfEnvPlugin` (and :data:`VBOOST_SETUP_LINE`);
- ``nsys``: :class:`NsysPlugin`;
- ``script_args``: what both pass to a ``run.Script`` task (:class:`PerfEnvPluginScriptArgs`,
  :class:`NsysPluginScriptArgs`), the converters (:func:`to_hydra_overrides`,
  :func:`no_script_args`) and how their output is appended.
"""

from __future__ import annotations

try:
    # Said here, before any part subclasses nemo_run.Plugin: how to install NeMo-Run.
    import nemo_run.core.execution.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a test by hiding nemo_run
    raise ImportError(
        "megatron.bridge.recipes.run_plugins needs NeMo-Run, which is not importable "
        f"({exc}). Install the `run` extra: pip install 'megatron-bridge-overlap[run]' "
        "(it also pins leptonai<0.27, which nemo-run 0.11 needs)."
    ) from exc

from megatron.bridge.recipes.run_plugins.nsys import NsysPlugin
from megatron.bridge.recipes.run_plugins.perf_env import VBOOST_SETUP_LINE, PerfEnvPlugin
from megatron.bridge.recipes.run_plugins.script_args import (
    NsysPluginScriptArgs,
    PerfEnvPluginScriptArgs,
    no_script_args,
    to_hydra_overrides,
)

__all__ = [
    "VBOOST_SETUP_LINE",
    "NsysPlugin",
    "NsysPluginScriptArgs",
    "PerfEnvPlugin",
    "PerfEnvPluginScriptArgs",
    "no_script_args",
    "to_hydra_overrides",
]
