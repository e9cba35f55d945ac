"""Communication overlap for megatron-core training: what the user asks, what can run, and why.

A recipe author writes ``cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)``. At
model-build time :meth:`CommOverlapConfig.setup` decides which TP / PP / DP / EP overlap modes
can run with the model's layout and writes the result into megatron-core's
``TransformerConfig``, ``DistributedDataParallelConfig`` and ``OptimizerConfig``.

The package, one file per part:

- ``request``: :class:`CommOverlapConfig`, what the user asks, and its checks;
- ``knobs``: the knob table (area, how each request field is checked, which megatron-core
  config(s) it is written to);
- ``plan``: the plan data model, :class:`Decision`, :class:`OverlapPlan`;
- ``rules``: :func:`plan_comm_overlap`, a pure function of the request and the
  :class:`~megatron.bridge.training.job.JobDescription`, and
  :func:`check_layout`, the layout errors megatron-core would hit at cluster start;
- ``megatron_io``: :func:`describe_configs` and :func:`apply_plan`, megatron-core in and out;
- ``te``: whether Transformer Engine can run here (``HAVE_TE``, :func:`te_status`).

Nothing here turns an overlap off silently: a refused request is a warning naming the failed
condition and its fix (``strict=True`` raises :class:`OverlapRefusedError` instead), and
contradictory settings raise ``ValueError``/``TypeError`` naming the field.

Importing this package loads neither torch, megatron-core nor Transformer Engine.
"""

from __future__ import annotations

from typing import Any

from megatron.bridge.training.comm_overlap.knobs import DEFAULT_BUCKET_SIZE, KNOBS, Area, Knob
from megatron.bridge.training.comm_overlap.megatron_io import (
    apply_plan,
    describe_configs,
    log_plan,
)
from megatron.bridge.training.comm_overlap.plan import (
    Decision,
    OverlapPlan,
    OverlapRefusedError,
)
from megatron.bridge.training.comm_overlap.request import BootstrapBackend, CommOverlapConfig
from megatron.bridge.training.comm_overlap.rules import (
    check_layout,
    plan_comm_overlap,
    tp_overlap_buffer_rows,
)
from megatron.bridge.training.comm_overlap.te import (
    TEMode,
    TEStatus,
    current_te_status,
    probe_transformer_engine,
    te_status,
)
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.userbuffers import (
    GEMM_NAMES,
    PRESET_GPU_FAMILIES,
    PUBLISHED_PRESETS,
    BulkOverlapCfg,
    PipelineOverlapCfg,
    PresetShape,
    RingExchangeOverlapCfg,
    TransformerLayerTPOverlapCfg,
    find_userbuffers_preset,
    preset_names_of,
    preset_shapes_of,
)
from megatron.bridge.training.userbuffers_file import load_preset

__all__ = [
    "DEFAULT_BUCKET_SIZE",
    "GEMM_NAMES",
    "KNOBS",
    "PRESET_GPU_FAMILIES",
    "PUBLISHED_PRESETS",
    "Area",
    "BootstrapBackend",
    "BulkOverlapCfg",
    "CommOverlapConfig",
    "Decision",
    "JobDescription",
    "Knob",
    "ModelDescription",
    "OverlapPlan",
    "OverlapRefusedError",
    "PipelineOverlapCfg",
    "PresetShape",
    "RingExchangeOverlapCfg",
    "TEMode",
    "TEStatus",
    "TransformerLayerTPOverlapCfg",
    "apply_plan",
    "check_layout",
    "current_te_status",
    "describe_configs",
    "find_userbuffers_preset",
    "load_preset",
    "log_plan",
    "plan_comm_overlap",
    "preset_names_of",
    "preset_shapes_of",
    "probe_transformer_engine",
    "te_status",
    "tp_overlap_buffer_rows",
    # The published userbuffers presets, each importable by its published name.
    *PUBLISHED_PRESETS,
]


def __getattr__(name: str) -> Any:
    # HAVE_TE is computed on first access, so importing this package never imports TE; a real
    # attribute set here (unittest.mock.patch(..., "HAVE_TE", value), as upstream code does)
    # takes precedence, and te.current_te_status() reads it first. The published presets are
    # served by name from the one table that defines them.
    if name == "HAVE_TE":
        return probe_transformer_engine().available
    if name in PUBLISHED_PRESETS:
        return PUBLISHED_PRESETS[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
