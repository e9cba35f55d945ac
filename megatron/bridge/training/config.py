"""The training configuration a recipe returns, and its resolution at model-build time.

A recipe returns a :class:`ConfigContainer`: the model provider (a megatron-core
``TransformerConfig``), megatron-core's ``OptimizerConfig`` and
``DistributedDataParallelConfig``, plus the training loop sizes, mixed precision and comm
overlap. :func:`runtime_config_update` turns the user's intent into the settings megatron-core
reads, in a fixed order:

1. mixed precision writes dtypes / FP8 / gradient-reduction precision;
2. the data-parallel size is derived from the world size;
3. comm overlap is resolved against the layout and written;
4. everything is validated, including megatron-core's own ``TransformerConfig`` checks.

The update is all or nothing: the steps run on copies of the megatron-core configs, and the
results are written into the user's objects only when every step succeeded. What the user wrote
in ``mixed_precision`` and ``comm_overlap`` is never changed; what was derived (data-parallel
size, the overlap plan) is readable on the container as properties. The overlap fields the
library wrote are remembered with the user's values underneath, so that setting
``cfg.comm_overlap = None`` and updating again puts those values back.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.models.gpt_provider import GPTModelProvider
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
from megatron.bridge.training.hardware import live_gpu_sm100_or_newer as gpu_sm100_or_newer
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.mixed_precision import (
    MixedPrecisionConfig,
    get_mixed_precision_config,
)
from megatron.bridge.training.parallel_layout import data_parallel_size
from megatron.bridge.training.validators import check_int
from megatron.bridge.training.value_types import ConfigValueError, check_fields

__all__ = [
    "AppliedEnvVars",
    "ConfigContainer",
    "EnvValue",
    "ResolvedConfig",
    "TrainingConfig",
    "check_config_types",
    "check_env_vars",
    "check_launch_environment",
    "configs_as_written",
    "default_optimizer",
    "gpu_sm100_or_newer",
    "resolve_config",
    "resolve_world_size",
    "runtime_config_update",
]

logger = logging.getLogger(__name__)


def default_optimizer(
    *, lr: float = 3e-4, min_lr: float = 3e-5, use_distributed_optimizer: bool = False
) -> OptimizerConfig:
    """The Adam optimizer config every recipe and a bare ``ConfigContainer`` start from.

    Weight decay 0.1, betas 0.9 / 0.95, eps 1e-5, gradient clipping at 1.0 (upstream
    Megatron-Bridge's ``distributed_fused_adam_with_cosine_annealing`` values).
    """
    return OptimizerConfig(
        optimizer="adam",
        lr=lr,
        min_lr=min_lr,
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_eps=1e-5,
        clip_grad=1.0,
        use_distributed_optimizer=use_distributed_optimizer,
    )


@dataclass(kw_only=True)
class TrainingConfig:
    """Training-loop sizes."""

    micro_batch_size: int = 1
    """Samples per forward/backward pass on one data-parallel rank."""
    global_batch_size: int | None = None
    """Samples per optimizer step across all data-parallel ranks; None means micro_batch_size x DP."""
    train_iters: int | None = None
    """Optimizer steps to train for."""

    def finalize(self, data_parallel_size: int) -> None:
        """Check the sizes against the data-parallel size; raises naming the field and the fix."""
        # Every bad value of a size, a wrong type included, is a ValueError (the contract).
        owner = "TrainingConfig"
        mbs = check_int(owner, "micro_batch_size", self.micro_batch_size, type_error=ValueError)
        gbs = check_int(
            owner,
            "global_batch_size",
            self.global_batch_size,
            optional=True,
            hint="None means micro_batch_size x data-parallel size.",
            type_error=ValueError,
        )
        check_int(owner, "train_iters", self.train_iters, optional=True, type_error=ValueError)
        if gbs is not None and gbs % (mbs * data_parallel_size):
            raise ValueError(
                f"TrainingConfig.global_batch_size={gbs} is not divisible by micro_batch_size "
                f"({mbs}) x data-parallel size ({data_parallel_size}) = {mbs * data_parallel_size}; "
                "change one of them."
            )


EnvValue = str | int | float | bool
"""A value ``ConfigContainer.env_vars`` may hold: a scalar, exported as ``str(value)``."""

#: Names that look like credentials. Configs are serialized (``to_yaml``, ``write_run_config``)
#: and shared with the run's results, so a secret has no place in one: pass it on the launcher.
_SECRET_NAME = re.compile(r"(_API_KEY$|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


def env_var_text(value: EnvValue) -> str:
    """The string a scalar ``env_vars`` value is exported as.

    ``str(value)``, as upstream Megatron-Bridge's ``apply_environment_variables`` writes it: a
    bool is spelled ``"True"`` / ``"False"`` (Python's spelling, not ``"1"`` / ``"true"``), an int
    ``"8"``, a float its ``repr`` (``"0.5"``). A variable whose reader wants ``1``/``0`` gets an
    int in the recipe.
    """
    return str(value)


#: Variables read as integers, by name: (smallest, largest or None, who reads it). Their readers
#: parse the text as a number and ignore (CUDA) or misread anything else, so a value that is not
#: an integer in range is refused where it is set. Bounds as ``launch_env`` plans them.
_INTEGER_ENV_VARS: dict[str, tuple[int, int | None, str]] = {
    launch_env.CUDA_DEVICE_MAX_CONNECTIONS: (1, 32, "CUDA (hardware work queues, 1 to 32)"),
    launch_env.NVTE_FWD_LAYERNORM_SM_MARGIN: (0, None, "Transformer Engine (SMs left free)"),
    launch_env.NVTE_BWD_LAYERNORM_SM_MARGIN: (0, None, "Transformer Engine (SMs left free)"),
    launch_env.NCCL_P2P_NET_CHUNKSIZE: (2, None, "NCCL (bytes per P2P network chunk)"),
}
_INTEGER_TEXT = re.compile(r"-?[0-9]+")


def _check_integer_env_var(owner: str, name: str, value: EnvValue, text: str) -> None:
    minimum, maximum, reader = _INTEGER_ENV_VARS[name]
    bounds = f">= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
    # A bool is exported as "True"/"False" and a float as "8.0": neither is an integer's text.
    if _INTEGER_TEXT.fullmatch(text) is None or isinstance(value, bool | float):
        raise ConfigValueError(
            f"{owner}.{name}",
            f"expected an integer {bounds}, got {type(value).__name__} {value!r}; {reader} "
            "reads it as an integer.",
        )
    number = int(text)
    if number < minimum or (maximum is not None and number > maximum):
        raise ConfigValueError(
            f"{owner}.{name}", f"expected an integer {bounds}, got {number}; {reader}."
        )


def check_env_vars(env_vars: object, *, owner: str = "ConfigContainer.env_vars") -> dict[str, str]:
    """Check a recipe's environment variables; return them as the strings that would be exported.

    ``TypeError`` for a non-mapping, a non-str name or a non-scalar value (naming the key);
    ``ValueError`` for an empty name, a name with ``=`` or a NUL (the OS refuses them), a value
    with a NUL, and a name that looks like a secret (``*_API_KEY``, ``*TOKEN*``, ``*SECRET*``,
    ``*PASSWORD*``, any case): configs are serialized and shared, so secrets go on the launcher.
    A variable read as an integer (``CUDA_DEVICE_MAX_CONNECTIONS`` 1-32, the
    ``NVTE_*_LAYERNORM_SM_MARGIN`` pair >= 0, ``NCCL_P2P_NET_CHUNKSIZE`` >= 2) must be an int
    or the text of one in that range: ``value_types.ConfigValueError`` (a ``ValueError``) naming
    ``owner.NAME`` otherwise. Every source of ``env_vars`` (Python, ``from_yaml``,
    ``env_vars.NAME=VALUE`` overrides) meets it.
    """
    if not isinstance(env_vars, Mapping):
        raise TypeError(
            f"{owner} must be a dict of variable name to str/int/float/bool, got "
            f"{type(env_vars).__name__}."
        )
    out: dict[str, str] = {}
    for name, value in env_vars.items():
        if not isinstance(name, str):
            raise TypeError(
                f"{owner} key {name!r} is a {type(name).__name__}; variable names are str."
            )
        if not name or "=" in name or "\0" in name:
            raise ValueError(
                f"{owner} key {name!r} is not a valid environment variable name (empty, or "
                "holds '=' or NUL)."
            )
        if _SECRET_NAME.search(name):
            raise ValueError(
                f"{owner}[{name!r}] looks like a secret (*_API_KEY, *TOKEN*, *SECRET*, "
                "*PASSWORD*): configs are serialized and shared, so set it on the launcher "
                "(executor env, shell) instead of in the config."
            )
        if not isinstance(value, str | int | float | bool):
            raise TypeError(
                f"{owner}[{name!r}] must be a str, int, float or bool, got "
                f"{type(value).__name__} ({value!r})."
            )
        text = env_var_text(value)
        if "\0" in text:
            raise ValueError(f"{owner}[{name!r}] holds a NUL character; the OS refuses it.")
        if name in _INTEGER_ENV_VARS:
            _check_integer_env_var(owner, name, value, text)
        out[name] = text
    return out


def check_config_types(cfg: ConfigContainer, *, where: str = "cfg") -> None:
    """Check every field of ``cfg``'s sections against its annotation; ``where`` prefixes keys.

    The check every source of values meets (``value_types.check_field``): a value set in Python
    here, as ``from_yaml`` and ``apply_overrides`` do for theirs. Raises
    ``value_types.ConfigValueError`` (a ``TypeError`` and a ``ValueError``) naming the key:
    ``cfg.model.sequence_parallel: expected bool, got str 'yes'``. ``runtime_config_update``,
    ``resolve_config`` and ``serialization.to_yaml`` run it first.
    """
    for name in ("model", "train", "optimizer", "ddp", "mixed_precision", "comm_overlap"):
        section = getattr(cfg, name)
        if dataclasses.is_dataclass(section) and not isinstance(section, type):
            check_fields(section, f"{where}.{name}")


@dataclass(frozen=True, kw_only=True)
class AppliedEnvVars:
    """What the last ``runtime_config_update`` did with ``cfg.env_vars``."""

    from_recipe: dict[str, str]
    """Variables this update exported, from ``cfg.env_vars`` (they were not set before)."""
    kept_from_environment: dict[str, str]
    """Variables ``cfg.env_vars`` names that were already set: the environment's value won
    (launcher and shell values beat recipe defaults). Name -> the value kept."""
    recipe_values: dict[str, str]
    """Every ``cfg.env_vars`` entry as the string the recipe asked for."""

    def overridden(self) -> dict[str, tuple[str, str]]:
        """Kept variables whose value differs from the recipe's: name -> (kept, recipe's)."""
        return {
            name: (live, self.recipe_values[name])
            for name, live in self.kept_from_environment.items()
            if live != self.recipe_values[name]
        }


def _plan_env_vars(env_vars: object, environ: Mapping[str, str]) -> AppliedEnvVars:
    wanted = check_env_vars(env_vars)
    return AppliedEnvVars(
        from_recipe={n: v for n, v in wanted.items() if n not in environ},
        kept_from_environment={n: environ[n] for n in wanted if n in environ},
        recipe_values=wanted,
    )


@dataclass(kw_only=True)
class ConfigContainer:
    """Everything a recipe sets for one training run.

    ``mixed_precision`` may be a preset name (see ``get_mixed_precision_config``); a name given
    at construction becomes the preset object, so ``cfg.mixed_precision.fp8_param_gather = ...``
    works on it.
    """

    model: GPTModelProvider
    """Model provider: a megatron-core TransformerConfig that builds the model."""
    train: TrainingConfig = field(default_factory=TrainingConfig)
    """Training-loop sizes (micro / global batch size, iterations)."""
    optimizer: OptimizerConfig = field(default_factory=default_optimizer)
    """megatron-core optimizer config (Adam, lr 3e-4 by default)."""
    ddp: DistributedDataParallelConfig = field(default_factory=DistributedDataParallelConfig)
    """megatron-core DistributedDataParallel config."""
    mixed_precision: MixedPrecisionConfig | str | None = None
    """Precision settings, a preset name, or None to leave the model's precision fields as they are."""
    comm_overlap: CommOverlapConfig | None = None
    """Communication overlap request, or None to leave megatron-core's overlap fields as they are."""
    gpu: str | None = None
    """GPU model the run targets (a name from the GPU catalogue, e.g. "h100"); recipes set it.
    None: unknown until the job runs (the build-time check then reads the visible GPU)."""
    env_vars: dict[str, EnvValue] = field(default_factory=dict)
    """Environment defaults of the run, exported by ``runtime_config_update`` where the process
    environment does not already set them (launcher and shell values win). Values are exported
    as ``str(value)`` (a bool as "True"/"False", as upstream Megatron-Bridge). Recipes fill it
    from their launch plan (what ``PerfEnvPlugin`` exports). No secrets: see ``check_env_vars``."""

    _data_parallel_size: int | None = field(default=None, init=False, repr=False, compare=False)
    _overlap_plan: OverlapPlan | None = field(default=None, init=False, repr=False, compare=False)
    _resolved_mixed_precision: MixedPrecisionConfig | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _applied_env_vars: AppliedEnvVars | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if isinstance(self.mixed_precision, str):
            self.mixed_precision = get_mixed_precision_config(self.mixed_precision)
        check_env_vars(self.env_vars)

    @property
    def applied_env_vars(self) -> AppliedEnvVars | None:
        """What the last runtime_config_update exported from ``env_vars`` and what it kept."""
        return self._applied_env_vars

    @property
    def data_parallel_size(self) -> int | None:
        """Data-parallel size derived by the last runtime_config_update (None before it)."""
        return self._data_parallel_size

    @property
    def overlap_plan(self) -> OverlapPlan | None:
        """Comm-overlap plan of the last runtime_config_update (None before it or without comm_overlap)."""
        return self._overlap_plan

    @property
    def resolved_mixed_precision(self) -> MixedPrecisionConfig | None:
        """The mixed precision settings the last runtime_config_update applied (a preset name resolved)."""
        return self._resolved_mixed_precision


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


#: The megatron-core configs runtime_config_update writes, by their ConfigContainer attribute.
_SECTIONS = ("model", "optimizer", "ddp")

_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    # Identity, else == between values of one type that answers a plain True: True and 1 are
    # not the same setting, and == on tensors or arrays answers no question asked here.
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        return (a == b) is True
    except Exception:
        return False


def _field_names(config: Any) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(config))


