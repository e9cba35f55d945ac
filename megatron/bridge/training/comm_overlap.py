"""Communication overlap for megatron-core training: what the user asks, what can run, and why.

A recipe author writes ``cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)``. At
model-build time :meth:`CommOverlapConfig.setup` decides which TP / PP / DP / EP overlap modes
can run with the model's layout and writes the result into megatron-core's
``TransformerConfig``, ``DistributedDataParallelConfig`` and ``OptimizerConfig``.

The decision itself is :func:`plan_comm_overlap`, a pure function of plain inputs
(:class:`LayoutFacts`) that returns an :class:`OverlapPlan`: each knob's value, where it came
from (``default``, ``derived``, ``user`` or ``refused``) and why. Writing the plan into
megatron-core configs (:func:`apply_plan`), explaining it on a terminal and choosing the launch
environment are consumers of the same plan.

Nothing here turns an overlap off silently: a refused request is a warning naming the failed
condition and its fix (``strict=True`` raises :class:`OverlapRefusedError` instead), and
contradictory settings raise ``ValueError``/``TypeError`` naming the field.

Importing this module loads neither torch, megatron-core nor Transformer Engine.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

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
    userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096,
    userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192,
    userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048,
    userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192,
    userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096,
    userbuffers_bf16_h100_h6144_tp2_mbs2_seqlen2048,
    userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192,
    userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
    userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192,
    userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192,
    userbuffers_fp8_b200_h12288_tp4_mbs1_seqlen2048,
    userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192,
    userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096,
    userbuffers_fp8_h100_h6144_tp2_mbs2_seqlen2048,
    userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora,
    userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192,
    userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048,
    userbuffers_fp8_h100_h16384_tp4_mbs1_seqlen2048_lora,
    userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192,
)

__all__ = [
    "DEFAULT_BUCKET_SIZE",
    "GEMM_NAMES",
    "PRESET_GPU_FAMILIES",
    "PUBLISHED_PRESETS",
    "BulkOverlapCfg",
    "CommOverlapConfig",
    "Decision",
    "LayoutFacts",
    "OverlapPlan",
    "OverlapRefusedError",
    "PipelineOverlapCfg",
    "PresetShape",
    "RingExchangeOverlapCfg",
    "TEStatus",
    "TransformerLayerTPOverlapCfg",
    "apply_plan",
    "facts_from_configs",
    "find_userbuffers_preset",
    "plan_comm_overlap",
    "probe_transformer_engine",
    "tp_overlap_buffer_rows",
    "userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096",
    "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192",
    "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048",
    "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192",
    "userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096",
    "userbuffers_bf16_h100_h6144_tp2_mbs2_seqlen2048",
    "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192",
    "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048",
    "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192",
    "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192",
    "userbuffers_fp8_b200_h12288_tp4_mbs1_seqlen2048",
    "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192",
    "userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096",
    "userbuffers_fp8_h100_h6144_tp2_mbs2_seqlen2048",
    "userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora",
    "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192",
    "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048",
    "userbuffers_fp8_h100_h16384_tp4_mbs1_seqlen2048_lora",
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192",
]

logger = logging.getLogger(__name__)

#: DDP bucket size used when data-parallel overlap is on: 128 Mi *parameters* (elements), not bytes.
DEFAULT_BUCKET_SIZE = 128 * 1024 * 1024

BootstrapBackend = Literal["nccl", "mpi", "gloo"]
Source = Literal["default", "derived", "user", "refused"]
Area = Literal["tp", "pp", "dp", "ep", "wgrad"]
EPDispatcher = Literal["alltoall", "flex"]

#: The order knobs appear in a plan, with the area each belongs to.
KNOB_AREAS: Mapping[str, Area] = {
    "tp_comm_overlap": "tp",
    "tp_comm_overlap_cfg": "tp",
    "tp_comm_bootstrap_backend": "tp",
    "overlap_p2p_comm": "pp",
    "batch_p2p_comm": "pp",
    "overlap_grad_reduce": "dp",
    "overlap_param_gather": "dp",
    "align_param_gather": "dp",
    "bucket_size": "dp",
    "overlap_param_gather_with_optimizer_step": "dp",
    "overlap_moe_expert_parallel_comm": "ep",
    "delay_wgrad_compute": "ep",
    "defer_embedding_wgrad_compute": "wgrad",
    "wgrad_deferral_limit": "wgrad",
}

# DP knobs a user may also have written straight onto megatron-core's DDP / optimizer config
# (the seed recipe does). megatron-core's defaults for them are False / None, so any other value
# found there before our first setup is the user's intent.
_DDP_INTENT_KNOBS = (
    "overlap_grad_reduce",
    "overlap_param_gather",
    "align_param_gather",
    "bucket_size",
)


class OverlapRefusedError(ValueError):
    """A requested overlap cannot run with this layout and ``strict=True`` forbids falling back."""


# ---------------------------------------------------------------------------------------------
# Transformer Engine availability
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TEStatus:
    """Whether ``transformer_engine.pytorch`` imports here, its version, and why not if it does not."""

    available: bool
    """True when ``import transformer_engine.pytorch`` succeeded."""
    version: str | None
    """Installed Transformer Engine version, when known."""
    reason: str
    """Why TE is unavailable (empty when available)."""


_TE_STATUS: TEStatus | None = None


@functools.cache
def _te_version() -> str | None:
    # Reading distribution metadata scans sys.path (and importing importlib.metadata costs tens of
    # milliseconds), so this runs lazily and once per process.
    import importlib.metadata

    for dist in ("transformer-engine", "transformer_engine", "transformer-engine-torch"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def probe_transformer_engine(*, refresh: bool = False) -> TEStatus:
    """Try ``import transformer_engine.pytorch`` once and remember the outcome.

    A CPU-only machine with TE installed raises ``RuntimeError`` (no CUDA) rather than
    ``ImportError``; both mean "not available here", and the message is kept as the reason.
    """
    global _TE_STATUS
    if _TE_STATUS is None or refresh:
        try:
            importlib.import_module("transformer_engine.pytorch")
        except ImportError as exc:
            _TE_STATUS = TEStatus(
                False,
                None,
                f"transformer_engine.pytorch is not importable ({exc}); install the 'te' extra "
                "(pip install 'megatron-bridge-overlap[te]') on a CUDA machine",
            )
        except Exception as exc:  # TE raises RuntimeError/OSError when CUDA or its libs are missing
            _TE_STATUS = TEStatus(
                False,
                _te_version(),
                f"transformer_engine.pytorch is installed but failed to import "
                f"({type(exc).__name__}: {exc})",
            )
        else:
            _TE_STATUS = TEStatus(True, _te_version(), "")
    return _TE_STATUS


def __getattr__(name: str) -> Any:
    # HAVE_TE is computed on first access so that importing this module never imports TE.
    # Tests patch it with unittest.mock.patch(..., "HAVE_TE", value), which sets a real global.
    if name == "HAVE_TE":
        return probe_transformer_engine().available
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def current_te_status() -> TEStatus:
    """TE status as this module sees it: a patched ``HAVE_TE`` global wins over the real probe."""
    patched = globals().get("HAVE_TE")
    if patched is None:
        return probe_transformer_engine()
    if patched:
        return TEStatus(True, _te_version(), "")
    return TEStatus(False, None, "Transformer Engine is not available (HAVE_TE is False)")


# ---------------------------------------------------------------------------------------------
# The user's request
# ---------------------------------------------------------------------------------------------


def _check_optional_bool(name: str, value: object) -> None:
    if value is not None and type(value) is not bool:
        raise TypeError(
            f"CommOverlapConfig.{name} must be True, False or None (let the rules decide), "
            f"got {value!r} ({type(value).__name__})."
        )


def _check_positive_int(name: str, value: object, *, minimum: int = 1) -> None:
    # bool is a subclass of int; bucket_size=True is a typo, not "one parameter".
    if type(value) is not int:
        raise TypeError(
            f"CommOverlapConfig.{name} must be an int, got {value!r} ({type(value).__name__})."
        )
    if value < minimum:
        raise ValueError(f"CommOverlapConfig.{name} must be >= {minimum}, got {value}.")


@dataclass(kw_only=True)
class CommOverlapConfig:
    """What the recipe author asks for. ``None`` means "let the rules decide".

    The fields stay exactly as the user wrote them; :meth:`setup` resolves them against the
    model's layout into an :class:`OverlapPlan` (see :attr:`resolved_plan`) and writes that into
    megatron-core's configs.
    """

    tp_comm_overlap: bool
    """Ask for Transformer Engine userbuffer overlap of TP collectives with GEMMs."""
    tp_comm_overlap_cfg: TransformerLayerTPOverlapCfg | None = None
    """Per-GEMM userbuffer preset; None uses Transformer Engine's defaults."""
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
    strict: bool = False
    """Raise OverlapRefusedError instead of warning when a requested overlap cannot run or a
    setting looks like a mistake (e.g. a preset tuned for another shape)."""

    # Not a dataclass field (no annotation): the resolved plan is not something the user wrote,
    # so dataclasses.asdict/replace/== see only the request.
    _resolved_plan = None

    def finalize(self) -> None:
        """Check the types and ranges of what the user wrote. Changes nothing; safe to call twice."""
        if type(self.tp_comm_overlap) is not bool:
            raise TypeError(
                "CommOverlapConfig.tp_comm_overlap must be True or False, got "
                f"{self.tp_comm_overlap!r} ({type(self.tp_comm_overlap).__name__})."
            )
        if type(self.strict) is not bool:
            raise TypeError(f"CommOverlapConfig.strict must be True or False, got {self.strict!r}.")
        for name in (
            "overlap_p2p_comm",
            "batch_p2p_comm",
            "overlap_grad_reduce",
            "overlap_param_gather",
            "overlap_param_gather_with_optimizer_step",
            "align_param_gather",
            "defer_embedding_wgrad_compute",
            "overlap_moe_expert_parallel_comm",
            "delay_wgrad_compute",
        ):
            _check_optional_bool(name, getattr(self, name))
        preset = self.tp_comm_overlap_cfg
        if preset is not None and not isinstance(preset, TransformerLayerTPOverlapCfg):
            hint = (
                " A preset name is not accepted: import the preset object, e.g. "
                "`from megatron.bridge.training.comm_overlap import "
                "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048`."
                if isinstance(preset, str)
                else ""
            )
            raise TypeError(
                "CommOverlapConfig.tp_comm_overlap_cfg must be a TransformerLayerTPOverlapCfg "
                f"(one of the published userbuffers_* presets or your own) or None, got "
                f"{type(preset).__name__}.{hint}"
            )
        if self.tp_comm_bootstrap_backend not in get_args(BootstrapBackend):
            raise ValueError(
                "CommOverlapConfig.tp_comm_bootstrap_backend must be one of "
                f"{list(get_args(BootstrapBackend))}, got {self.tp_comm_bootstrap_backend!r}."
            )
        if self.bucket_size is not None:
            _check_positive_int("bucket_size", self.bucket_size)
        if self.data_parallel_size is not None:
            _check_positive_int("data_parallel_size", self.data_parallel_size)
        if self.wgrad_deferral_limit is not None:
            _check_positive_int("wgrad_deferral_limit", self.wgrad_deferral_limit, minimum=-1)

    def setup(
        self,
        model_config: Any,
        optimizer_config: Any,
        ddp_config: Any,
        *,
        data_parallel_size: int | None = None,
        micro_batch_size: int | None = None,
    ) -> OverlapPlan:
        """Resolve against megatron-core configs and write the result into them, field by field.

        ``data_parallel_size`` comes from the world size (``runtime_config_update`` passes it);
        the ``data_parallel_size`` field, when the user set it, must agree. ``micro_batch_size``
        enables the TP-overlap token-divisibility check. Returns the plan, also kept as
        :attr:`resolved_plan`. Calling it again with the same configs gives the same result.
        """
        self.finalize()
        dp = self._data_parallel_size(data_parallel_size)
        facts = facts_from_configs(
            model_config,
            optimizer_config,
            ddp_config,
            data_parallel_size=dp,
            micro_batch_size=micro_batch_size,
        )
        plan = _resolve(self, facts)
        for message in plan.warnings:
            logger.warning("comm overlap: %s", message)
        for message in plan.notes:
            logger.info("comm overlap: %s", message)
        apply_plan(plan, model_config, optimizer_config, ddp_config)
        self._resolved_plan = plan
        return plan

    @property
    def resolved_plan(self) -> OverlapPlan | None:
        """The plan of the last :meth:`setup` call, or None before the first."""
        return self._resolved_plan

    def _data_parallel_size(self, given: int | None) -> int:
        if given is not None and (type(given) is not int or given < 1):
            raise ValueError(
                f"data_parallel_size passed to setup must be an int >= 1, got {given!r}."
            )
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


