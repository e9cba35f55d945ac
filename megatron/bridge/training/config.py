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

What the user wrote in ``mixed_precision`` and ``comm_overlap`` is never changed; what was
derived (data-parallel size, the overlap plan) is readable on the container as properties.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training import launch_env
from megatron.bridge.training.comm_overlap import (
    CommOverlapConfig,
    OverlapPlan,
    OverlapRefusedError,
)
from megatron.bridge.training.mixed_precision import (
    MixedPrecisionConfig,
    get_mixed_precision_config,
)

__all__ = [
    "ConfigContainer",
    "TrainingConfig",
    "resolve_world_size",
    "runtime_config_update",
]

logger = logging.getLogger(__name__)


def _default_optimizer() -> OptimizerConfig:
    return OptimizerConfig(
        optimizer="adam",
        lr=3e-4,
        min_lr=3e-5,
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_eps=1e-8,
        clip_grad=1.0,
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
        mbs = self.micro_batch_size
        if type(mbs) is not int or mbs < 1:
            raise ValueError(f"TrainingConfig.micro_batch_size must be an int >= 1, got {mbs!r}.")
        gbs = self.global_batch_size
        if gbs is not None:
            if type(gbs) is not int or gbs < 1:
                raise ValueError(
                    f"TrainingConfig.global_batch_size must be an int >= 1, got {gbs!r}."
                )
            if gbs % (mbs * data_parallel_size):
                raise ValueError(
                    f"TrainingConfig.global_batch_size={gbs} is not divisible by micro_batch_size "
                    f"({mbs}) x data-parallel size ({data_parallel_size}) = {mbs * data_parallel_size}; "
                    "change one of them."
                )
        if self.train_iters is not None and (
            type(self.train_iters) is not int or self.train_iters < 1
        ):
            raise ValueError(
                f"TrainingConfig.train_iters must be an int >= 1, got {self.train_iters!r}."
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
    optimizer: OptimizerConfig = field(default_factory=_default_optimizer)
    """megatron-core optimizer config (Adam, lr 3e-4 by default)."""
    ddp: DistributedDataParallelConfig = field(default_factory=DistributedDataParallelConfig)
    """megatron-core DistributedDataParallel config."""
    mixed_precision: MixedPrecisionConfig | str | None = None
    """Precision settings, a preset name, or None to leave the model's precision fields as they are."""
    comm_overlap: CommOverlapConfig | None = None
    """Communication overlap request, or None to leave megatron-core's overlap fields as they are."""

    _data_parallel_size: int | None = field(default=None, init=False, repr=False, compare=False)
    _overlap_plan: OverlapPlan | None = field(default=None, init=False, repr=False, compare=False)
    _resolved_mixed_precision: MixedPrecisionConfig | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if isinstance(self.mixed_precision, str):
            self.mixed_precision = get_mixed_precision_config(self.mixed_precision)

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
    if type(value) is not int or value < 1:
        raise ValueError(f"World size from {origin} must be an int >= 1, got {value!r}.")
    return value


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
        return launch_env.data_parallel_size(
            num_gpus=world_size,
            tp_size=model.tensor_model_parallel_size,
            cp_size=model.context_parallel_size,
            pp_size=model.pipeline_model_parallel_size,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"World size {world_size} does not split into cfg.model's parallel layout: {exc}"
        ) from None


def _sync_distributed_optimizer(cfg: ConfigContainer) -> None:
    # Recipes (and the seed) set the flag on the DDP config only; megatron-core reads it from both
    # configs, and their defaults are False, so a True on either side is the user's request.
    ddp_flag = cfg.ddp.use_distributed_optimizer
    opt_flag = cfg.optimizer.use_distributed_optimizer
    for name, value in (("ddp", ddp_flag), ("optimizer", opt_flag)):
        if type(value) is not bool:
            raise TypeError(
                f"cfg.{name}.use_distributed_optimizer must be True or False, got {value!r}."
            )
    if ddp_flag != opt_flag:
        source = "ddp" if ddp_flag else "optimizer"
        target = "optimizer" if ddp_flag else "ddp"
        logger.info(
            "cfg.%s.use_distributed_optimizer=True: setting cfg.%s.use_distributed_optimizer=True "
            "to match (megatron-core reads both).",
            source,
            target,
        )
        cfg.ddp.use_distributed_optimizer = True
        cfg.optimizer.use_distributed_optimizer = True


def _validate_precision_consistency(cfg: ConfigContainer) -> None:
    for name in ("bf16", "fp16"):
        model_value = getattr(cfg.model, name)
        optimizer_value = getattr(cfg.optimizer, name)
        if bool(model_value) != bool(optimizer_value):
            raise ValueError(
                f"cfg.model.{name}={model_value} but cfg.optimizer.{name}={optimizer_value}: set "
                "precision through cfg.mixed_precision (e.g. 'bf16_mixed'), which writes both."
            )


def gpu_sm100_or_newer() -> bool | None:
    """Whether the visible GPU is Blackwell (SM100) or newer; None when no GPU is visible."""
    import torch

    if not torch.cuda.is_available():
        return None
    major, _minor = torch.cuda.get_device_capability()
    return major >= 10


def check_launch_environment(
    cfg: ConfigContainer, plan: OverlapPlan, data_parallel_size: int
) -> list[str]:
    """Compare the live environment with what the resolved plan needs.

    ``CUDA_DEVICE_MAX_CONNECTIONS`` must be set before CUDA starts, so a wrong value can only be
    reported here, not fixed: each problem is logged as a warning, or raised as
    :class:`OverlapRefusedError` when ``cfg.comm_overlap.strict``. Returns the problems.
    """
    model = cfg.model
    problems = launch_env.check_live_environment(
        tp_comm_overlap=bool(plan.value("tp_comm_overlap")),
        tp_size=model.tensor_model_parallel_size,
        cp_size=model.context_parallel_size,
        dp_size=data_parallel_size,
        pp_size=model.pipeline_model_parallel_size,
        a2a_overlap=bool(plan.value("overlap_moe_expert_parallel_comm")),
        # megatron-core fills the backend in for every model; it matters only with flex dispatch.
        moe_flex_dispatcher_backend=(
            model.moe_flex_dispatcher_backend if model.moe_token_dispatcher_type == "flex" else None
        ),
        gpu_sm100_or_newer=gpu_sm100_or_newer(),
        env=os.environ,
    )
    if problems and cfg.comm_overlap is not None and cfg.comm_overlap.strict:
        raise OverlapRefusedError("launch environment: " + " | ".join(problems))
    for problem in problems:
        logger.warning("launch environment: %s", problem)
    return problems


def runtime_config_update(
    cfg: ConfigContainer, world_size: int | None = None
) -> OverlapPlan | None:
    """Resolve ``cfg`` for this job and write the result into its megatron-core configs.

    Order: mixed precision setup, data-parallel size from the world size (``world_size``
    argument, else torch.distributed, else ``WORLD_SIZE``, else 1), comm overlap finalize and
    setup, validation (megatron-core's ``TransformerConfig`` checks among them). Returns the
    overlap plan (None without ``cfg.comm_overlap``). Running it twice gives the same result.
    """
    if not isinstance(cfg, ConfigContainer):
        raise TypeError(
            f"runtime_config_update expects a ConfigContainer, got {type(cfg).__name__}."
        )

    # Start every run from what the user wrote, not from the previous run's derivations.
    cfg.model.clear_derived()

    mixed = cfg.mixed_precision
    if isinstance(mixed, str):
        mixed = get_mixed_precision_config(mixed)
    elif mixed is not None and not isinstance(mixed, MixedPrecisionConfig):
        raise TypeError(
            "cfg.mixed_precision must be a MixedPrecisionConfig, a preset name or None, got "
            f"{type(mixed).__name__}."
        )
    if mixed is not None:
        mixed.setup(cfg.model, cfg.optimizer, cfg.ddp)
    else:
        logger.info(
            "cfg.mixed_precision is None: the model's precision fields are used as they are."
        )

    world = resolve_world_size(world_size)
    dp = _data_parallel_size(cfg.model, world)
    cfg.train.finalize(dp)

    _sync_distributed_optimizer(cfg)

    plan = None
    if cfg.comm_overlap is not None:
        if not isinstance(cfg.comm_overlap, CommOverlapConfig):
            raise TypeError(
                f"cfg.comm_overlap must be a CommOverlapConfig or None, got {type(cfg.comm_overlap).__name__}."
            )
        # setup() runs the request's finalize() checks first.
        plan = cfg.comm_overlap.setup(
            cfg.model,
            cfg.optimizer,
            cfg.ddp,
            data_parallel_size=dp,
            micro_batch_size=cfg.train.micro_batch_size,
        )

    cfg.model.finalize()
    _validate_precision_consistency(cfg)
    if plan is not None:
        check_launch_environment(cfg, plan, dp)

    cfg._resolved_mixed_precision = mixed
    cfg._data_parallel_size = dp
    cfg._overlap_plan = plan
    return plan