def _field_values(config: Any) -> dict[str, Any]:
    return {name: getattr(config, name) for name in _field_names(config)}


def _relink(value: Any, mapping: dict[int, Any]) -> Any:
    # Swaps each object ``mapping`` knows for its counterpart, rebuilding the plain containers
    # on the way to one; everything else stays the very same object (a list that is also a
    # field value keeps its identity, a sentinel such as a bare object() stays itself).
    mapped = mapping.get(id(value), _MISSING)
    if mapped is not _MISSING:
        return mapped
    if type(value) is dict:
        items = [(_relink(k, mapping), _relink(v, mapping)) for k, v in value.items()]
        if any(
            k is not k0 or v is not v0
            for (k, v), (k0, v0) in zip(items, value.items(), strict=True)
        ):
            return dict(items)
    elif type(value) in (list, tuple, set, frozenset):
        elements = [_relink(v, mapping) for v in value]
        if any(v is not v0 for v, v0 in zip(elements, value, strict=True)):
            return type(value)(elements)
    return value


def _working_copies(cfg: ConfigContainer) -> tuple[dict[str, Any], dict[int, Any]]:
    """Copies of cfg's megatron-core configs, and the memo: id(original value) -> its copy.

    Field values are deep-copied, since megatron-core's validation edits some in place (it
    appends to lists). Other attributes are bookkeeping kept next to the fields by their owners
    (the GPT provider's record of derived fields, comm overlap's record of its writes): they
    are rebuilt to point at the copied field values they refer to, everything else in them is
    shared. One memo for all three configs keeps values they share shared in the copies.
    """
    memo: dict[int, Any] = {}
    for name in _SECTIONS:
        for value in _field_values(getattr(cfg, name)).values():
            # Callables are shared, not copied: no step changes one in place, a copied
            # functools.partial init method no longer equals the user's, and a bound method (the
            # grad-sync hooks a training loop sets on the model config) would copy its model.
            if callable(value):
                memo[id(value)] = value
    copies = {}
    for name in _SECTIONS:
        work = copy.copy(getattr(cfg, name))
        for field_name, value in _field_values(work).items():
            # A value deepcopy refuses (a handle on a live resource) stays shared, as copy.copy
            # left it: the steps assign such fields, none changes an object like that in place.
            with contextlib.suppress(Exception):
                setattr(work, field_name, copy.deepcopy(value, memo))
        copies[name] = work
    # After every field is copied, so that a record on one config may refer to another's values.
    for work in copies.values():
        names = set(_field_names(work))
        for attr, value in vars(work).items():
            if attr not in names:
                object.__setattr__(work, attr, _relink(value, memo))
    return copies, memo