# ---------------------------------------------------------------------------------------------
# Plain inputs and the plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LayoutFacts:
    """Everything the overlap decision depends on, as plain values."""

    tp_size: int = 1
    """Tensor-parallel size."""
    pp_size: int = 1
    """Pipeline-parallel size."""
    vpp_size: int | None = None
    """Virtual pipeline (interleaving) size; None for a non-interleaved pipeline."""
    cp_size: int = 1
    """Context-parallel size."""
    ep_size: int = 1
    """Expert-parallel size."""
    dp_size: int = 1
    """Data-parallel size."""
    sequence_parallel: bool = False
    """Whether sequence parallelism is on."""
    te_available: bool = True
    """Whether Transformer Engine is importable where the job runs."""
    te_reason: str = ""
    """Why Transformer Engine is not available (empty when it is)."""
    te_version: str | None = None
    """Transformer Engine version, when known."""
    use_distributed_optimizer: bool = False
    """Whether the distributed optimizer shards optimizer state across DP ranks."""
    megatron_ddp: bool = True
    """Whether DDP is megatron-core's DistributedDataParallel (DP knobs are written only then)."""
    hidden_size: int | None = None
    """Model hidden size (for the preset shape check)."""
    seq_length: int | None = None
    """Training sequence length (for the TP token-divisibility check)."""
    micro_batch_size: int | None = None
    """Micro-batch size (for the TP token-divisibility check)."""
    bf16: bool = False
    """bf16 training."""
    fp16: bool = False
    """fp16 training."""
    fp8: bool = False
    """FP8 compute."""
    num_moe_experts: int | None = None
    """Number of MoE experts (None: dense model)."""
    moe_token_dispatcher_type: str | None = None
    """MoE token dispatcher."""
    moe_shared_expert_overlap: bool = False
    """Whether the shared expert's compute overlaps the dispatcher."""
    recompute_granularity: str | None = None
    """Activation recompute granularity."""
    recompute_method: str | None = None
    """Activation recompute method."""
    recompute_num_layers: int | None = None
    """Layers recomputed per stage."""
    recompute_modules: tuple[str, ...] = ()
    """Modules recomputed under selective recompute."""
    mtp_num_layers: int | None = None
    """Multi-token-prediction layers."""
    gradient_accumulation_fusion: bool = False
    """Whether wgrad GEMMs accumulate into main_grad directly."""
    ddp_intent: tuple[tuple[str, Any], ...] = ()
    """DP knobs found already set on the DDP/optimizer config by the user, as (knob, value)."""

    @property
    def interleaved(self) -> bool:
        """True for an interleaved (virtual) pipeline: PP > 1 and VPP > 1."""
        return self.pp_size > 1 and self.vpp_size is not None and self.vpp_size > 1


