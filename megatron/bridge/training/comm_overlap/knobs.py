"""The knob table: every overlap knob, its area, how a request value is checked, where it lands.

One row per knob drives the whole package: ``CommOverlapConfig.finalize`` checks each request
field by its ``kind``, a plan lists decisions in this order and groups them by ``area``,
the megatron-core reader finds settings the user wrote straight onto any of the knob's
``targets`` (and ``direct`` says what such a setting counts as), ``apply_plan`` writes each value
to the configs in ``targets``, and ``bridge-overlap-check`` turns every ``switch`` off for its
baseline. Adding a knob is one row here plus its rule.

The megatron-core field a knob is written to has the knob's name on every config it targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from megatron.bridge.training.job import ConfigName

__all__ = ["DEFAULT_BUCKET_SIZE", "KNOBS", "Area", "ConfigName", "DirectUse", "Knob", "KnobKind"]

#: DDP bucket size used when data-parallel overlap is on: 128 Mi *parameters* (elements), not bytes.
DEFAULT_BUCKET_SIZE = 128 * 1024 * 1024

Area = Literal["tp", "pp", "dp", "ep", "wgrad"]
"""Which parallelism a knob overlaps."""

KnobKind = Literal["auto_flag", "optional_flag", "preset", "backend", "count", "limit"]
"""How a request value is checked: a required bool or ``"auto"`` (on where the layout can run it),
a bool or None, a userbuffers preset, the bootstrap backend, a positive int or None, an int >= -1
or None."""

DirectUse = Literal["honoured", "reported"]
"""What a value written straight onto a megatron-core config (not through CommOverlapConfig)
counts as: the user's setting (honoured) or something the plan may replace and then says so."""


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One overlap knob."""

    area: Area
    """Which parallelism it overlaps."""
    kind: KnobKind
    """How the CommOverlapConfig field is checked."""
    targets: tuple[ConfigName, ...]
    """megatron-core configs the resolved value is written to (same field name on each). When
    two of them hold different settings of the user's, the first one named here wins."""
    core_default: Any
    """megatron-core's default for the field, the same on every target. A value equal to it that
    the library did not write cannot be told apart from an untouched field: it reads as not set."""
    direct: DirectUse | None = None
    """What a setting written straight onto any of ``targets`` counts as; None: not read."""
    switch: bool = False
    """True turns an overlap on: the all-off baseline sets every switch to False."""


def _overlap_switch(
    area: Area,
    targets: tuple[ConfigName, ...],
    direct: DirectUse,
    kind: KnobKind = "optional_flag",
) -> Knob:
    """A knob that turns one overlap on, off by megatron-core's default."""
    return Knob(
        area=area,
        kind=kind,
        targets=targets,
        core_default=False,
        direct=direct,
        switch=True,
    )


#: Every knob, in plan order.
KNOBS: Mapping[str, Knob] = MappingProxyType(
    {
        "tp_comm_overlap": _overlap_switch("tp", ("model",), "reported", kind="auto_flag"),
        # A preset written onto a GPT provider counts as the user's (it is where Megatron-LM
        # users put their YAML path).
        "tp_comm_overlap_cfg": Knob(
            area="tp", kind="preset", targets=("model",), core_default=None, direct="honoured"
        ),
        "tp_comm_bootstrap_backend": Knob(
            area="tp", kind="backend", targets=("model",), core_default="nccl"
        ),
        "overlap_p2p_comm": _overlap_switch("pp", ("model",), "reported"),
        # Batching pipeline sends overlaps nothing: not a switch (the rules keep deciding it).
        "batch_p2p_comm": Knob(
            area="pp",
            kind="optional_flag",
            targets=("model",),
            core_default=True,
            direct="reported",
        ),
        # Recipes set DP overlap straight on cfg.ddp (megatron-core's own place for it), so a
        # value found there is the user's setting.
        "overlap_grad_reduce": _overlap_switch("dp", ("ddp",), "honoured"),
        # megatron-core reads it from both configs; cfg.ddp wins a disagreement.
        "overlap_param_gather": _overlap_switch("dp", ("ddp", "optimizer"), "honoured"),
        "align_param_gather": _overlap_switch("dp", ("ddp",), "honoured"),
        "bucket_size": Knob(
            area="dp", kind="count", targets=("ddp",), core_default=None, direct="honoured"
        ),
        "overlap_param_gather_with_optimizer_step": _overlap_switch(
            "dp", ("optimizer",), "reported"
        ),
        "overlap_moe_expert_parallel_comm": _overlap_switch("ep", ("model",), "reported"),
        "delay_wgrad_compute": _overlap_switch("ep", ("model", "ddp"), "reported"),
        "defer_embedding_wgrad_compute": _overlap_switch("wgrad", ("model",), "reported"),
        "wgrad_deferral_limit": Knob(
            area="wgrad", kind="limit", targets=("model",), core_default=0, direct="reported"
        ),
    }
)