def configs_as_written(cfg: ConfigContainer) -> dict[str, Any]:
    """Copies of ``cfg.model``, ``cfg.optimizer`` and ``cfg.ddp`` as the user wrote them.

    Keyed by section name. The fields an earlier :func:`runtime_config_update` derived are
    cleared and the overlap fields it wrote are given back their user values (``undo_plan``);
    what mixed precision wrote stays, as it writes the same values again. ``cfg`` is not
    changed. ``serialization.to_yaml`` writes these.
    """
    work, _ = _working_copies(cfg)
    work["model"].clear_derived()
    undo_plan(work["model"], work["optimizer"], work["ddp"])
    return work


def _commit(original: Any, work: Any, memo: dict[int, Any]) -> None:
    """Write ``work``'s fields, then its other attributes, into ``original`` (same object).

    A field value the update left as it was stays the user's own object instead of its copy,
    and the bookkeeping attributes are pointed at whichever of the two the field now holds.
    """
    back: dict[int, Any] = {}
    for name, new in _field_values(work).items():
        old = getattr(original, name)
        if new is old:
            continue
        if memo.get(id(old), _MISSING) is new and _same(old, new):
            back[id(new)] = old
            continue
        setattr(original, name, new)
    names = set(_field_names(work))
    theirs, ours = vars(original), vars(work)
    for attr in theirs.keys() - ours.keys():
        object.__delattr__(original, attr)
    for attr, value in ours.items():
        if attr not in names:
            # object.__setattr__, as their owners write them: not fields, no config checks. A
            # record that refers to a field value by identity must see the object now there.
            object.__setattr__(original, attr, _relink(value, back))


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
        staged = self._staged
        for name, config in staged.work.items():
            _commit(getattr(cfg, name), config, staged.memo)
        if staged.overlap is not None:
            _commit(cfg.comm_overlap, staged.overlap, {})
        cfg._resolved_mixed_precision = self.mixed_precision
        cfg._data_parallel_size = self.data_parallel_size
        cfg._overlap_plan = self.plan

    def launch_env(self, **options: Any) -> launch_env.LaunchEnvPlan:
        """The launch environment this resolution needs (``plan_launch_env_for`` options)."""
        return launch_env.plan_launch_env_for(self.job, a2a_overlap=self.a2a_overlap, **options)