class Decision(NamedTuple):
    """One knob's resolved value, where it came from and why."""

    knob: str
    """Knob name (the megatron-core field it is written to has the same name)."""
    value: Any
    """Resolved value."""
    source: Source
    """default, derived (from the layout), user (set by the user) or refused (request turned down)."""
    reason: str
    """One line saying why."""

    @property
    def area(self) -> Area:
        """tp, pp, dp, ep or wgrad."""
        return KNOB_AREAS[self.knob]


@dataclass(frozen=True)
class OverlapPlan:
    """The resolved overlap settings of one layout, each with its reason.

    ``preset_names`` are the published names of the userbuffers preset in use (empty for a custom
    preset or TE defaults). ``warnings`` are refusals and likely mistakes, each with its fix;
    ``notes`` are informational.
    """

    facts: LayoutFacts
    decisions: tuple[Decision, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    preset_names: tuple[str, ...] = ()

    def decision(self, knob: str) -> Decision:
        """The decision for ``knob``; ``KeyError`` naming the known knobs otherwise."""
        for d in self.decisions:
            if d.knob == knob:
                return d
        raise KeyError(f"No decision for {knob!r}; knobs are {[d.knob for d in self.decisions]}.")

    def value(self, knob: str) -> Any:
        """The resolved value of ``knob``."""
        return self.decision(knob).value

    @property
    def refused(self) -> tuple[Decision, ...]:
        """Requests the layout turned down."""
        return tuple(d for d in self.decisions if d.source == "refused")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with stable keys: facts, decisions, preset_names, warnings, notes."""
        facts = dataclasses.asdict(self.facts)
        facts["recompute_modules"] = list(self.facts.recompute_modules)
        facts["ddp_intent"] = [list(pair) for pair in self.facts.ddp_intent]
        return {
            "facts": facts,
            "decisions": [
                {
                    "knob": d.knob,
                    "area": d.area,
                    "value": d.value,
                    "source": d.source,
                    "reason": d.reason,
                }
                for d in self.decisions
            ],
            "preset_names": list(self.preset_names),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OverlapPlan:
        """Rebuild a plan from :meth:`to_dict` output."""
        facts = dict(data["facts"])
        facts["recompute_modules"] = tuple(facts["recompute_modules"])
        facts["ddp_intent"] = tuple(tuple(pair) for pair in facts["ddp_intent"])
        return cls(
            facts=LayoutFacts(**facts),
            decisions=tuple(
                Decision(d["knob"], d["value"], d["source"], d["reason"]) for d in data["decisions"]
            ),
            warnings=tuple(data["warnings"]),
            notes=tuple(data["notes"]),
            preset_names=tuple(data["preset_names"]),
        )

    def render(self) -> str:
        """The plan as aligned text, one line per knob, grouped by area, warnings last."""
        titles = {
            "tp": "Tensor parallel (TE userbuffers)",
            "pp": "Pipeline parallel",
            "dp": "Data parallel",
            "ep": "Expert parallel",
            "wgrad": "Embedding wgrad deferral",
        }
        lines: list[str] = []
        width = max(len(d.knob) for d in self.decisions)
        for area, title in titles.items():
            rows = [d for d in self.decisions if d.area == area]
            lines.append(f"{title}:")
            for d in rows:
                shown = _short_value(d.knob, d.value, self.preset_names)
                lines.append(f"  {d.knob:<{width}}  {shown:<14} [{d.source}] {d.reason}")
        for note in self.notes:
            lines.append(f"note: {note}")
        for warning in self.warnings:
            lines.append(f"WARNING: {warning}")
        return "\n".join(lines)


def _short_value(knob: str, value: Any, preset_names: tuple[str, ...]) -> str:
    if knob == "tp_comm_overlap_cfg" and value is not None:
        return f"{len(value)} GEMMs" if not preset_names else "preset"
    if knob == "bucket_size" and isinstance(value, int):
        return f"{value // (1024 * 1024)}Mi params" if value % (1024 * 1024) == 0 else str(value)
    return str(value)


# ---------------------------------------------------------------------------------------------
# Resolution rules
# ---------------------------------------------------------------------------------------------


class _Planner:
    """Collects decisions, warnings and notes while the rules run."""

    def __init__(self, user: CommOverlapConfig, facts: LayoutFacts) -> None:
        self.user = user
        self.facts = facts
        self.decisions: dict[str, Decision] = {}
        self.warnings: list[str] = []
        # Cautions about a setting the user chose knowingly: shown with the warnings, but strict
        # mode does not turn them into errors (that would forbid the setting outright).
        self.cautions: list[str] = []
        self.notes: list[str] = []
        self.preset_names: tuple[str, ...] = ()

    def set(self, knob: str, value: Any, source: Source, reason: str) -> None:
        self.decisions[knob] = Decision(knob, value, source, reason)

    def value(self, knob: str) -> Any:
        return self.decisions[knob].value

    def user_value(self, knob: str) -> tuple[Any, str]:
        """The user's setting of ``knob`` and where it was made, or (None, "")."""
        mine = getattr(self.user, knob)
        theirs = dict(self.facts.ddp_intent).get(knob)
        if mine is not None and theirs is not None and mine != theirs:
            raise ValueError(
                f"{knob} is {mine!r} in CommOverlapConfig but {theirs!r} on the DDP config "
                f"(cfg.ddp.{knob}): choose one, preferably in CommOverlapConfig."
            )
        if mine is not None:
            return mine, "set in CommOverlapConfig"
        if theirs is not None:
            return theirs, f"set on cfg.ddp.{knob}"
        return None, ""

    def plan(self) -> OverlapPlan:
        self._tp()
        self._pp()
        self._dp()
        self._ep()
        self._wgrad_deferral()
        ordered = tuple(self.decisions[k] for k in KNOB_AREAS)
        return OverlapPlan(
            facts=self.facts,
            decisions=ordered,
            warnings=tuple(self.warnings + self.cautions),
            notes=tuple(self.notes),
            preset_names=self.preset_names,
        )

    # --- TP -----------------------------------------------------------------------------------

    def _tp(self) -> None:
        f, user = self.facts, self.user
        preset = user.tp_comm_overlap_cfg
        backend = user.tp_comm_bootstrap_backend
        backend_source: Source = "default" if backend == "nccl" else "user"
        if not user.tp_comm_overlap:
            self.set("tp_comm_overlap", False, "user", "tp_comm_overlap=False in CommOverlapConfig")
            self.set("tp_comm_overlap_cfg", None, "default", "TP overlap is off")
            self.set(
                "tp_comm_bootstrap_backend", backend, backend_source, "unused: TP overlap is off"
            )
            if preset is not None:
                self.warnings.append(
                    "tp_comm_overlap_cfg is set but tp_comm_overlap=False, so the preset is "
                    "ignored; set tp_comm_overlap=True to use it or drop the preset."
                )
            return

        failed: list[str] = []
        if f.tp_size < 2:
            failed.append(
                f"tensor_model_parallel_size is {f.tp_size}; TP overlap needs >= 2 "
                "(raise tensor_model_parallel_size or set tp_comm_overlap=False)"
            )
        if not f.sequence_parallel:
            failed.append(
                "sequence_parallel is False; TE userbuffers overlap the sequence-parallel "
                "all-gather/reduce-scatter (set cfg.model.sequence_parallel=True)"
            )
        if not f.te_available:
            failed.append(
                "Transformer Engine is not available: "
                + (f.te_reason or "not importable (install the 'te' extra where the job runs)")
            )
        if failed:
            reason = "requested but refused: " + "; ".join(failed)
            self.set("tp_comm_overlap", False, "refused", reason)
            self.set("tp_comm_overlap_cfg", None, "default", "TP overlap is off")
            self.set(
                "tp_comm_bootstrap_backend", backend, backend_source, "unused: TP overlap is off"
            )
            self.warnings.append(f"TP comm overlap turned OFF: {'; '.join(failed)}.")
            return

        self._check_tp_token_divisibility()
        self.set(
            "tp_comm_overlap",
            True,
            "user",
            f"requested, and TP={f.tp_size} >= 2, sequence parallel on, Transformer Engine available",
        )
        if preset is None:
            self.set(
                "tp_comm_overlap_cfg", None, "default", "no preset: Transformer Engine's defaults"
            )
            self.notes.append(
                "TP overlap uses Transformer Engine's default userbuffer settings (no "
                "tp_comm_overlap_cfg preset given); a published preset for your shape is often faster."
            )
        else:
            self.preset_names = preset_names_of(preset)
            label = ", ".join(self.preset_names) if self.preset_names else "a custom preset"
            self.set("tp_comm_overlap_cfg", preset.to_ub_cfgs(), "user", f"from {label}")
            self._check_preset_shape(preset)
        self.set(
            "tp_comm_bootstrap_backend",
            backend,
            backend_source,
            "bootstraps the userbuffers communicator" + (" (default)" if backend == "nccl" else ""),
        )

    def _check_tp_token_divisibility(self) -> None:
        f = self.facts
        if f.seq_length is None or f.micro_batch_size is None:
            missing = [
                n
                for n, v in (("seq_length", f.seq_length), ("micro_batch_size", f.micro_batch_size))
                if v is None
            ]
            self.notes.append(
                f"TP overlap token-divisibility check skipped: {' and '.join(missing)} unknown here."
            )
            return
        tp_overlap_buffer_rows(
            seq_length=f.seq_length,
            micro_batch_size=f.micro_batch_size,
            cp_size=f.cp_size,
            tp_size=f.tp_size,
        )

    def _check_preset_shape(self, preset: TransformerLayerTPOverlapCfg) -> None:
        f = self.facts
        shapes = preset_shapes_of(preset)
        if not shapes:
            return
        if any(
            (f.hidden_size is None or s.hidden_size == f.hidden_size) and s.tp_size == f.tp_size
            for s in shapes
        ):
            return
        published = ", ".join(f"hidden {s.hidden_size} TP{s.tp_size}" for s in shapes)
        self.warnings.append(
            f"tp_comm_overlap_cfg {', '.join(preset_names_of(preset))} was tuned for {published}, "
            f"but the model has hidden {f.hidden_size} TP{f.tp_size}: almost always a mistake. Use "
            "find_userbuffers_preset(...) for your shape, or tp_comm_overlap_cfg=None for TE defaults."
        )

    # --- PP -----------------------------------------------------------------------------------

    def _pp(self) -> None:
        f, user = self.facts, self.user
        overlap, batch = user.overlap_p2p_comm, user.batch_p2p_comm
        if overlap and batch:
            raise ValueError(
                "overlap_p2p_comm=True and batch_p2p_comm=True are mutually exclusive at run time: "
                "choose one (overlap_p2p_comm for an interleaved pipeline)."
            )
        if overlap and not f.interleaved:
            raise ValueError(
                f"overlap_p2p_comm=True needs an interleaved pipeline (PP > 1 and VPP > 1), got "
                f"PP={f.pp_size} VPP={f.vpp_size}: megatron-core's non-interleaved schedule rejects "
                "it. Set virtual_pipeline_model_parallel_size or drop overlap_p2p_comm."
            )
        if f.interleaved:
            layout = f"interleaved pipeline (PP={f.pp_size}, VPP={f.vpp_size})"
            d_overlap, d_batch = True, False
        elif f.pp_size > 1:
            layout = f"PP={f.pp_size} without VPP: p2p overlap needs an interleaved pipeline"
            d_overlap, d_batch = False, True
        else:
            layout = "no pipeline parallelism"
            d_overlap, d_batch = False, False

        if overlap is not None:
            self.set("overlap_p2p_comm", overlap, "user", "set in CommOverlapConfig")
        elif batch:
            self.set(
                "overlap_p2p_comm",
                False,
                "derived",
                "batch_p2p_comm=True was set; the two are exclusive",
            )
        else:
            self.set("overlap_p2p_comm", d_overlap, "derived", layout)

        if batch is not None:
            self.set("batch_p2p_comm", batch, "user", "set in CommOverlapConfig")
        elif self.value("overlap_p2p_comm"):
            self.set("batch_p2p_comm", False, "derived", "exclusive with overlap_p2p_comm")
        else:
            value = f.pp_size > 1
            self.set(
                "batch_p2p_comm",
                value,
                "derived",
                layout if value == d_batch else "PP > 1 without p2p overlap",
            )
        if f.pp_size == 1 and (overlap or batch):
            self.notes.append("p2p settings have no effect without pipeline parallelism (PP=1).")

    # --- DP -----------------------------------------------------------------------------------

    def _dp(self) -> None:
        f = self.facts
        dist_opt = f.use_distributed_optimizer
        many = f.dp_size > 1
        why_dp = f"DP={f.dp_size}"

        grad, where = self.user_value("overlap_grad_reduce")
        if grad is not None:
            self.set("overlap_grad_reduce", grad, "user", where)
        elif many:
            self.set(
                "overlap_grad_reduce",
                True,
                "derived",
                f"{why_dp} > 1: hide the gradient reduction under backward",
            )
        else:
            self.set(
                "overlap_grad_reduce",
                False,
                "derived",
                f"{why_dp}: nothing to reduce across replicas",
            )
        grad = self.value("overlap_grad_reduce")

        gather, where = self.user_value("overlap_param_gather")
        if gather:
            if not dist_opt:
                raise ValueError(
                    "overlap_param_gather=True needs the distributed optimizer (it overlaps the "
                    "all-gather of sharded parameters): set cfg.ddp.use_distributed_optimizer=True "
                    "and cfg.optimizer.use_distributed_optimizer=True, or drop overlap_param_gather."
                )
            if not grad:
                raise ValueError(
                    "overlap_param_gather=True needs overlap_grad_reduce=True (megatron-core "
                    "overlaps the param all-gather only together with the grad reduce-scatter)."
                )
        if gather is not None:
            self.set("overlap_param_gather", gather, "user", where)
        elif not many:
            self.set("overlap_param_gather", False, "derived", f"{why_dp}: nothing to gather")
        elif not dist_opt:
            self.set(
                "overlap_param_gather",
                False,
                "derived",
                "needs the distributed optimizer (off): only the gradient all-reduce is overlapped",
            )
        elif not grad:
            self.set(
                "overlap_param_gather", False, "derived", "needs overlap_grad_reduce, which is off"
            )
        else:
            self.set(
                "overlap_param_gather",
                True,
                "derived",
                f"{why_dp} > 1 with the distributed optimizer",
            )
        gather = self.value("overlap_param_gather")

        align, where = self.user_value("align_param_gather")
        if align and not f.interleaved:
            raise ValueError(
                f"align_param_gather=True only applies to an interleaved pipeline (PP > 1 and VPP > "
                f"1), got PP={f.pp_size} VPP={f.vpp_size}; drop it or set "
                "virtual_pipeline_model_parallel_size."
            )
        if align is not None:
            self.set("align_param_gather", align, "user", where)
        elif gather and f.interleaved:
            self.set(
                "align_param_gather",
                True,
                "derived",
                "param-gather overlap with an interleaved pipeline",
            )
        else:
            self.set(
                "align_param_gather",
                False,
                "derived",
                "no param-gather overlap" if not gather else "pipeline is not interleaved",
            )

        size, where = self.user_value("bucket_size")
        if size is not None:
            if type(size) is not int or size < 1:
                raise TypeError(
                    f"bucket_size must be a positive int (parameters), got {size!r} ({where})."
                )
            self.set("bucket_size", size, "user", f"{where} (parameters, not bytes)")
        elif many:
            self.set(
                "bucket_size",
                DEFAULT_BUCKET_SIZE,
                "derived",
                f"{why_dp} > 1: 128 Mi parameters per bucket",
            )
        else:
            self.set("bucket_size", None, "derived", f"{why_dp}: megatron-core's default bucketing")

        step = self.user.overlap_param_gather_with_optimizer_step
        if step:
            missing = [
                text
                for ok, text in (
                    (dist_opt, "the distributed optimizer"),
                    (gather, "overlap_param_gather=True"),
                    (f.interleaved, "an interleaved pipeline (PP > 1 and VPP > 1)"),
                )
                if not ok
            ]
            if missing:
                raise ValueError(
                    "overlap_param_gather_with_optimizer_step=True needs "
                    + ", ".join(missing)
                    + "."
                )
            self.set(
                "overlap_param_gather_with_optimizer_step", True, "user", "set in CommOverlapConfig"
            )
            self.cautions.append(
                "overlap_param_gather_with_optimizer_step=True is known to break checkpointing; "
                "check that checkpoints load before relying on it."
            )
        elif step is False:
            self.set(
                "overlap_param_gather_with_optimizer_step",
                False,
                "user",
                "set in CommOverlapConfig",
            )
        else:
            self.set(
                "overlap_param_gather_with_optimizer_step",
                False,
                "default",
                "off by default: it breaks checkpointing",
            )

        if not f.megatron_ddp:
            self.notes.append(
                "DDP is not megatron-core's DistributedDataParallelConfig: the DP decisions above "
                "are not written there; configure that implementation's overlap yourself."
            )
        if not many and any(
            self.decisions[k].source == "user" and self.value(k)
            for k in ("overlap_grad_reduce", "overlap_param_gather")
        ):
            self.notes.append(f"DP overlap was requested but has no effect with {why_dp}.")

    # --- EP -----------------------------------------------------------------------------------

    def _ep(self) -> None:
        f, user = self.facts, self.user
        ep = user.overlap_moe_expert_parallel_comm
        if ep:
            failed = [
                text
                for bad, text in (
                    (f.ep_size <= 1, f"expert_model_parallel_size > 1 (got {f.ep_size})"),
                    (
                        not f.num_moe_experts or f.num_moe_experts <= 1,
                        f"more than one expert (num_moe_experts={f.num_moe_experts})",
                    ),
                    (
                        f.moe_token_dispatcher_type not in get_args(EPDispatcher),
                        f"moe_token_dispatcher_type alltoall or flex (got {f.moe_token_dispatcher_type!r})",
                    ),
                    (not (f.bf16 or f.fp16), "bf16 or fp16 training"),
                    (
                        f.pp_size > 1 and f.vpp_size is None,
                        "virtual_pipeline_model_parallel_size set when PP > 1",
                    ),
                    (
                        f.recompute_granularity == "full",
                        "no full activation recompute (recompute_granularity='full')",
                    ),
                    (
                        f.recompute_method is not None,
                        f"recompute_method=None (got {f.recompute_method!r})",
                    ),
                    (
                        f.recompute_num_layers is not None,
                        f"recompute_num_layers=None (got {f.recompute_num_layers})",
                    ),
                    ("moe" in f.recompute_modules, "'moe' not in recompute_modules"),
                    (f.moe_shared_expert_overlap, "moe_shared_expert_overlap=False"),
                    (
                        f.mtp_num_layers not in (None, 0, 1),
                        f"mtp_num_layers None, 0 or 1 (got {f.mtp_num_layers})",
                    ),
                )
                if bad
            ]
            if failed:
                raise ValueError(
                    "overlap_moe_expert_parallel_comm=True needs: " + "; ".join(failed) + ". Fix "
                    "these or set overlap_moe_expert_parallel_comm=False."
                )
            self.set(
                "overlap_moe_expert_parallel_comm",
                True,
                "user",
                f"set in CommOverlapConfig; EP={f.ep_size}, {f.num_moe_experts} experts",
            )
        elif ep is False:
            self.set("overlap_moe_expert_parallel_comm", False, "user", "set in CommOverlapConfig")
        else:
            self.set("overlap_moe_expert_parallel_comm", False, "default", "off unless requested")

        delay = user.delay_wgrad_compute
        if delay:
            if not self.value("overlap_moe_expert_parallel_comm"):
                raise ValueError(
                    "delay_wgrad_compute=True needs overlap_moe_expert_parallel_comm=True."
                )
            needs_recent_te = self.value("overlap_grad_reduce") or f.gradient_accumulation_fusion
            te_version = f.te_version if f.te_available else None
            if needs_recent_te and not _version_at_least(te_version, (2, 7)):
                raise ValueError(
                    "delay_wgrad_compute=True with overlap_grad_reduce or "
                    f"gradient_accumulation_fusion needs Transformer Engine >= 2.7 (found "
                    f"{te_version or 'none'})."
                )
            self.set("delay_wgrad_compute", True, "user", "set in CommOverlapConfig")
        elif delay is False:
            self.set("delay_wgrad_compute", False, "user", "set in CommOverlapConfig")
        else:
            self.set("delay_wgrad_compute", False, "default", "off unless requested")

    # --- embedding wgrad deferral ----------------------------------------------------------------

    def _wgrad_deferral(self) -> None:
        f, user = self.facts, self.user
        defer, limit = user.defer_embedding_wgrad_compute, user.wgrad_deferral_limit
        if defer:
            if f.pp_size == 1:
                raise ValueError(
                    "defer_embedding_wgrad_compute=True needs pipeline parallelism (it hides the "
                    "embedding wgrad in the pipeline flush); drop it or set PP > 1."
                )
            if not f.gradient_accumulation_fusion:
                raise ValueError(
                    "defer_embedding_wgrad_compute=True needs gradient_accumulation_fusion=True on the model config."
                )
            if limit is not None and limit < 0:
                raise ValueError(
                    "wgrad_deferral_limit must be >= 0 when defer_embedding_wgrad_compute=True "
                    "(0 defers every micro-batch)."
                )
            self.set("defer_embedding_wgrad_compute", True, "user", "set in CommOverlapConfig")
            if limit is None:
                self.set(
                    "wgrad_deferral_limit", 0, "derived", "deferral on: 0 defers every micro-batch"
                )
            else:
                self.set("wgrad_deferral_limit", limit, "user", "set in CommOverlapConfig")
            return
        self.set(
            "defer_embedding_wgrad_compute",
            False,
            "user" if defer is False else "default",
            "set in CommOverlapConfig" if defer is False else "off unless requested",
        )
        if limit is not None and limit != -1:
            self.warnings.append(
                f"wgrad_deferral_limit={limit} has no effect without defer_embedding_wgrad_compute=True."
            )
        self.set(
            "wgrad_deferral_limit",
            -1 if limit is None else limit,
            "default" if limit is None else "user",
            "deferral is off",
        )


def tp_overlap_buffer_rows(
    *, seq_length: int, micro_batch_size: int, cp_size: int, tp_size: int
) -> int:
    """Rows of TE's TP-overlap userbuffers: ``(seq_length * micro_batch_size) // cp_size``.

    TE splits those rows evenly across the TP ranks, so they must divide by CP and then by TP;
    otherwise ``ValueError`` naming the sizes and the fix.
    """
    tokens = seq_length * micro_batch_size
    if tokens % cp_size:
        raise ValueError(
            f"tp_comm_overlap needs seq_length * micro_batch_size = {seq_length} * "
            f"{micro_batch_size} = {tokens}, which is not divisible by context_parallel_size="
            f"{cp_size}; change seq_length or micro_batch_size, or set tp_comm_overlap=False."
        )
    rows = tokens // cp_size
    if rows % tp_size:
        raise ValueError(
            f"tp_comm_overlap needs (seq_length * micro_batch_size) / context_parallel_size = "
            f"{rows} divisible by tensor_model_parallel_size={tp_size}; change seq_length or "
            "micro_batch_size, or set tp_comm_overlap=False."
        )
    return rows


def _version_at_least(version: str | None, minimum: tuple[int, int]) -> bool:
    if not version:
        return False
    parts: list[int] = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= minimum


def plan_comm_overlap(user: CommOverlapConfig, facts: LayoutFacts) -> OverlapPlan:
    """Resolve ``user``'s request against ``facts``: the pure core of the rules.

    Raises ``TypeError``/``ValueError`` for bad or contradictory input and
    :class:`OverlapRefusedError` when ``user.strict`` and a requested overlap was refused or a
    likely mistake was found (cautions about a setting the user chose, such as
    ``overlap_param_gather_with_optimizer_step``, stay warnings).
    """
    user.finalize()
    return _resolve(user, facts)


def _resolve(user: CommOverlapConfig, facts: LayoutFacts) -> OverlapPlan:
    """:func:`plan_comm_overlap` for a request that already passed ``finalize()``."""
    _check_facts(facts)
    planner = _Planner(user, facts)
    plan = planner.plan()
    if user.strict and planner.warnings:
        raise OverlapRefusedError(
            "strict comm overlap: "
            + " | ".join(planner.warnings)
            + " (strict=True turns these into errors)"
        )
    return plan


def _check_facts(facts: LayoutFacts) -> None:
    for name in ("tp_size", "pp_size", "cp_size", "ep_size", "dp_size"):
        value = getattr(facts, name)
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}.")
    if facts.vpp_size is not None and (type(facts.vpp_size) is not int or facts.vpp_size < 1):
        raise ValueError(
            f"virtual_pipeline_model_parallel_size must be None or an int >= 1, got {facts.vpp_size!r}."
        )


