"""Resolving a :class:`~megatron.bridge.training.config.ConfigContainer` for one job.

:func:`runtime_config_update` turns the user's intent into the settings megatron-core reads, in
a fixed order:

1. mixed precision writes dtypes / FP8 / gradient-reduction precision;
2. the data-parallel size is derived from the world size;
3. comm overlap is resolved against the layout and written;
4. everything is validated, including megatron-core's own ``TransformerConfig`` checks.

The update is all or nothing: the steps run on copies of the megatron-core configs
(``transaction``), and the results are written into the user's objects only when every step
succeeded. What the user wrote in ``mixed_precision`` and ``comm_overlap`` is never changed;
what was derived (data-parallel size, the overlap plan) is readable on the container as
properties. The overlap fields the library wrote are remembered with the user's values
underneath, so that setting ``cfg.comm_overlap = None`` and updating again puts those values
back. :func:`resolve_config` runs the same steps without writing (:class:`ResolvedConfig`);
:func:`check_launch_environment` compares the live environment with what the layout needs.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from megatron.bridge.training import hardware, launch_env
from megatron.bridge.training.comm_overlap import (
    CommOverlapConfig,
    OverlapPlan,
    OverlapRefusedError,
    TEMode,
    TEStatus,
    check_layout,
    describe_configs,
    te_status,
)
from megatron.bridge.training.comm_overlap.megatron_io import (
    undo_plan,
    write_distributed_optimizer,
)
from megatron.bridge.training.comm_overlap.te import megatron_core_sees
from megatron.bridge.training.container import ConfigContainer, check_config_types
from megatron.bridge.training.env_vars import (
    DerivedEnv,
    EnvValue,
    env_var_text,
    export_env_vars,
    is_users_value,
    launcher_environment,
    plan_env_vars,
)
from megatron.bridge.training.hardware import live_gpu_sm100_or_newer as gpu_sm100_or_newer
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.mixed_precision import (
    MixedPrecisionConfig,
    get_mixed_precision_config,
)
from megatron.bridge.training.parallel_layout import data_parallel_size
from megatron.bridge.training.transaction import Staged, working_copies
from megatron.bridge.training.userbuffers import preset_fits_model, preset_names_of
from megatron.bridge.training.validators import check_int

__all__ = [
    "ResolvedConfig",
    "check_launch_environment",
    "gpu_sm100_or_newer",
    "resolve_config",
    "resolve_world_size",
    "runtime_config_update",
]

logger = logging.getLogger(__name__)


def _as_world_size(value: Any, origin: str) -> int:
    # A bad world size is a ValueError, whatever its type (the contract).
    return check_int("", f"World size from {origin}", value, type_error=ValueError)


def resolve_world_size(world_size: int | None = None) -> int:
    """The job's world size: the argument, else torch.distributed, else ``WORLD_SIZE``, else 1."""
    if world_size is not None:
        return _as_world_size(world_size, "the world_size argument")
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return _as_world_size(dist.get_world_size(), "torch.distributed")
    env = os.environ.get("WORLD_SIZE")
    if env is not None:
        try:
            value = int(env)
        except ValueError:
            raise ValueError(
                f"WORLD_SIZE={env!r} is not an integer; fix the launcher's environment."
            ) from None
        return _as_world_size(value, "the WORLD_SIZE environment variable")
    logger.info(
        "World size unknown (no world_size argument, torch.distributed not initialized, no "
        "WORLD_SIZE): assuming a single process."
    )
    return 1


def _data_parallel_size(model: Any, world_size: int) -> int:
    try:
        return data_parallel_size(
            num_gpus=world_size,
            tp_size=model.tensor_model_parallel_size,
            cp_size=model.context_parallel_size,
            pp_size=model.pipeline_model_parallel_size,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"World size {world_size} does not split into cfg.model's parallel layout: {exc}"
        ) from None


def _validate_precision_consistency(cfg: ConfigContainer) -> None:
    for name in ("bf16", "fp16"):
        model_value = getattr(cfg.model, name)
        optimizer_value = getattr(cfg.optimizer, name)
        if bool(model_value) != bool(optimizer_value):
            raise ValueError(
                f"cfg.model.{name}={model_value} but cfg.optimizer.{name}={optimizer_value}: set "
                "precision through cfg.mixed_precision (e.g. 'bf16_mixed'), which writes both."
            )


