"""The plan data model: the layout facts a decision depends on, and the decisions with reasons.

:class:`LayoutFacts` holds plain values (parallel sizes, model shape, precision, TE and GPU);
:class:`OverlapPlan` holds one :class:`Decision` per knob (value, source, reason) plus warnings
and notes. Both are frozen and serialize to JSON (``OverlapPlan.to_dict``/``from_dict``); the
JSON Schema of that layout ships as ``megatron/bridge/explain.schema.json`` (``$defs/plan``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from megatron.bridge.training.comm_overlap.knobs import KNOBS, Area, ConfigName
from megatron.bridge.training.userbuffers import published_name_for

__all__ = ["Decision", "LayoutFacts", "OverlapPlan", "OverlapRefusedError", "Source"]

Source = Literal["default", "derived", "user", "refused"]
"""Where a decision came from."""


class OverlapRefusedError(ValueError):
    """A requested overlap cannot run with this layout and ``strict=True`` forbids falling back."""


@dataclass(frozen=True, kw_only=True)
class LayoutFacts:
    """Everything the overlap decision depends on, as plain values.

    Model-shape fields left None are unknown here; the rules that need them are skipped (and say
    so where it matters).
    """

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
    etp_size: int | None = None
    """Expert tensor-parallel size; None means the same as tp_size (megatron-core's default)."""
    dp_size: int = 1
    """Data-parallel size."""
    sequence_parallel: bool = False
    """Whether sequence parallelism is on."""
    gpu: str | None = None
    """GPU model the job runs on (a name from the hardware catalogue); None when unknown."""
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
    num_layers: int | None = None
    """Transformer layers."""
    hidden_size: int | None = None
    """Model hidden size (for the preset shape check)."""
    num_attention_heads: int | None = None
    """Attention heads."""
    num_query_groups: int | None = None
    """Query groups of grouped-query attention (None: one per head)."""
    account_for_embedding_in_pipeline_split: bool = False
    """Whether the embedding counts as a layer when layers are split across pipeline stages."""
    account_for_loss_in_pipeline_split: bool = False
    """Whether the loss counts as a layer when layers are split across pipeline stages."""
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
    moe_flex_dispatcher_backend: str | None = None
    """Backend of the flex MoE dispatcher (None unless the dispatcher is flex)."""
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
    distributed_optimizer_turned_on: ConfigName | None = None
    """The config (ddp or optimizer) whose use_distributed_optimizer was False while the other's
    was True; the plan turns it on there too (megatron-core reads both). None when they agree."""
    cuda_graph_impl: str = "none"
    """megatron-core's CUDA graph implementation: none, local, transformer_engine, full_iteration."""
    cuda_graph_modules: tuple[str, ...] = ()
    """Per-layer CUDA graph capture regions (attn, mlp, moe, moe_router, ...); empty: whole layer."""
    attention_bias: bool = False
    """Whether the attention projections have biases (add_bias_linear or add_qkv_bias)."""
    moe_shared_expert_intermediate_size: int | None = None
    """FFN size of the MoE shared experts; None when the model has none."""
    overlap_dispatch_backward_with_experts_wgrad: bool = False
    """megatron-core's alternative to EP overlap: the dispatch backward overlaps expert wgrad."""
    ep_overlap_early_attn_memory_release: bool = False
    """Release attention memory early under EP overlap (needs overlap_moe_expert_parallel_comm)."""
    overlap_p2p_comm_warmup_flush: bool = False
    """Overlap pipeline p2p also in warmup and flush (needs overlap_p2p_comm, not batch_p2p_comm)."""
    num_buckets: int | None = None
    """DDP bucket count set on cfg.ddp (exclusive with bucket_size in megatron-core)."""
    direct_settings: tuple[tuple[str, str, Any], ...] = ()
    """Overlap knobs the user wrote straight onto a megatron-core config, as (config, knob, value)."""

    @property
    def interleaved(self) -> bool:
        """True for an interleaved (virtual) pipeline: PP > 1 and VPP > 1."""
        return self.pp_size > 1 and self.vpp_size is not None and self.vpp_size > 1

    @property
    def precision(self) -> str:
        """ "fp8", "fp16" or "bf16": the training precision, as preset names spell it."""
        return "fp8" if self.fp8 else ("fp16" if self.fp16 else "bf16")

    @property
    def world_size(self) -> int:
        """GPUs in the job: TP x CP x PP x DP."""
        return self.tp_size * self.cp_size * self.pp_size * self.dp_size

    @property
    def moe(self) -> bool:
        """Whether the model has experts."""
        return self.num_moe_experts is not None and self.num_moe_experts > 0

    @property
    def expert_data_parallel_size(self) -> int | None:
        """Replicas of each expert: world / (ETP x EP x PP); None for a dense model.

        Expert gradients are reduced (and, with the distributed optimizer, expert parameters
        gathered) over this group, not over the dense data-parallel group.
        """
        if not self.moe:
            return None
        etp = self.tp_size if self.etp_size is None else self.etp_size
        return self.world_size // (etp * self.ep_size * self.pp_size)

    def direct_setting(self, knob: str) -> tuple[str, Any] | None:
        """``(config, value)`` when the user set ``knob`` straight on a megatron-core config."""
        for config, name, value in self.direct_settings:
            if name == knob:
                return config, value
        return None

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready values (tuples as lists)."""
        facts = dataclasses.asdict(self)
        facts["recompute_modules"] = list(self.recompute_modules)
        facts["cuda_graph_modules"] = list(self.cuda_graph_modules)
        facts["direct_settings"] = [list(t) for t in self.direct_settings]
        return facts

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LayoutFacts:
        """Rebuild facts from :meth:`to_dict` output."""
        facts = dict(data)
        facts["recompute_modules"] = tuple(facts["recompute_modules"])
        if "cuda_graph_modules" in facts:
            facts["cuda_graph_modules"] = tuple(facts["cuda_graph_modules"])
        facts["direct_settings"] = tuple(tuple(t) for t in facts["direct_settings"])
        return cls(**facts)


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
        return KNOBS[self.knob].area


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
    def preset_name(self) -> str | None:
        """The published name of the userbuffers preset in use that describes this run.

        Presets with equal values are published under several names; the one whose GPU family,
        precision, hidden size and TP size fit the facts is chosen. None when TP overlap is off
        or the preset is custom (or TE's defaults).
        """
        if not self.value("tp_comm_overlap") or not self.preset_names:
            return None
        f = self.facts
        return published_name_for(
            self.preset_names,
            gpu=f.gpu,
            precision=f.precision,
            hidden_size=f.hidden_size,
            tp_size=f.tp_size,
        )

    @property
    def refused(self) -> tuple[Decision, ...]:
        """Requests the layout turned down."""
        return tuple(d for d in self.decisions if d.source == "refused")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with stable keys: facts, derived, decisions, preset_names, warnings, notes."""
        return {
            "facts": self.facts.to_dict(),
            "derived": {
                "world_size": self.facts.world_size,
                "expert_data_parallel_size": self.facts.expert_data_parallel_size,
            },
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
        return cls(
            facts=LayoutFacts.from_dict(data["facts"]),
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
