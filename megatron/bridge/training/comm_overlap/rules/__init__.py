"""The resolution rules: from a request and the job description to a plan, as a pure function.

:func:`plan_comm_overlap` decides every knob from a :class:`CommOverlapConfig` and a
:class:`~megatron.bridge.training.job.JobDescription` alone (no megatron-core objects, no I/O, no
torch). Each decision records its source and a one-line reason; a refused request becomes a
warning naming every failed condition and its fix, and a contradiction raises
``ValueError``/``TypeError`` naming the field.

One file per part:

- ``planner``: :class:`~.planner.Planner`, the collector of decisions, warnings, cautions and
  notes, and the user's settings (in ``CommOverlapConfig`` or straight on a megatron-core config);
- ``tp``, ``pp``, ``dp``, ``ep``, ``wgrad``: one area's rules each (``ep`` also holds delayed
  wgrad compute and its CUDA-graph limits; ``wgrad`` the embedding wgrad deferral);
- ``fsdp``: what the DP knobs mean under Megatron-FSDP (``cfg.ddp.use_megatron_fsdp``), and what
  it refuses;
- ``cuda_graphs``: what CUDA graphs mean for each overlap that megatron-core runs with them;
- ``hardware_notes``: notes and cautions from the expert grid and the GPU generation;
- ``build_notes``: the note that the installed megatron-core cannot build the model;
- ``layout``: :func:`check_layout`, the layout errors megatron-core would hit at cluster start;
- ``resolve``: :func:`plan_comm_overlap`, which runs the areas in order.

A rule whose result differs from upstream Megatron-Bridge's carries
``upstream_divergence.differs_from_upstream``; the docs' migration section names each such rule.
"""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.rules.ep import EPDispatcher
from megatron.bridge.training.comm_overlap.rules.layout import check_layout
from megatron.bridge.training.comm_overlap.rules.resolve import plan_comm_overlap
from megatron.bridge.training.comm_overlap.rules.tp import tp_overlap_buffer_rows

__all__ = [
    "EPDispatcher",
    "check_layout",
    "plan_comm_overlap",
    "tp_overlap_buffer_rows",
]