@dataclass(frozen=True, kw_only=True)
class ResolvedConfig:
    """What a :class:`ConfigContainer` resolves to for one job, computed without writing into it.

    :func:`resolve_config` makes it; :func:`runtime_config_update` writes it into the
    container; ``bridge-overlap explain --recipe`` and ``PerfEnvPlugin.from_config`` read it.
    """

    job: JobDescription
    """The job description, read from the resolved megatron-core configs."""
    plan: OverlapPlan | None
    """The overlap plan (None when the container has no comm_overlap request)."""
    data_parallel_size: int
    """Data-parallel size derived from the world size."""
    mixed_precision: MixedPrecisionConfig | None
    """The mixed precision settings applied (a preset name resolved)."""
    env_vars: dict[str, EnvValue] = field(default_factory=dict)
    """``cfg.env_vars`` for this job: what the recipe derived is derived again for this job's
    GPU, precision and layout (:func:`follow_derived_env`); the user's own values as set."""
    derived_env: DerivedEnv | None = None
    """What the recipe's derivation gives for this job (None for a container no recipe built)."""
    _staged: Any = field(default=None, repr=False, compare=False)
    """The resolved copies and what committing them needs (private)."""

    @property
    def gpu(self) -> str | None:
        """GPU model the run targets, when known."""
        return self.job.gpu

    @property
    def tp_size(self) -> int:
        """Tensor-parallel size."""
        return self.job.tp_size

    @property
    def cp_size(self) -> int:
        """Context-parallel size."""
        return self.job.cp_size

    @property
    def pp_size(self) -> int:
        """Pipeline-parallel size."""
        return self.job.pp_size

    @property
    def moe_flex_dispatcher_backend(self) -> str | None:
        """Backend of the flex MoE dispatcher (None unless the dispatcher is flex)."""
        return self.job.model.flex_backend

    @property
    def a2a_overlap(self) -> bool:
        """Whether EP all-to-all overlap runs: the plan's decision, else the model's own flag."""
        if self.plan is not None:
            return self.plan.a2a_overlap
        return bool(self._staged.model.overlap_moe_expert_parallel_comm)

    def commit(self, cfg: ConfigContainer) -> None:
        """Write this resolution into ``cfg``, the container it was resolved from; never raises.

        The megatron-core configs and the request get the resolved values attribute by attribute
        (the objects keep their identity), and ``cfg`` records the data-parallel size, the plan
        and the mixed precision applied.
        """
        self._staged.commit(cfg)
        cfg.env_vars = dict(self.env_vars)
        cfg._derived_env = self.derived_env
        cfg._resolved_mixed_precision = self.mixed_precision
        cfg._data_parallel_size = self.data_parallel_size
        cfg._overlap_plan = self.plan

    def launch_env(self, **options: Any) -> launch_env.LaunchEnvPlan:
        """The launch environment this resolution needs (``plan_launch_env_for`` options)."""
        return launch_env.plan_launch_env_for(self.job, a2a_overlap=self.a2a_overlap, **options)


def check_launch_environment(
    cfg: ConfigContainer, resolved: ResolvedConfig, *, env: Mapping[str, str] | None = None
) -> list[str]:
    """Compare the live environment (``env``, default ``os.environ``) with what the layout requires.

    ``CUDA_DEVICE_MAX_CONNECTIONS`` and HybridEP's topology must be set before CUDA starts, so a
    value that breaks an enabled feature can only be reported here, not fixed
    (``launch_env.check_live_environment`` holds the requirements; a recipe's tuned value passes).
    A value with which the job fails when it starts (``launch_env.failing_environment``: HybridEP's
    ranks per domain, the fused grouped MLP's switch) is a ``ValueError`` naming it and the fix;
    every other problem is logged as a warning, or raised as :class:`OverlapRefusedError` when
    ``cfg.comm_overlap.strict``. Returns the problems.
    """
    live = os.environ if env is None else env
    layout = launch_env.launch_layout(resolved.job)
    failing = launch_env.failing_environment(**layout, env=live)
    if failing:
        raise ValueError(
            "launch environment (the launcher's environment, else cfg.env_vars): the job fails "
            "when it starts with it: " + " | ".join(failing) + " Fix the value where it is set."
        )
    problems = _environment_problems(resolved.job, a2a_overlap=resolved.a2a_overlap, env=live)
    if problems and cfg.comm_overlap is not None and cfg.comm_overlap.strict:
        raise OverlapRefusedError("launch environment: " + " | ".join(problems))
    for problem in problems:
        logger.warning("launch environment: %s", problem)
    return problems


