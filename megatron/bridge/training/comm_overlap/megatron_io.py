"""megatron-core configs in and out: describe the job, write a plan back, field by field.

:func:`describe_configs` reads megatron-core's ``TransformerConfig`` (or a GPT provider),
``OptimizerConfig`` and ``DistributedDataParallelConfig`` into a
:class:`~megatron.bridge.training.job.JobDescription`;
:func:`apply_plan` writes each decision to the configs the knob table names. Each config records
what was written to it, so a later resolution tells the library's own earlier writes apart from
settings the user made straight on the config.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

from megatron.bridge.training import write_record
from megatron.bridge.training.comm_overlap.knobs import KNOBS
from megatron.bridge.training.comm_overlap.plan import OverlapPlan
from megatron.bridge.training.comm_overlap.rules import plan_comm_overlap
from megatron.bridge.training.comm_overlap.te import TEStatus, current_te_status
from megatron.bridge.training.job import ConfigName, JobDescription
from megatron.bridge.training.job_configs import describe_model
from megatron.bridge.training.parallel_layout import validate_parallel_size
from megatron.bridge.training.userbuffers_file import load_preset
from megatron.bridge.training.validators import check_bool

__all__ = [
    "apply_plan",
    "describe_configs",
    "distributed_optimizer_to_turn_on",
    "log_plan",
    "model_config_drift",
    "setup_configs",
    "undo_plan",
    "write_distributed_optimizer",
]

logger = logging.getLogger(__name__)

# apply_plan records, per knob, the value it wrote onto a config and the user's own setting it
# replaced (or NOTHING), so a second resolution does not mistake the first one's writes for the
# user's settings (write_record, writer "plan").
_NOTHING = write_record.NOTHING


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
    from an untouched field and reads as not set (the plan says so where that matters). A value
    typed as an override (``apply_overrides``, recorded by write_record's "typed") is the user's
    while the field still holds it, megatron-core's default included.
    """
    return _seen_as_users(
        config, knob, getattr(config, knob, None), write_record.records(config, "plan").get(knob)
    )


def _seen_as_users(config: Any, knob: str, value: Any, written: tuple[Any, Any] | None) -> Any:
    # _users_value's rule on what was read: the field's value and our record of it (or None).
    typed = write_record.records(config, "typed").get(knob)
    if typed is not None and value == typed[0]:
        # Typed as an override (command line, apply_overrides): the user's, default or not.
        return value
    if written is not None:
        ours, replaced = written
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
                # Kept as plain data (the job description is JSON); a bad file or mapping fails here.
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


def _users_flag(config: Any, name: ConfigName, field: str) -> bool:
    # The user's bool, seen through our own earlier write of it (a second setup must see the
    # same request as the first); a non-bool is a TypeError naming the field.
    value = _users_value(config, field)
    return False if value is _NOTHING else check_bool(f"cfg.{name}", field, value)


