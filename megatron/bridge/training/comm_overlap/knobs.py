"""The knob table: every overlap knob, its area, how a request value is checked, where it lands.

One row per knob drives the whole package: ``CommOverlapConfig.finalize`` checks each request
field by its ``kind``, a plan lists decisions in this order and groups them by ``area``,
the megatron-core reader finds settings the user wrote straight onto a megatron-core config
through ``direct``, and ``apply_plan`` writes each value to the configs in ``targets``. Adding a
knob is one row here plus its rule.

The megatron-core field a knob is written to has the knob's name on every config it targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from megatron.bridge.training.job import ConfigName

__all__ = ["DEFAULT_BUCKET_SIZE", "KNOBS", "Area", "ConfigName", "Knob", "KnobKind"]

#: DDP bucket size used when data-parallel overlap is on: 128 Mi *parameters* (elements), not bytes.
DEFAULT_BUCKET_SIZE = 128 * 1024 * 1024

Area = Literal["tp", "pp", "dp", "ep", "wgrad"]
"""Which parallelism a knob overlaps."""

KnobKind = Literal["flag", "optional_flag", "preset", "backend", "count", "limit"]
"""How a request value is checked: a required bool, a bool or None, a userbuffers preset, the
bootstrap backend, a positive int or None, an int >= -1 or None."""

DirectUse = Literal["honoured", "reported"]
"""What a value written straight onto a megatron-core config (not through CommOverlapConfig)
counts as: the user's setting (honoured) or something the plan may replace and then says so."""


@dataclass(frozen=True)
class Knob:
    """One overlap knob."""

    area: Area
    """Which parallelism it overlaps."""
    kind: KnobKind
    """How the CommOverlapConfig field is checked."""
    targets: tuple[ConfigName, ...]
    """megatron-core configs the resolved value is written to (same field name on each)."""
    direct: tuple[ConfigName, DirectUse] | None = None
    """Where a user may have set it straight on a megatron-core config, and what that counts as."""


#: Every knob, in plan order.
KNOBS: Mapping[str, Knob] = MappingProxyType(
    {
        "tp_comm_overlap": Knob("tp", "flag", ("model",), ("model", "reported")),
        # A preset written onto a GPT provider counts as the user's (it is where Megatron-LM
        # users put their YAML path).
        "tp_comm_overlap_cfg": Knob("tp", "preset", ("model",), ("model", "honoured")),
        "tp_comm_bootstrap_backend": Knob("tp", "backend", ("model",)),
        "overlap_p2p_comm": Knob("pp", "optional_flag", ("model",), ("model", "reported")),
        "batch_p2p_comm": Knob("pp", "optional_flag", ("model",), ("model", "reported")),
        # Recipes set DP overlap straight on cfg.ddp (megatron-core's own place for it), so a
        # value found there is the user's setting.
        "overlap_grad_reduce": Knob("dp", "optional_flag", ("ddp",), ("ddp", "honoured")),
        "overlap_param_gather": Knob(
            "dp", "optional_flag", ("ddp", "optimizer"), ("ddp", "honoured")
        ),
        "align_param_gather": Knob("dp", "optional_flag", ("ddp",), ("ddp", "honoured")),
        "bucket_size": Knob("dp", "count", ("ddp",), ("ddp", "honoured")),
        "overlap_param_gather_with_optimizer_step": Knob(
            "dp", "optional_flag", ("optimizer",), ("optimizer", "reported")
        ),
        "overlap_moe_expert_parallel_comm": Knob(
            "ep", "optional_flag", ("model",), ("model", "reported")
        ),
        "delay_wgrad_compute": Knob("ep", "optional_flag", ("model", "ddp"), ("model", "reported")),
        "defer_embedding_wgrad_compute": Knob(
            "wgrad", "optional_flag", ("model",), ("model", "reported")
        ),
        "wgrad_deferral_limit": Knob("wgrad", "limit", ("model",), ("model", "reported")),
    }
)