def _environment_problems(
    job: JobDescription, *, a2a_overlap: bool, env: Mapping[str, str]
) -> list[str]:
    """What ``env`` breaks of what the job's layout requires (``launch_env.check_live_environment``)."""
    return launch_env.check_live_environment(
        **launch_env.launch_layout(job), a2a_overlap=a2a_overlap, env=env
    )


def follow_derived_env(
    env_vars: Mapping[str, EnvValue],
    derived: DerivedEnv | None,
    job: JobDescription,
    plan: OverlapPlan | None,
    *,
    a2a_overlap: bool,
) -> tuple[dict[str, EnvValue], DerivedEnv | None]:
    """``env_vars`` for ``job``: the recipe's derived variables derived again, the user's kept.

    ``derived`` is what the recipe derived when it built the container (``RecipeSpec.build``).
    A variable still holding its derived value follows the job (another GPU, precision or
    layout derives it again; one the job no longer needs is dropped); one the user changed,
    added or removed stays as the user left it. A value the user set that no longer fits, after
    the GPU or precision changed from the recipe's, is a ``ValueError`` naming it, the change
    and the fix. Returns the variables and the new derivation (``derived`` when the job's GPU
    is unknown: nothing is derived without it).
    """
    env = dict(env_vars)
    if derived is None or job.gpu is None:
        return env, derived
    fresh = launch_env.plan_launch_env_for(job, a2a_overlap=a2a_overlap).env
    before, now = f"{derived.gpu} {derived.precision}", f"{job.gpu} {job.precision}"
    owned: dict[str, str] = {}
    for name in sorted({*derived.env, *fresh}):
        was = derived.env.get(name)
        if name in env and is_users_value(name, env[name], derived):
            _check_users_value(
                name, env[name], fresh.get(name), before, now, job, plan, a2a_overlap
            )
            continue
        if name not in env and was is not None:
            continue  # the user removed it
        if name in fresh:
            env[name] = owned[name] = fresh[name]
        else:
            env.pop(name, None)
    return env, DerivedEnv(gpu=job.gpu, precision=job.precision, env=owned)


def _check_users_value(
    name: str,
    value: EnvValue,
    needed: str | None,
    before: str,
    now: str,
    job: JobDescription,
    plan: OverlapPlan | None,
    a2a_overlap: bool,
) -> None:
    # A value of the user's is theirs to keep; it is refused only where the GPU or precision
    # changed from the recipe's and the value breaks what the new job's layout needs.
    if before == now or needed is None:
        return
    problems = _environment_problems(job, a2a_overlap=a2a_overlap, env={name: env_var_text(value)})
    if problems and name == launch_env.CUDA_DEVICE_MAX_CONNECTIONS:
        raise ValueError(
            f"cfg.env_vars[{name!r}]={value!r} was set by you, and the job changed from the "
            f"recipe's {before} to {now}: {problems[0]} Set env_vars.{name}={needed}, or remove "
            "it from cfg.env_vars so the recipe derives it for this job."
        )


def _check_named_preset(
    overlap: CommOverlapConfig, derived: DerivedEnv, job: JobDescription
) -> None:
    """Refuse a preset the user named that no longer fits once the GPU or precision changed.

    A preset the recipe chose automatically is chosen again by the plan; one the user named
    (``preset_chosen_by`` does not name it) stays theirs, and a change of GPU or precision away
    from the one it fitted is an error naming the preset, the change and the fix.
    """
    preset = overlap.tp_comm_overlap_cfg
    if not overlap.tp_comm_overlap or preset is None or isinstance(preset, str | dict):
        return
    names = preset_names_of(preset)
    chosen_by = overlap.preset_chosen_by or ""
    if not names or any(n in chosen_by for n in names):
        return
    if (derived.gpu, derived.precision) == (job.gpu, job.precision):
        return
    shape = dict(hidden_size=job.model.hidden_size, tp_size=job.tp_size)
    fitted = preset_fits_model(names, **shape, precision=derived.precision, gpu=derived.gpu)
    fits = preset_fits_model(names, **shape, precision=job.precision, gpu=job.gpu)
    if fitted is not False and fits is False:
        raise ValueError(
            f"cfg.comm_overlap.tp_comm_overlap_cfg is the preset you named ({', '.join(names)}), "
            f"tuned for {derived.gpu} {derived.precision}; the job now trains in {job.precision} "
            f"on {job.gpu}, which it does not fit. Name a preset for {job.gpu} {job.precision} "
            "(find_userbuffers_preset(...)), or let the recipe choose (preset 'auto')."
        )