# ---------------------------------------------------------------------------------------------
# megatron-core configs in and out
# ---------------------------------------------------------------------------------------------

# Name of the private attribute where setup records the DP values it wrote onto a DDP config, so
# a second setup does not mistake them for the user's own settings.
_WRITTEN_ATTR = "_bridge_comm_overlap_written"


def _is_megatron_ddp_config(ddp_config: Any) -> bool:
    if ddp_config is None:
        return False
    from megatron.core.distributed.distributed_data_parallel_config import (
        DistributedDataParallelConfig,
    )

    return isinstance(ddp_config, DistributedDataParallelConfig)


def facts_from_configs(
    model_config: Any,
    optimizer_config: Any,
    ddp_config: Any,
    *,
    data_parallel_size: int,
    micro_batch_size: int | None = None,
    te_status: TEStatus | None = None,
) -> LayoutFacts:
    """Read the layout facts from megatron-core's configs (model, optimizer, DDP)."""
    te = te_status or current_te_status()
    megatron_ddp = _is_megatron_ddp_config(ddp_config)
    dist_opt = bool(ddp_config.use_distributed_optimizer) if megatron_ddp else False
    if optimizer_config is not None:
        opt_dist = bool(optimizer_config.use_distributed_optimizer)
        if megatron_ddp and opt_dist != dist_opt:
            raise ValueError(
                f"use_distributed_optimizer is {dist_opt} on the DDP config but {opt_dist} on the "
                "optimizer config: set both cfg.ddp.use_distributed_optimizer and "
                "cfg.optimizer.use_distributed_optimizer to the same value."
            )
        dist_opt = dist_opt or opt_dist

    intent: list[tuple[str, Any]] = []
    if megatron_ddp:
        written, first_intent = getattr(ddp_config, _WRITTEN_ATTR, ({}, {}))
        for knob in _DDP_INTENT_KNOBS:
            value = getattr(ddp_config, knob)
            if knob in written and written[knob] == value:
                # Our own earlier write: the user's intent is what it was before that setup.
                if knob in first_intent:
                    intent.append((knob, first_intent[knob]))
            elif value != (None if knob == "bucket_size" else False):
                intent.append((knob, value))

    # seq_length is a GPT provider field, not a TransformerConfig one.
    seq_length = getattr(model_config, "seq_length", None)
    vpp = model_config.virtual_pipeline_model_parallel_size
    return LayoutFacts(
        tp_size=model_config.tensor_model_parallel_size,
        pp_size=model_config.pipeline_model_parallel_size,
        vpp_size=vpp,
        cp_size=model_config.context_parallel_size,
        ep_size=model_config.expert_model_parallel_size,
        dp_size=data_parallel_size,
        sequence_parallel=bool(model_config.sequence_parallel),
        te_available=te.available,
        te_reason=te.reason,
        te_version=te.version,
        use_distributed_optimizer=dist_opt,
        megatron_ddp=megatron_ddp,
        hidden_size=model_config.hidden_size,
        seq_length=seq_length,
        micro_batch_size=micro_batch_size,
        bf16=bool(model_config.bf16),
        fp16=bool(model_config.fp16),
        fp8=model_config.fp8 is not None,
        num_moe_experts=model_config.num_moe_experts,
        moe_token_dispatcher_type=model_config.moe_token_dispatcher_type,
        moe_shared_expert_overlap=bool(model_config.moe_shared_expert_overlap),
        recompute_granularity=model_config.recompute_granularity,
        recompute_method=model_config.recompute_method,
        recompute_num_layers=model_config.recompute_num_layers,
        recompute_modules=tuple(model_config.recompute_modules or ()),
        mtp_num_layers=model_config.mtp_num_layers,
        gradient_accumulation_fusion=bool(model_config.gradient_accumulation_fusion),
        ddp_intent=tuple(intent),
    )


