"""What the recipe author asks for: :class:`CommOverlapConfig` and the checks of its fields.

The fields stay exactly as the user wrote them. :meth:`CommOverlapConfig.finalize` checks them
(types and ranges, from the knob table); :meth:`CommOverlapConfig.setup` resolves them against
megatron-core's configs and writes the plan there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from megatron.bridge.training.comm_overlap.knobs import KNOBS
from megatron.bridge.training.comm_overlap.megatron_io import setup_configs
from megatron.bridge.training.comm_overlap.te import current_te_status
from megatron.bridge.training.upstream_divergence import differs_from_upstream
from megatron.bridge.training.userbuffers import TransformerLayerTPOverlapCfg
from megatron.bridge.training.userbuffers_file import PresetSource, load_preset
from megatron.bridge.training.validators import (
    check_bool,
    check_choice,
    check_int,
    check_optional_bool,
)

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap.plan import OverlapPlan
    from megatron.bridge.training.comm_overlap.te import TEStatus

__all__ = ["BootstrapBackend", "CommOverlapConfig"]

BootstrapBackend = Literal["nccl", "mpi", "gloo"]
"""Backends that can bootstrap the TE userbuffers communicator."""

_OWNER = "CommOverlapConfig"


@differs_from_upstream(
    "never changed by setup (no user_comm_overlap_cfg copy); strict and preset_chosen_by are "
    "fields upstream does not have"
)
@dataclass(kw_only=True)
class CommOverlapConfig:
    """What the recipe author asks for. ``None`` means "let the rules decide".

    The fields stay exactly as the user wrote them; :meth:`setup` resolves them against the
    model's layout into an :class:`OverlapPlan` (see :attr:`resolved_plan`) and writes that into
    megatron-core's configs.
    """

    tp_comm_overlap: bool | Literal["auto"]
    """Ask for Transformer Engine userbuffer overlap of TP collectives with GEMMs: True is a
    request (refused with a warning, or an error with ``strict``, where the layout cannot run
    it); "auto" turns it on only where the layout can run it (TP >= 2, sequence parallelism,
    Transformer Engine), what recipes and ``bridge-overlap explain`` ask by default."""
    tp_comm_overlap_cfg: PresetSource | None = None
    """Per-GEMM userbuffer config: a preset, a mapping or a YAML path; None uses TE's defaults."""
    tp_comm_bootstrap_backend: BootstrapBackend = "nccl"
    """Backend that bootstraps the userbuffers communicator: nccl, mpi or gloo."""
    overlap_p2p_comm: bool | None = None
    """Overlap pipeline send/recv with compute (needs an interleaved pipeline)."""
    batch_p2p_comm: bool | None = None
    """Batch pipeline send/recv into one call (exclusive with overlap_p2p_comm)."""
    overlap_grad_reduce: bool | None = None
    """Overlap the gradient reduce-scatter/all-reduce with the backward pass."""
    overlap_param_gather: bool | None = None
    """Overlap the parameter all-gather with the forward pass (distributed optimizer only)."""
    overlap_param_gather_with_optimizer_step: bool | None = None
    """Start the first bucket's all-gather during the optimizer step (breaks checkpointing)."""
    align_param_gather: bool | None = None
    """Issue all pipeline stages' param all-gathers together (interleaved pipeline only)."""
    bucket_size: int | None = None
    """DDP bucket size in parameters (elements), not bytes."""
    defer_embedding_wgrad_compute: bool | None = None
    """Defer the embedding weight-gradient GEMMs into the pipeline flush."""
    wgrad_deferral_limit: int | None = None
    """Micro-batches whose embedding wgrad is deferred (0: all; -1 when deferral is off)."""
    data_parallel_size: int | None = None
    """Data-parallel size; normally derived from the world size at model-build time."""
    overlap_moe_expert_parallel_comm: bool | None = None
    """Overlap MoE expert-parallel all-to-all with compute."""
    delay_wgrad_compute: bool | None = None
    """Delay expert weight-gradient compute to widen the all-to-all overlap window."""
    preset_chosen_by: str | None = None
    """Who chose ``tp_comm_overlap_cfg`` automatically and from what, naming the published
    preset chosen (a recipe sets it); None: the preset is the user's. A preset put in its place
    later (not the one named here) counts as the user's."""
    strict: bool = False
    """Raise OverlapRefusedError instead of warning when a requested overlap cannot run or a
    setting looks like a mistake (e.g. a preset tuned for another shape)."""

    # Not dataclass fields (no annotation): none is something the user wrote, so
    # dataclasses.asdict/replace/== see only the request.
    _resolved_plan = None
    _preset = None

    def finalize(self) -> None:
        """Check the types and ranges of what the user wrote, and load the userbuffers config.

        No field the user wrote changes; the loaded config is kept aside as :attr:`preset`
        (a preset given as a file is read here, so a missing or malformed file fails now rather
        than when the model is built). Safe to call twice.
        """
        for name, knob in KNOBS.items():
            value = getattr(self, name)
            if knob.kind == "auto_flag":
                _check_auto_flag(name, value)
            elif knob.kind == "optional_flag":
                check_optional_bool(_OWNER, name, value, none_means="let the rules decide")
            elif knob.kind == "backend":
                check_choice(_OWNER, name, value, BootstrapBackend)
            elif knob.kind == "count":
                check_int(_OWNER, name, value, optional=True, unit="parameters, not bytes")
            elif knob.kind == "limit":
                check_int(_OWNER, name, value, minimum=-1, optional=True, unit="micro-batches")
            elif knob.kind == "preset":
                self._preset = load_preset(value)
        check_bool(_OWNER, "strict", self.strict)
        if self.preset_chosen_by is not None and not isinstance(self.preset_chosen_by, str):
            raise TypeError(
                f"{_OWNER}.preset_chosen_by must be a str or None, got "
                f"{type(self.preset_chosen_by).__name__}."
            )
        check_int(_OWNER, "data_parallel_size", self.data_parallel_size, optional=True)

    @property
    def preset(self) -> TransformerLayerTPOverlapCfg | None:
        """The userbuffers config as loaded by the last :meth:`finalize` (None before it)."""
        return self._preset

    def setup(
        self,
        model_config: Any,
        optimizer_config: Any,
        ddp_config: Any,
        *,
        data_parallel_size: int | None = None,
        micro_batch_size: int | None = None,
        global_batch_size: int | None = None,
        te_status: TEStatus | None = None,
        gpu: str | None = None,
        gpus_per_node: int | None = None,
        nvlink_domain: int | None = None,
    ) -> OverlapPlan:
        """Resolve against megatron-core configs and write the result into them, field by field.

        ``data_parallel_size`` comes from the world size (``runtime_config_update`` passes it);
        the ``data_parallel_size`` field, when the user set it, must agree. ``micro_batch_size``
        enables the TP-overlap token-divisibility check (``global_batch_size`` completes the job
        description the plan carries). ``te_status`` defaults to what this process sees
        (``te_status("assume")`` plans for a cluster); ``gpu`` names the GPU model when known (it
        enables the FP8 and connection checks), ``gpus_per_node`` and ``nvlink_domain`` the
        cluster's node and NVLink domain where they are not the catalogue's (they decide whether
        a TP group stays on NVLink). Returns the plan, also kept as :attr:`resolved_plan`.
        Calling it again with the same configs gives the same result: every call resolves from
        the configs as they are.

        Called directly, it checks the request against the layout; the checks of the layout
        itself that need the world size (pipeline split, expert grid, heads per TP rank) run in
        ``runtime_config_update`` and ``bridge-overlap explain``.
        """
        dp = self._data_parallel_size(data_parallel_size)
        te = te_status or current_te_status()
        plan = setup_configs(
            self,
            model_config,
            optimizer_config,
            ddp_config,
            data_parallel_size=dp,
            micro_batch_size=micro_batch_size,
            global_batch_size=global_batch_size,
            te_status=te,
            gpu=gpu,
            gpus_per_node=gpus_per_node,
            nvlink_domain=nvlink_domain,
        )
        self._resolved_plan = plan
        return plan

    @property
    def resolved_plan(self) -> OverlapPlan | None:
        """The plan of the last :meth:`setup` call, or None before the first."""
        return self._resolved_plan

    def _data_parallel_size(self, given: int | None) -> int:
        check_int("setup", "data_parallel_size", given, optional=True)
        if self.data_parallel_size is not None and given is not None:
            if self.data_parallel_size != given:
                raise ValueError(
                    f"CommOverlapConfig.data_parallel_size={self.data_parallel_size} contradicts the "
                    f"data-parallel size {given} derived from the world size; remove the field "
                    "(it is derived) or fix the parallel sizes."
                )
            return given
        if given is not None:
            return given
        if self.data_parallel_size is not None:
            return self.data_parallel_size
        raise ValueError(
            "The data-parallel size is unknown: pass setup(..., data_parallel_size=N), set "
            "CommOverlapConfig.data_parallel_size, or build through runtime_config_update(cfg), "
            "which derives it from the world size."
        )


def _check_auto_flag(name: str, value: object) -> None:
    """``value`` must be True, False or "auto" (``TypeError`` naming the field otherwise)."""
    if type(value) is not bool and not (isinstance(value, str) and value == "auto"):
        raise TypeError(
            f"{_OWNER}.{name} must be True or False, or 'auto' (on where the layout can run "
            f"it), got {value!r} ({type(value).__name__})."
        )