def resolve_config(
    cfg: ConfigContainer,
    *,
    world_size: int | None = None,
    te: TEStatus | TEMode | None = None,
    gpu: str | None = None,
) -> ResolvedConfig:
    """Resolve ``cfg`` for a job of ``world_size`` GPUs on copies: ``cfg`` is not changed.

    The steps of :func:`runtime_config_update` (mixed precision, data-parallel size, comm
    overlap, the layout checks, megatron-core's own validation), for consumers that plan
    without building: ``bridge-overlap explain --recipe`` and ``PerfEnvPlugin.from_config``.
    ``te`` defaults to what this process sees; ``"assume"`` plans as on a cluster where
    Transformer Engine is installed (a laptop or a login node has none), and megatron-core's
    own validation then reads the assumed version too (``megatron_core_sees``). ``gpu``
    defaults to ``cfg.gpu``.
    """
    if not isinstance(cfg, ConfigContainer):
        raise TypeError(
            f"runtime_config_update expects a ConfigContainer, got {type(cfg).__name__}."
        )
    mixed = cfg.mixed_precision
    if isinstance(mixed, str):
        mixed = get_mixed_precision_config(mixed)
    elif mixed is not None and not isinstance(mixed, MixedPrecisionConfig):
        raise TypeError(
            "cfg.mixed_precision must be a MixedPrecisionConfig, a preset name or None, got "
            f"{type(mixed).__name__}."
        )
    if cfg.comm_overlap is not None and not isinstance(cfg.comm_overlap, CommOverlapConfig):
        raise TypeError(
            f"cfg.comm_overlap must be a CommOverlapConfig or None, got {type(cfg.comm_overlap).__name__}."
        )

    check_config_types(cfg)

    if isinstance(te, str):
        te = te_status(te)
    gpu = cfg.gpu if gpu is None else gpu
    if gpu is not None:
        gpu = hardware.gpu_spec(gpu).name
    work, memo = working_copies(cfg)
    # Start every run from what the user wrote, not from the previous run's derivations.
    work["model"].clear_derived()
    if cfg.comm_overlap is None:
        # No request (any more): what an earlier update wrote goes back to what it replaced.
        undo_plan(work["model"], work["optimizer"], work["ddp"])
    # A shallow copy: setup records its plan on the request object, and the user's request may
    # only see that once the whole update succeeded.
    overlap = copy.copy(cfg.comm_overlap)
    # train and mixed precision are only read (their finalize() checks change nothing).
    staged = ConfigContainer(
        model=work["model"],
        train=cfg.train,
        optimizer=work["optimizer"],
        ddp=work["ddp"],
        mixed_precision=mixed,
        comm_overlap=overlap,
    )

    if mixed is not None:
        mixed.setup(staged.model, staged.optimizer, staged.ddp)
    else:
        logger.info(
            "cfg.mixed_precision is None: the model's precision fields are used as they are."
        )

    world = resolve_world_size(world_size)
    dp = _data_parallel_size(staged.model, world)
    staged.train.finalize(dp)

    configs = (staged.model, staged.optimizer, staged.ddp)
    run = {
        "micro_batch_size": staged.train.micro_batch_size,
        "global_batch_size": staged.train.global_batch_size,
        "te_status": te,
        "gpu": gpu,
        "gpus_per_node": cfg.gpus_per_node,
        "nvlink_domain": cfg.nvlink_domain,
    }
    plan = None
    if overlap is not None:
        # setup() runs the request's finalize() checks first.
        plan = overlap.setup(*configs, data_parallel_size=dp, **run)
        job = plan.job
    else:
        job = describe_configs(*configs, world_size=world, **run)
        write_distributed_optimizer(job, staged.optimizer, staged.ddp)
        if job.distributed_optimizer_note is not None:
            logger.info(job.distributed_optimizer_note)
    # The errors megatron-core would raise only once the job starts (pipeline split, expert
    # grid, heads per TP rank, ...), raised here while nothing has been written.
    check_layout(job)

    # megatron-core's own checks read the TE version the plan is made for (te="assume": the
    # cluster's), not the TE installed here.
    with megatron_core_sees(te):
        staged.model.finalize()
    _validate_precision_consistency(staged)
    if cfg._derived_env is not None and overlap is not None:
        _check_named_preset(overlap, cfg._derived_env, job)
    resolved = ResolvedConfig(
        job=job,
        plan=plan,
        data_parallel_size=dp,
        mixed_precision=mixed,
        _staged=Staged(work=work, memo=memo, overlap=overlap),
    )
    env_vars, derived = follow_derived_env(
        cfg.env_vars, cfg._derived_env, job, plan, a2a_overlap=resolved.a2a_overlap
    )
    return dataclasses.replace(resolved, env_vars=env_vars, derived_env=derived)