def check_launch_environment(
    cfg: ConfigContainer, resolved: ResolvedConfig, *, env: Mapping[str, str] | None = None
) -> list[str]:
    """Compare the live environment (``env``, default ``os.environ``) with what the layout needs.

    ``CUDA_DEVICE_MAX_CONNECTIONS`` must be set before CUDA starts, so a wrong value can only be
    reported here, not fixed: each problem is logged as a warning, or raised as
    :class:`OverlapRefusedError` when ``cfg.comm_overlap.strict``. The GPU generation is the
    visible GPU's, else the one ``cfg.gpu`` names, else unknown (generation rules skipped).
    Returns the problems.
    """
    f = resolved.job
    live = gpu_sm100_or_newer()
    if live is None and f.gpu is not None:
        live = hardware.gpu_spec(f.gpu).sm100_or_newer
    plan = resolved.plan
    problems = launch_env.check_live_environment(
        tp_comm_overlap=bool(plan is not None and plan.value("tp_comm_overlap")),
        tp_size=f.tp_size,
        cp_size=f.cp_size,
        dp_size=f.dp_size,
        pp_size=f.pp_size,
        a2a_overlap=resolved.a2a_overlap,
        moe_flex_dispatcher_backend=f.model.flex_backend,
        gpu_sm100_or_newer=live,
        env=os.environ if env is None else env,
    )
    if problems and cfg.comm_overlap is not None and cfg.comm_overlap.strict:
        raise OverlapRefusedError("launch environment: " + " | ".join(problems))
    for problem in problems:
        logger.warning("launch environment: %s", problem)
    return problems


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
    Transformer Engine is installed (a laptop or a login node has none). ``gpu`` defaults to
    ``cfg.gpu``.
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
    work, memo = _working_copies(cfg)
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

    plan = None
    if overlap is not None:
        # setup() runs the request's finalize() checks first.
        plan = overlap.setup(
            staged.model,
            staged.optimizer,
            staged.ddp,
            data_parallel_size=dp,
            micro_batch_size=staged.train.micro_batch_size,
            global_batch_size=staged.train.global_batch_size,
            te_status=te,
            gpu=gpu,
        )
        job = plan.job
    else:
        job = describe_configs(
            staged.model,
            staged.optimizer,
            staged.ddp,
            world_size=world,
            micro_batch_size=staged.train.micro_batch_size,
            global_batch_size=staged.train.global_batch_size,
            te_status=te,
            gpu=gpu,
        )
        write_distributed_optimizer(job, staged.optimizer, staged.ddp)
        if job.distributed_optimizer_note is not None:
            logger.info(job.distributed_optimizer_note)
    # The errors megatron-core would raise only once the job starts (pipeline split, expert
    # grid, heads per TP rank, ...), raised here while nothing has been written.
    check_layout(job)

    staged.model.finalize()
    _validate_precision_consistency(staged)
    return ResolvedConfig(
        job=job,
        plan=plan,
        data_parallel_size=dp,
        mixed_precision=mixed,
        _staged=_Staged(work=work, memo=memo, overlap=overlap),
    )


