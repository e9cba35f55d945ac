"""Torch-free recipe descriptions: plan a recipe on a launch node that has no torch.

A :class:`RecipeSpec` says everything a recipe decides in plain values: the model's shape, the
parallel layout, precision, GPU, batch sizes, the userbuffers preset choice and the overlap
request. Both routes start from it:

- :meth:`RecipeSpec.plan` and :meth:`RecipeSpec.launch_env` give the overlap plan and the launch
  environment with neither torch nor megatron-core imported (``bridge-overlap explain
  --recipe`` and ``PerfEnvPlugin.from_recipe`` use them);
- :meth:`RecipeSpec.build` gives the full ``ConfigContainer`` (megatron-core configs), which
  ``runtime_config_update`` resolves at model-build time.

The tests check, for every shipped recipe, that both routes reach the same ``LayoutFacts`` and
the same plan.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from megatron.bridge.training import hardware, launch_env
from megatron.bridge.training.comm_overlap import (
    PUBLISHED_PRESETS,
    CommOverlapConfig,
    LayoutFacts,
    OverlapPlan,
    TEStatus,
    check_layout,
    plan_comm_overlap,
    te_status,
)
from megatron.bridge.training.userbuffers import PresetChoice, choose_userbuffers_preset
from megatron.bridge.training.validators import check_choice

if TYPE_CHECKING:
    from megatron.bridge.training.config import ConfigContainer

__all__ = ["RECIPE_KEYWORDS", "ModelShape", "Precision", "RecipeSpec"]

Precision = Literal["bf16", "fp8"]
"""Training precisions a recipe offers (FP8 with delayed scaling, the presets' recipe)."""

#: The keyword overrides every recipe function takes, and the spec field each one sets
#: (``seq_length`` is the model's).
RECIPE_KEYWORDS: tuple[str, ...] = (
    "gpu",
    "precision",
    "tp_size",
    "pp_size",
    "vpp_size",
    "cp_size",
    "seq_length",
    "micro_batch_size",
    "global_batch_size",
    "tp_comm_overlap",
)


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """A model's dimensions and how to build its provider, as plain values."""

    provider: str
    """``"module:function"`` that builds the ``GPTModelProvider`` from the fields below
    (imported only by :meth:`RecipeSpec.build`)."""
    num_layers: int
    """Transformer layers."""
    hidden_size: int
    """Model width."""
    num_attention_heads: int
    """Attention heads."""
    num_query_groups: int | None = None
    """Query groups of grouped-query attention (None: one per head)."""
    ffn_hidden_size: int
    """MLP width."""
    vocab_size: int
    """Tokenizer vocabulary."""
    seq_length: int
    """Training sequence length."""
    options: tuple[tuple[str, Any], ...] = ()
    """Further provider keywords, as (name, plain value) pairs."""
    account_for_embedding_in_pipeline_split: bool = False
    """Count the embedding as a layer when layers are split across pipeline stages."""
    account_for_loss_in_pipeline_split: bool = False
    """Count the loss as a layer when layers are split across pipeline stages."""
    num_moe_experts: int | None = None
    """MoE experts (None: dense)."""
    moe_token_dispatcher_type: str | None = None
    """MoE token dispatcher (MoE models only)."""
    moe_flex_dispatcher_backend: str | None = None
    """Backend of the flex dispatcher (flex dispatch only)."""

    def provider_kwargs(self) -> dict[str, Any]:
        """The keywords the provider function takes: the dimensions plus ``options``."""
        kwargs = {
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "ffn_hidden_size": self.ffn_hidden_size,
            "vocab_size": self.vocab_size,
            "seq_length": self.seq_length,
            **dict(self.options),
        }
        if self.num_query_groups is not None:
            kwargs["num_query_groups"] = self.num_query_groups
        return kwargs


@dataclass(frozen=True, kw_only=True)
class RecipeSpec:
    """Everything a recipe decides, as plain values; the plan and the container derive from it."""

    name: str
    """Recipe name."""
    model: ModelShape
    """The model's shape."""
    num_gpus: int
    """GPU count of the published run (the default world size)."""
    gpu: str
    """GPU model (a name from the GPU catalogue)."""
    precision: Precision = "bf16"
    """Training precision."""
    tp_size: int
    """Tensor-parallel size."""
    pp_size: int = 1
    """Pipeline-parallel size."""
    vpp_size: int | None = None
    """Virtual pipeline size (None or 1: no interleaving)."""
    cp_size: int = 1
    """Context-parallel size."""
    ep_size: int = 1
    """Expert-parallel size."""
    etp_size: int | None = None
    """Expert tensor-parallel size (None: TP)."""
    sequence_parallel: bool | None = None
    """Sequence parallelism (None: on when TP > 1, what TP overlap hides)."""
    micro_batch_size: int = 1
    """Samples per micro-batch."""
    global_batch_size: int | None = None
    """Samples per optimizer step."""
    distributed_optimizer: bool = True
    """Shard optimizer state across data-parallel ranks."""
    tp_comm_overlap: bool = True
    """Request TP communication overlap."""
    preset: str = "auto"
    """Userbuffers preset: "auto" (the published one for the shape), a published name, or "none"."""
    overlap: tuple[tuple[str, Any], ...] = ()
    """Further CommOverlapConfig fields (EP overlap, strict, ...), as (name, value) pairs."""
    lr: float = 3e-4
    """Peak learning rate."""
    min_lr: float = 3e-5
    """Final learning rate."""

    def __post_init__(self) -> None:
        hardware.gpu_spec(self.gpu)
        check_choice("", "precision", self.precision, Precision)
        hardware.check_precision_on_gpu(gpu=self.gpu, fp8=self.precision == "fp8")
        if self.preset not in ("auto", "none") and self.preset not in PUBLISHED_PRESETS:
            raise ValueError(
                f"preset {self.preset!r} is not a published preset; choose 'auto', 'none' or one "
                f"of: {', '.join(sorted(PUBLISHED_PRESETS))}"
            )

    def with_overrides(self, **overrides: Any) -> RecipeSpec:
        """This spec with a recipe's keyword overrides (:data:`RECIPE_KEYWORDS`) applied."""
        unknown = sorted(set(overrides) - set(RECIPE_KEYWORDS))
        if unknown:
            raise TypeError(
                f"recipe {self.name} got unexpected keyword(s) {unknown}; it takes "
                f"{list(RECIPE_KEYWORDS)}."
            )
        if "gpu" in overrides:
            overrides["gpu"] = hardware.gpu_spec(overrides["gpu"]).name
        model = self.model
        if "seq_length" in overrides:
            model = dataclasses.replace(model, seq_length=overrides.pop("seq_length"))
        return dataclasses.replace(self, model=model, **overrides)

    # --- the torch-free route ----------------------------------------------------------------

    @property
    def sp(self) -> bool:
        """Whether sequence parallelism is on."""
        return self.tp_size > 1 if self.sequence_parallel is None else self.sequence_parallel

    @property
    def vpp(self) -> int | None:
        """The virtual pipeline size as megatron-core stores it (None without interleaving)."""
        return None if self.vpp_size in (None, 1) else self.vpp_size

    def preset_choice(self) -> PresetChoice:
        """The userbuffers preset this recipe runs with, and why."""
        if self.preset == "auto":
            return choose_userbuffers_preset(
                tp_comm_overlap=self.tp_comm_overlap,
                precision=self.precision,
                gpu=self.gpu,
                hidden_size=self.model.hidden_size,
                tp_size=self.tp_size,
                cp_size=self.cp_size,
                micro_batch_size=self.micro_batch_size,
                seq_length=self.model.seq_length,
            )
        if self.preset == "none":
            return PresetChoice(name=None, preset=None, detail="preset 'none': TE defaults")
        return PresetChoice(
            name=self.preset, preset=PUBLISHED_PRESETS[self.preset], detail="named preset"
        )

    def request(self) -> CommOverlapConfig:
        """The comm-overlap request this recipe makes."""
        return CommOverlapConfig(
            tp_comm_overlap=self.tp_comm_overlap,
            tp_comm_overlap_cfg=self.preset_choice().preset,
            **dict(self.overlap),
        )

    def facts(self, *, world_size: int | None = None, te: TEStatus | str = "assume") -> LayoutFacts:
        """The layout facts of this recipe on ``world_size`` GPUs (default: the published count).

        The same values ``facts_from_configs`` reads from the built and resolved container.
        """
        world = self.num_gpus if world_size is None else world_size
        status = te_status(te) if isinstance(te, str) else te
        m = self.model
        moe = bool(m.num_moe_experts)
        return LayoutFacts(
            tp_size=self.tp_size,
            pp_size=self.pp_size,
            vpp_size=self.vpp,
            cp_size=self.cp_size,
            ep_size=self.ep_size,
            etp_size=self.etp_size,
            dp_size=launch_env.data_parallel_size(
                num_gpus=world, tp_size=self.tp_size, cp_size=self.cp_size, pp_size=self.pp_size
            ),
            sequence_parallel=self.sp,
            gpu=self.gpu,
            te_available=status.available,
            te_reason=status.reason,
            te_version=status.version,
            use_distributed_optimizer=self.distributed_optimizer,
            num_layers=m.num_layers,
            hidden_size=m.hidden_size,
            num_attention_heads=m.num_attention_heads,
            num_query_groups=m.num_query_groups,
            account_for_embedding_in_pipeline_split=m.account_for_embedding_in_pipeline_split,
            account_for_loss_in_pipeline_split=m.account_for_loss_in_pipeline_split,
            seq_length=m.seq_length,
            micro_batch_size=self.micro_batch_size,
            bf16=True,
            fp8=self.precision == "fp8",
            num_moe_experts=m.num_moe_experts,
            moe_token_dispatcher_type=m.moe_token_dispatcher_type if moe else None,
            moe_flex_dispatcher_backend=(
                m.moe_flex_dispatcher_backend
                if moe and m.moe_token_dispatcher_type == "flex"
                else None
            ),
        )

    def plan(self, *, world_size: int | None = None, te: TEStatus | str = "assume") -> OverlapPlan:
        """The overlap plan of this recipe: layout checked, then the rules, without torch."""
        facts = self.facts(world_size=world_size, te=te)
        check_layout(facts)
        return plan_comm_overlap(self.request(), facts)

    def launch_env(
        self, *, world_size: int | None = None, te: TEStatus | str = "assume", **options: Any
    ) -> launch_env.LaunchEnvPlan:
        """The launch environment of this recipe on ``world_size`` GPUs (default: published).

        The plan's facts through ``launch_env.plan_launch_env_for``, EP all-to-all overlap as the
        plan decided it: what ``PerfEnvPlugin.from_recipe`` exports and what :meth:`build` puts
        in ``cfg.env_vars``. ``options`` are ``plan_launch_env_for``'s (``layernorm_sm_margin``,
        ``nccl_pp_comm_chunksize``, ...).
        """
        # The layout errors are plan()'s and the resolver's to raise (a container is built
        # before it is checked); the environment only needs the facts and the EP decision.
        plan = plan_comm_overlap(self.request(), self.facts(world_size=world_size, te=te))
        return launch_env.plan_launch_env_for(
            plan.facts,
            a2a_overlap=bool(plan.value("overlap_moe_expert_parallel_comm")),
            **options,
        )

    # --- the full container ------------------------------------------------------------------

    def build(self) -> ConfigContainer:
        """The recipe's ``ConfigContainer`` (imports megatron-core and torch)."""
        from megatron.bridge.recipes.common import assemble

        module_name, function_name = self.model.provider.split(":")
        provider = getattr(importlib.import_module(module_name), function_name)
        model = provider(**self.model.provider_kwargs())
        m = self.model
        model.account_for_embedding_in_pipeline_split = m.account_for_embedding_in_pipeline_split
        model.account_for_loss_in_pipeline_split = m.account_for_loss_in_pipeline_split
        if m.num_moe_experts is not None:
            model.num_moe_experts = m.num_moe_experts
            if m.moe_token_dispatcher_type is not None:
                model.moe_token_dispatcher_type = m.moe_token_dispatcher_type
            if m.moe_flex_dispatcher_backend is not None:
                model.moe_flex_dispatcher_backend = m.moe_flex_dispatcher_backend
        model.expert_model_parallel_size = self.ep_size
        model.expert_tensor_parallel_size = self.etp_size
        return assemble(model=model, spec=self)