def runtime_config_update(
    cfg: ConfigContainer,
    world_size: int | None = None,
    *,
    te: TEStatus | TEMode | None = None,
) -> OverlapPlan | None:
    """Resolve ``cfg`` for this job and write the result into its megatron-core configs.

    Order: mixed precision setup, data-parallel size from the world size (``world_size``
    argument, else torch.distributed, else ``WORLD_SIZE``, else 1), comm overlap finalize and
    setup, validation (megatron-core's ``TransformerConfig`` checks among them). Returns the
    overlap plan (None without ``cfg.comm_overlap``). Running it twice gives the same result.
    ``te="assume"`` resolves as on a cluster with Transformer Engine (default: this process's).

    All or nothing: every step runs on copies of ``cfg.model``, ``cfg.optimizer`` and
    ``cfg.ddp``; only when all of them succeeded are the results written back, attribute by
    attribute, into the user's objects (which keep their identity; a value the update left as
    it was stays the user's own object). When a step raises, every section of ``cfg`` and its
    ``data_parallel_size`` / ``overlap_plan`` / ``resolved_mixed_precision`` are as before.

    Overlap fields are undone, not left behind: every megatron-core config records what the
    overlap setup wrote to it, with the user's value underneath (``apply_plan``). A later
    update reads the user's values through that record, and with ``cfg.comm_overlap = None`` it
    puts them back (``undo_plan``). A field whose current value differs from what the library
    last wrote was changed by the user since: that value is the user's new one and is kept. (A
    user value equal to the library's is indistinguishable from it.)

    Environment (``cfg.env_vars``): each variable the process environment does not set yet is
    exported (``os.environ.setdefault`` semantics: launcher and shell values win), recorded on
    ``cfg.applied_env_vars`` and logged at INFO with those kept from the environment. Upstream
    Megatron-Bridge exports them first thing; here they are checked first (names, values, no
    secrets, and, through :func:`check_launch_environment`, the environment they would give
    against the resolved layout: a value the job fails with when it starts is a ``ValueError``,
    any other contradiction warns, or raises ``OverlapRefusedError`` with ``strict``) and
    exported last, once every step succeeded, so a failed update leaves
    ``os.environ`` as it was too. No step of the update reads these variables (CUDA starts
    later, at model build), so they are still in place before anything reads them.
    """
    # The environment this job will have: the live one, plus the recipe's defaults where it has
    # none. Computed and checked first, exported only once every step succeeded.
    # A variable this process exported for an earlier job is not the launcher's: it is replaced.
    environ = launcher_environment(os.environ)
    plan_env_vars(cfg.env_vars, environ)  # the names and values are checked before anything runs
    resolved = resolve_config(cfg, world_size=world_size, te=te)
    env_plan = plan_env_vars(resolved.env_vars, environ)
    check_launch_environment(cfg, resolved, env={**environ, **env_plan.from_recipe})

    # Every step succeeded: from here on nothing raises.
    export_env_vars(env_plan)
    cfg._applied_env_vars = env_plan
    resolved.commit(cfg)
    return resolved.plan
