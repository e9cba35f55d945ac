"""The training configuration a recipe returns: :class:`ConfigContainer` and its sections.

A recipe returns a :class:`ConfigContainer`: the model provider (a megatron-core
``TransformerConfig``), megatron-core's ``OptimizerConfig`` and
``DistributedDataParallelConfig``, plus the training loop sizes (:class:`TrainingConfig`), mixed
precision, comm overlap and the run's environment defaults. :func:`check_config_types` checks
every section's fields against their annotations; the container reads and writes itself as a
document or YAML (``to_dict``/``from_dict``/``to_yaml``/``from_yaml``, through
``config_codec``). Users import these names from ``megatron.bridge.training.config``, which
adds ``runtime_config_update``; resolving the container for a job lives in ``resolve``, the
copies it works on in ``transaction``, the environment variables' checks in ``env_vars``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training import config_codec
from megatron.bridge.training.comm_overlap import CommOverlapConfig, OverlapPlan
from megatron.bridge.training.env_vars import (
    AppliedEnvVars,
    DerivedEnv,
    EnvValue,
    check_env_vars,
)
from megatron.bridge.training.job import CLUSTER_FIELDS, check_cluster_field
from megatron.bridge.training.mixed_precision import (
    MixedPrecisionConfig,
    get_mixed_precision_config,
)
from megatron.bridge.training.transaction import configs_as_written
from megatron.bridge.training.validators import check_int
from megatron.bridge.training.value_types import check_fields

__all__ = [
    "AppliedEnvVars",
    "ConfigContainer",
    "EnvValue",
    "TrainingConfig",
    "check_config_types",
    "check_env_vars",
    "default_optimizer",
]


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
    gpus_per_node: int | None = None
    """GPUs per node of the cluster the run targets (None: the GPU catalogue's for ``gpu``)."""
    nvlink_domain: int | None = None
    """Consecutive ranks one NVLink domain of that cluster connects (None: the GPU catalogue's,
    e.g. 72 on GB200 NVL72, else a node): whether a TP or EP group stays on NVLink, and HybridEP's
    ``NVLINK_DOMAIN_SIZE``. Recipes set both from their job description."""
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
    _derived_env: DerivedEnv | None = field(default=None, init=False, repr=False, compare=False)
    """What the recipe derived into ``env_vars`` (``RecipeSpec.build``); resolving follows it."""

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

    def to_dict(self) -> dict[str, Any]:
        """This container as a document of plain values (``config_codec`` says what is written).

        The sections as the user wrote them: what an earlier ``runtime_config_update`` derived
        or wrote is taken back (on copies), except the precision fields mixed precision writes
        again; what the recipe derived into ``env_vars`` is recorded (``derived_env``), so the
        document resolves to the same plan and follows a later change the same way. Refuses
        what :meth:`from_dict` would refuse: a field value its annotation does not admit
        (``check_config_types``) and bad ``env_vars`` (``check_env_vars``); ``TypeError`` names
        a value that cannot be written.
        """
        check_env_vars(self.env_vars)
        check_config_types(self)
        written = configs_as_written(self)
        sections = {name: written.get(name, getattr(self, name)) for name in config_codec.SECTIONS}
        return config_codec.encode_container(self, sections, self._derived_env)

    @classmethod
    def from_dict(cls, doc: Any, *, origin: str | None = None) -> ConfigContainer:
        """The container of a :meth:`to_dict` document; errors name ``origin`` and the key."""
        kwargs, derived = config_codec.decode_container(doc, bases=_SECTION_BASES, origin=origin)
        cfg = cls(**kwargs)
        cfg._derived_env = derived
        return cfg

    def to_yaml(self, yaml_path: str | os.PathLike[str] | None = None) -> None:
        """Write this container as YAML to ``yaml_path``, or print it when None (upstream
        Megatron-Bridge's signature); :meth:`from_yaml` reads the file back."""
        text = config_codec.dump_document(self.to_dict())
        if yaml_path is None:
            print(text, end="")
        else:
            with open(yaml_path, "w", encoding="utf-8") as f:
                f.write(text)

    def print_yaml(self) -> None:
        """Print this container as YAML (:meth:`to_yaml` without a path)."""
        self.to_yaml()

    @classmethod
    def from_yaml(cls, yaml_path: str | os.PathLike[str]) -> ConfigContainer:
        """The container saved by :meth:`to_yaml` in ``yaml_path`` (YAML text is read too).

        A path object, or a one-line str ending in ``.yaml``/``.yml`` or holding a path
        separator, is a file (``FileNotFoundError`` naming it when there is none); any other
        str is YAML text. Errors name the file and the dotted key.
        """
        doc, origin = config_codec.read_document(yaml_path)
        return cls.from_dict(doc, origin=origin)


#: The class each written section's ``_target_`` must be (a subclass of).
_SECTION_BASES: dict[str, type] = {
    "model": GPTModelProvider,
    "train": TrainingConfig,
    "optimizer": OptimizerConfig,
    "ddp": DistributedDataParallelConfig,
}


def check_config_types(cfg: ConfigContainer, *, where: str = "cfg") -> None:
    """Check every field of ``cfg``'s sections against its annotation, and its cluster fields
    (``job.check_cluster_field``); ``where`` prefixes keys.

    The check every source of values meets (``value_types.check_field``): a value set in Python
    here, as ``from_yaml`` and ``apply_overrides`` do for theirs. Raises
    ``value_types.ConfigValueError`` (a ``TypeError`` and a ``ValueError``) naming the key:
    ``cfg.model.sequence_parallel: expected bool, got str 'yes'``. ``runtime_config_update``,
    ``resolve_config`` and ``ConfigContainer.to_dict`` run it first.
    """
    for name in ("model", "train", "optimizer", "ddp", "mixed_precision", "comm_overlap"):
        section = getattr(cfg, name)
        if dataclasses.is_dataclass(section) and not isinstance(section, type):
            check_fields(section, f"{where}.{name}")
    for name in CLUSTER_FIELDS:
        check_cluster_field(name, getattr(cfg, name), f"{where}.{name}")