def apply_plan(
    plan: OverlapPlan, model_config: Any, optimizer_config: Any, ddp_config: Any
) -> None:
    """Write a plan into megatron-core's configs, field by field."""
    v = {d.knob: d.value for d in plan.decisions}.__getitem__
    model_config.tp_comm_overlap = v("tp_comm_overlap")
    # A GPT provider declares tp_comm_overlap_cfg; megatron-core reads it back when building TE
    # userbuffers through our initialize_tp_communicators.
    ub_cfgs = v("tp_comm_overlap_cfg")
    model_config.tp_comm_overlap_cfg = (
        None if ub_cfgs is None else {gemm: dict(knobs) for gemm, knobs in ub_cfgs.items()}
    )
    model_config.tp_comm_bootstrap_backend = v("tp_comm_bootstrap_backend")
    model_config.overlap_p2p_comm = v("overlap_p2p_comm")
    model_config.batch_p2p_comm = v("batch_p2p_comm")
    model_config.overlap_moe_expert_parallel_comm = v("overlap_moe_expert_parallel_comm")
    model_config.delay_wgrad_compute = v("delay_wgrad_compute")
    model_config.defer_embedding_wgrad_compute = v("defer_embedding_wgrad_compute")
    # megatron-core rejects a negative limit only while deferral is on; -1 marks "off" for us.
    model_config.wgrad_deferral_limit = v("wgrad_deferral_limit")

    if plan.facts.megatron_ddp:
        ddp_config.overlap_grad_reduce = v("overlap_grad_reduce")
        ddp_config.overlap_param_gather = v("overlap_param_gather")
        ddp_config.align_param_gather = v("align_param_gather")
        ddp_config.bucket_size = v("bucket_size")
        ddp_config.delay_wgrad_compute = v("delay_wgrad_compute")
        written = {k: v(k) for k in _DDP_INTENT_KNOBS}
        setattr(ddp_config, _WRITTEN_ATTR, (written, dict(plan.facts.ddp_intent)))
    if optimizer_config is not None:
        # megatron-core's optimizer mirrors the DDP flag (used for MXFP8 param all-gather reuse).
        optimizer_config.overlap_param_gather = v("overlap_param_gather")
        optimizer_config.overlap_param_gather_with_optimizer_step = v(
            "overlap_param_gather_with_optimizer_step"
        )