def _export_env_vars(applied: AppliedEnvVars) -> None:
    for name, value in applied.from_recipe.items():
        os.environ.setdefault(name, value)
    if not applied.recipe_values:
        return
    kept = ", ".join(
        f"{n}={v}"
        + (f" (recipe: {applied.recipe_values[n]})" if v != applied.recipe_values[n] else "")
        for n, v in applied.kept_from_environment.items()
    )
    logger.info(
        "cfg.env_vars: set from the recipe: %s; kept from the environment: %s.",
        ", ".join(f"{n}={v}" for n, v in applied.from_recipe.items()) or "none",
        kept or "none",
    )


@dataclass(frozen=True)
class _Staged:
    work: dict[str, Any]
    memo: dict[int, Any]
    overlap: CommOverlapConfig | None

    @property
    def model(self) -> Any:
        return self.work["model"]


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
    against the resolved layout: a contradiction warns, or raises ``OverlapRefusedError`` with
    ``strict``) and exported last, once every step succeeded, so a failed update leaves
    ``os.environ`` as it was too. No step of the update reads these variables (CUDA starts
    later, at model build), so they are still in place before anything reads them.
    """
    # The environment this job will have: the live one, plus the recipe's defaults where it has
    # none. Computed and checked first, exported only once every step succeeded.
    env_plan = _plan_env_vars(cfg.env_vars, os.environ)
    resolved = resolve_config(cfg, world_size=world_size, te=te)
    check_launch_environment(cfg, resolved, env={**os.environ, **env_plan.from_recipe})

    # Every step succeeded: from here on nothing raises.
    _export_env_vars(env_plan)
    cfg._applied_env_vars = env_plan
    resolved.commit(cfg)
    return resolved.plan