def describe_configs(
    model_config: Any,
    optimizer_config: Any,
    ddp_config: Any,
    *,
    world_size: int,
    micro_batch_size: int | None = None,
    global_batch_size: int | None = None,
    te_status: TEStatus | None = None,
    gpu: str | None = None,
    gpus_per_node: int | None = None,
    nvlink_domain: int | None = None,
) -> JobDescription:
    """The job description of megatron-core's configs (model, optimizer, DDP) on ``world_size`` GPUs.

    The model is read field by field (:func:`describe_model`). ``gpu`` names the GPU model when
    it is known (a recipe's, or the CLI's), ``gpus_per_node`` and ``nvlink_domain`` the
    cluster's node and NVLink domain where they are not the catalogue's (the container's);
    ``te_status`` defaults to what this process sees (``current_te_status``).
    ``use_distributed_optimizer`` True on either the DDP or the optimizer config counts for both
    (:func:`distributed_optimizer_to_turn_on`); the description names the config to turn on.
    """
    te = te_status or current_te_status()
    megatron_ddp = _is_megatron_ddp_config(ddp_config)
    ddp_flag = (
        _users_flag(ddp_config, "ddp", "use_distributed_optimizer") if megatron_ddp else False
    )
    opt_flag = (
        _users_flag(optimizer_config, "optimizer", "use_distributed_optimizer")
        if optimizer_config is not None
        else False
    )
    turned_on = (
        distributed_optimizer_to_turn_on(ddp_flag, opt_flag)
        if megatron_ddp and optimizer_config is not None
        else None
    )
    configs: dict[ConfigName, Any] = {"model": model_config, "optimizer": optimizer_config}
    if megatron_ddp:
        configs["ddp"] = ddp_config
    return JobDescription(
        model=describe_model(model_config),
        world_size=world_size,
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        nvlink_domain=nvlink_domain,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        use_distributed_optimizer=ddp_flag or opt_flag,
        megatron_ddp=megatron_ddp,
        use_megatron_fsdp=(
            _users_flag(ddp_config, "ddp", "use_megatron_fsdp") if megatron_ddp else False
        ),
        num_distributed_optimizer_instances=(
            ddp_config.num_distributed_optimizer_instances if megatron_ddp else 1
        ),
        outer_dp_sharding_strategy=(
            ddp_config.outer_dp_sharding_strategy if megatron_ddp else "no_shard"
        ),
        num_buckets=ddp_config.num_buckets if megatron_ddp else None,
        grad_reduce_in_fp32=bool(getattr(ddp_config, "grad_reduce_in_fp32", False)),
        fp8_param_gather=bool(getattr(ddp_config, "fp8_param_gather", False)),
        fp4_param_gather=bool(getattr(ddp_config, "fp4_param_gather", False)),
        optimizer_cpu_offload=bool(getattr(optimizer_config, "optimizer_cpu_offload", False)),
        optimizer_offload_fraction=float(
            getattr(optimizer_config, "optimizer_offload_fraction", 0.0) or 0.0
        ),
        te_available=te.available,
        te_reason=te.reason,
        te_version=te.version,
        direct_settings=_direct_settings(configs),
        distributed_optimizer_turned_on=turned_on,
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
        "ddp": ddp_config if plan.job.megatron_ddp else None,
    }
    writes: dict[ConfigName, dict[str, Any]] = {name: {} for name in configs}
    for decision in plan.decisions:
        for name in KNOBS[decision.knob].targets:
            writes[name][decision.knob] = decision.value
    for name, fields in writes.items():
        if configs[name] is not None:
            _write(configs[name], fields)
    write_distributed_optimizer(plan.job, optimizer_config, configs["ddp"])


def write_distributed_optimizer(
    job: JobDescription, optimizer_config: Any, ddp_config: Any
) -> None:
    """Turn ``use_distributed_optimizer`` on where the job says the configs disagree.

    megatron-core reads the flag from both the DDP and the optimizer config; the job's
    ``distributed_optimizer_turned_on`` names the one left False (``describe_configs``). The
    write is recorded like a plan's, so undoing it puts the user's False back.
    """
    target = {"ddp": ddp_config, "optimizer": optimizer_config}.get(
        job.distributed_optimizer_turned_on
    )
    if target is not None:
        _write(target, {"use_distributed_optimizer": True})


def _write(config: Any, fields: dict[str, Any]) -> None:
    """Write each field's value into ``config`` and record the writes (one record update)."""
    mine = write_record.records(config, "plan")
    entries: dict[str, tuple[Any, Any]] = {}
    try:
        for field, planned in fields.items():
            # A fresh copy: editing the config's value must never edit the plan or a preset.
            value = _fresh(planned)
            held = getattr(config, field, _NOTHING)
            recorded = mine.get(field)
            replaced = _seen_as_users(config, field, None if held is _NOTHING else held, recorded)
            setattr(config, field, value)
            # A detached copy of what was written: an edit the user later makes in place (a key
            # of the userbuffers dict) then reads as the user's, as a new value would.
            entries[field] = (_fresh(value), replaced)
    finally:  # what was written is recorded, even when a later write raised
        write_record.record(config, "plan", entries)


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
    request: Any,
    model_config: Any,
    optimizer_config: Any,
    ddp_config: Any,
    *,
    data_parallel_size: int,
    micro_batch_size: int | None,
    global_batch_size: int | None = None,
    te_status: TEStatus | None = None,
    gpu: str | None = None,
    gpus_per_node: int | None = None,
    nvlink_domain: int | None = None,
) -> OverlapPlan:
    """Resolve a request against megatron-core configs, log the plan, write it there; returns
    the plan."""
    # The description counts GPUs; this entry point is given the data-parallel size.
    world = validate_parallel_size("data_parallel_size", data_parallel_size)
    for field in (
        "tensor_model_parallel_size",
        "context_parallel_size",
        "pipeline_model_parallel_size",
    ):
        world *= validate_parallel_size(f"cfg.model.{field}", getattr(model_config, field))
    job = describe_configs(
        model_config,
        optimizer_config,
        ddp_config,
        world_size=world,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        te_status=te_status,
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        nvlink_domain=nvlink_domain,
    )
    plan = plan_comm_overlap(request, job)
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
        written = write_record.records(config, "plan") if config is not None else None
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
        write_record.forget(config, "plan")
    return restored
