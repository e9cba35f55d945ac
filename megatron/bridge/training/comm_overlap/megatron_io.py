"""megatron-core configs in and out: read the layout facts, write a plan back, field by field.

:func:`facts_from_configs` reads megatron-core's ``TransformerConfig`` (or a GPT provider),
``OptimizerConfig`` and ``DistributedDataParallelConfig`` into :class:`LayoutFacts`;
:func:`apply_plan` writes each decision to the configs the knob table names. Each config records
what was written to it, so a later resolution tells the library's own earlier writes apart from
settings the user made straight on the config.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING, Any

from megatron.bridge.training.comm_overlap.knobs import KNOBS, ConfigName
from megatron.bridge.training.comm_overlap.plan import LayoutFacts, OverlapPlan
from megatron.bridge.training.comm_overlap.request import load_preset
from megatron.bridge.training.comm_overlap.rules import resolve
from megatron.bridge.training.comm_overlap.te import TEStatus, current_te_status
from megatron.bridge.training.validators import check_bool

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap.request import CommOverlapConfig

__all__ = [
    "apply_plan",
    "distributed_optimizer_to_turn_on",
    "facts_from_configs",
    "log_plan",
    "model_config_drift",
    "setup_configs",
    "sync_distributed_optimizer",
    "undo_plan",
]

logger = logging.getLogger(__name__)

# Private attribute where apply_plan records, per knob, the value it wrote onto a config and the
# user's own setting it replaced (or _NOTHING), so a second resolution does not mistake the
# first one's writes for the user's settings.
_WRITTEN_ATTR = "_bridge_comm_overlap_written"
_NOTHING = object()


def _is_megatron_ddp_config(ddp_config: Any) -> bool:
    if ddp_config is None:
        return False
    from megatron.core.distributed.distributed_data_parallel_config import (
        DistributedDataParallelConfig,
    )

    return isinstance(ddp_config, DistributedDataParallelConfig)


@functools.cache
def _field_defaults(cls: type) -> dict[str, Any]:
    # megatron-core's own defaults, read from its dataclasses: a value different from these (and
    # not written by us) was set by the user.
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return defaults


def _users_value(config: Any, knob: str) -> Any:
    """The user's own setting of ``knob`` on ``config``, or ``_NOTHING``.

    Where our own earlier apply_plan wrote the field, the record tells: a value still equal to
    what was written is ours, and the user's setting is the one that write replaced; any other
    value was set by the user since, megatron-core's default included. Where we never wrote it,
    a value other than megatron-core's default counts; the default itself cannot be told apart
    from an untouched field and reads as not set (the plan says so where that matters).
    """
    value = getattr(config, knob, None)
    written = getattr(config, _WRITTEN_ATTR, {})
    if knob in written:
        ours, replaced = written[knob]
        return replaced if value == ours else value
    if value == _field_defaults(type(config)).get(knob):
        return _NOTHING
    return value


def _direct_settings(configs: dict[ConfigName, Any]) -> tuple[tuple[str, str, Any], ...]:
    """Every overlap knob the user set straight on a megatron-core config, as (config, knob, value).

    Each knob the table marks ``direct`` is read from every config it targets, in the table's
    order, so a setting on any of them is seen (and two that disagree are both there).
    """
    found: list[tuple[str, str, Any]] = []
    for knob, spec in KNOBS.items():
        if spec.direct is None:
            continue
        for name in spec.targets:
            config = configs.get(name)
            # A field the config does not declare (tp_comm_overlap_cfg on a plain
            # TransformerConfig) cannot hold a user's setting.
            if config is None or knob not in _field_defaults(type(config)):
                continue
            value = _users_value(config, knob)
            if value is _NOTHING:
                continue
            if knob == "tp_comm_overlap_cfg":
                # Kept as plain data (the facts are JSON); a bad file or mapping fails here.
                value = load_preset(value, owner=f"cfg.{name}").to_ub_cfgs()
            found.append((name, knob, value))
    return tuple(found)


def distributed_optimizer_to_turn_on(ddp_flag: bool, optimizer_flag: bool) -> ConfigName | None:
    """Which config must turn the distributed optimizer on so both agree, or None.

    megatron-core reads ``use_distributed_optimizer`` from both the DDP and the optimizer config,
    and both default to False, so a True on either side is the user's request: the other side
    is turned on to match (recipes usually set it on the DDP config only).
    """
    if ddp_flag == optimizer_flag:
        return None
    return "optimizer" if ddp_flag else "ddp"


def sync_distributed_optimizer(optimizer_config: Any, ddp_config: Any) -> str | None:
    """Turn ``use_distributed_optimizer`` on in both configs when either has it on.

    Returns a sentence naming the config that was changed, or None when they already agreed.
    A non-bool flag is a ``TypeError`` naming the field.
    """
    flags = {}
    for name, config in (("ddp", ddp_config), ("optimizer", optimizer_config)):
        flags[name] = check_bool(
            f"cfg.{name}", "use_distributed_optimizer", config.use_distributed_optimizer
        )
    target = distributed_optimizer_to_turn_on(flags["ddp"], flags["optimizer"])
    if target is None:
        return None
    ddp_config.use_distributed_optimizer = True
    optimizer_config.use_distributed_optimizer = True
    return _turned_on_note(target)


def _turned_on_note(target: ConfigName) -> str:
    source = "optimizer" if target == "ddp" else "ddp"
    return (
        f"cfg.{source}.use_distributed_optimizer=True but cfg.{target}.use_distributed_optimizer="
        f"False: cfg.{target}.use_distributed_optimizer set to True to match (megatron-core reads "
        "both)."
    )


def _users_flag(config: Any, field: str) -> bool:
    # The user's bool, seen through our own earlier write of it (a second setup must see the
    # same request as the first).
    value = _users_value(config, field)
    return False if value is _NOTHING else bool(value)


def _cuda_graph_modules(model_config: Any) -> tuple[str, ...]:
    # megatron-core 0.19 normalizes cuda_graph_modules to CudaGraphModule members in
    # __post_init__ and migrates the deprecated cuda_graph_scope into it; a value set after
    # construction may still be a string or a list of strings. "full" (and an empty list) mean
    # the whole layer, which names no module.
    names: list[str] = []
    for raw in (
        getattr(model_config, "cuda_graph_modules", None),
        getattr(model_config, "cuda_graph_scope", None),
    ):
        items = raw if isinstance(raw, list | tuple) else [] if raw is None else [raw]
        for item in items:
            name = getattr(item, "name", item)
            if isinstance(name, str) and name != "full" and name not in names:
                names.append(name)
    return tuple(names)


def facts_from_configs(
    model_config: Any,
    optimizer_config: Any,
    ddp_config: Any,
    *,
    data_parallel_size: int,
    micro_batch_size: int | None = None,
    te_status: TEStatus | None = None,
    gpu: str | None = None,
) -> LayoutFacts:
    """Read the layout facts from megatron-core's configs (model, optimizer, DDP).

    ``gpu`` names the GPU model when it is known (a recipe's, or the CLI's); ``te_status``
    defaults to what this process sees (``current_te_status``). ``use_distributed_optimizer``
    True on either the DDP or the optimizer config counts for both
    (:func:`distributed_optimizer_to_turn_on`); the facts name the config to turn on.
    """
    te = te_status or current_te_status()
    megatron_ddp = _is_megatron_ddp_config(ddp_config)
    ddp_flag = _users_flag(ddp_config, "use_distributed_optimizer") if megatron_ddp else False
    opt_flag = (
        _users_flag(optimizer_config, "use_distributed_optimizer")
        if optimizer_config is not None
        else False
    )
    dist_opt = ddp_flag or opt_flag
    turned_on = (
        distributed_optimizer_to_turn_on(ddp_flag, opt_flag)
        if megatron_ddp and optimizer_config is not None
        else None
    )

    graph_impl = getattr(model_config, "cuda_graph_impl", "none") or "none"
    graph_modules = _cuda_graph_modules(model_config) if graph_impl != "none" else ()
    graphed_attn = graph_impl in ("local", "transformer_engine") and "attn" in graph_modules
    configs: dict[ConfigName, Any] = {"model": model_config, "optimizer": optimizer_config}
    if megatron_ddp:
        configs["ddp"] = ddp_config
    m = model_config
    moe = bool(m.num_moe_experts)
    return LayoutFacts(
        tp_size=m.tensor_model_parallel_size,
        pp_size=m.pipeline_model_parallel_size,
        vpp_size=m.virtual_pipeline_model_parallel_size,
        cp_size=m.context_parallel_size,
        ep_size=m.expert_model_parallel_size,
        etp_size=m.expert_tensor_parallel_size,
        dp_size=data_parallel_size,
        sequence_parallel=bool(m.sequence_parallel),
        gpu=gpu,
        te_available=te.available,
        te_reason=te.reason,
        te_version=te.version,
        use_distributed_optimizer=dist_opt,
        megatron_ddp=megatron_ddp,
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        account_for_embedding_in_pipeline_split=bool(m.account_for_embedding_in_pipeline_split),
        account_for_loss_in_pipeline_split=bool(m.account_for_loss_in_pipeline_split),
        # seq_length is a GPT provider field, not a TransformerConfig one.
        seq_length=getattr(m, "seq_length", None),
        micro_batch_size=micro_batch_size,
        bf16=bool(m.bf16),
        fp16=bool(m.fp16),
        fp8=m.fp8 is not None,
        num_moe_experts=m.num_moe_experts,
        moe_token_dispatcher_type=m.moe_token_dispatcher_type if moe else None,
        # megatron-core fills the backend in for every model; it matters only with flex dispatch.
        moe_flex_dispatcher_backend=(
            m.moe_flex_dispatcher_backend if moe and m.moe_token_dispatcher_type == "flex" else None
        ),
        moe_shared_expert_overlap=bool(m.moe_shared_expert_overlap),
        recompute_granularity=m.recompute_granularity,
        recompute_method=m.recompute_method,
        recompute_num_layers=m.recompute_num_layers,
        recompute_modules=tuple(m.recompute_modules or ()),
        mtp_num_layers=m.mtp_num_layers,
        gradient_accumulation_fusion=bool(m.gradient_accumulation_fusion),
        distributed_optimizer_turned_on=turned_on,
        cuda_graph_impl=graph_impl,
        # cuda_graph_modules has no effect without a CUDA graph implementation.
        cuda_graph_modules=graph_modules,
        # megatron-core defaults add_bias_linear to True; the bias matters only to graphed
        # attention, so elsewhere it stays out of the facts (a torch-free spec plans the same).
        attention_bias=graphed_attn and bool(m.add_bias_linear or m.add_qkv_bias),
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        overlap_dispatch_backward_with_experts_wgrad=bool(
            getattr(m, "overlap_dispatch_backward_with_experts_wgrad", False)
        ),
        ep_overlap_early_attn_memory_release=bool(
            getattr(m, "ep_overlap_early_attn_memory_release", False)
        ),
        overlap_p2p_comm_warmup_flush=bool(getattr(m, "overlap_p2p_comm_warmup_flush", False)),
        num_buckets=ddp_config.num_buckets if megatron_ddp else None,
        direct_settings=_direct_settings(configs),
    )


def _fresh(value: Any) -> Any:
    # Decision values are scalars, None, or the userbuffers dict of GEMM name -> knob dict (whose
    # knobs are scalars): two levels of copying detach it, at a fraction of deepcopy's cost.
    if isinstance(value, dict):
        return {gemm: dict(knobs) for gemm, knobs in value.items()}
    return value


def apply_plan(
    plan: OverlapPlan, model_config: Any, optimizer_config: Any, ddp_config: Any
) -> None:
    """Write a plan into megatron-core's configs: each knob to the configs the knob table names.

    DP knobs are written to the DDP config only when it is megatron-core's; nothing is written
    to a config given as None.
    """
    configs: dict[ConfigName, Any] = {
        "model": model_config,
        "optimizer": optimizer_config,
        "ddp": ddp_config if plan.facts.megatron_ddp else None,
    }
    for decision in plan.decisions:
        for name in KNOBS[decision.knob].targets:
            if configs[name] is not None:
                # A fresh copy: editing the config's value must never edit the plan or a preset.
                _write(configs[name], decision.knob, _fresh(decision.value))
    turned_on = plan.facts.distributed_optimizer_turned_on
    if turned_on is not None and configs[turned_on] is not None:
        _write(configs[turned_on], "use_distributed_optimizer", True)


def _write(config: Any, field: str, value: Any) -> None:
    replaced = _users_value(config, field)
    setattr(config, field, value)
    written = dict(getattr(config, _WRITTEN_ATTR, {}))
    # A detached copy of what was written: an edit the user later makes in place (a key of the
    # userbuffers dict) then reads as the user's, as a new value would.
    written[field] = (_fresh(value), replaced)
    # object.__setattr__: the record is ours, not a config field, and must not trip a config's
    # own __setattr__ checks.
    object.__setattr__(config, _WRITTEN_ATTR, written)


def model_config_drift(plan: OverlapPlan, model_config: Any) -> tuple[str, ...]:
    """The overlap knobs whose live value on ``model_config`` differs from ``plan``, one line each.

    Run after the model is built: megatron-core and Transformer Engine write some knobs back into
    the shared config (TE turns ``tp_comm_overlap`` off when a layer's userbuffer name is not in
    the preset, e.g. the MTP layers), which silently changes what every layer built afterwards
    does. Only knobs the knob table writes to the model config are compared.
    """
    drifted: list[str] = []
    for decision in plan.decisions:
        if "model" not in KNOBS[decision.knob].targets:
            continue
        live = getattr(model_config, decision.knob, None)
        if live != decision.value:
            drifted.append(
                f"cfg.model.{decision.knob} is {_short(live)} after the model build but the plan "
                f"set {_short(decision.value)} ({decision.reason})"
            )
    return tuple(drifted)


def _short(value: Any) -> str:
    return f"a dict of {len(value)} GEMMs" if isinstance(value, dict) else repr(value)


def setup_configs(
    request: CommOverlapConfig,
    model_config: Any,
    optimizer_config: Any,
    ddp_config: Any,
    *,
    data_parallel_size: int,
    micro_batch_size: int | None,
    te_status: TEStatus | None = None,
    gpu: str | None = None,
) -> OverlapPlan:
    """Resolve a finalized request against megatron-core configs, log the plan, write it there."""
    facts = facts_from_configs(
        model_config,
        optimizer_config,
        ddp_config,
        data_parallel_size=data_parallel_size,
        micro_batch_size=micro_batch_size,
        te_status=te_status,
        gpu=gpu,
    )
    plan = resolve(request, facts)
    log_plan(plan)
    apply_plan(plan, model_config, optimizer_config, ddp_config)
    return plan


def log_plan(plan: OverlapPlan) -> None:
    """Log a plan's warnings (WARNING) and notes (INFO) on the comm_overlap logger."""
    for message in plan.warnings:
        logger.warning("comm overlap: %s", message)
    for message in plan.notes:
        logger.info("comm overlap: %s", message)


def undo_plan(model_config: Any, optimizer_config: Any, ddp_config: Any) -> list[str]:
    """Put back what :func:`apply_plan` replaced, where its write still stands; return the fields.

    A field the user changed after the write keeps the user's value. A field the user had not
    set goes back to megatron-core's default. The write records are removed.
    """
    restored: list[str] = []
    configs: dict[ConfigName, Any] = {
        "model": model_config,
        "optimizer": optimizer_config,
        "ddp": ddp_config,
    }
    for name, config in configs.items():
        written = getattr(config, _WRITTEN_ATTR, None) if config is not None else None
        if not written:
            continue
        defaults = _field_defaults(type(config))
        for knob, (value, replaced) in written.items():
            if getattr(config, knob) != value:
                continue
            if replaced is not _NOTHING:
                setattr(config, knob, replaced)
            elif knob in defaults:
                setattr(config, knob, defaults[knob])
            else:  # a field a plain TransformerConfig does not declare (tp_comm_overlap_cfg)
                setattr(config, knob, None)
            restored.append(f"cfg.{name}.{knob}")
        object.__delattr__(config, _WRITTEN_ATTR)
    return restored
