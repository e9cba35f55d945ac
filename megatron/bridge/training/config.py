"""The training configuration, under the import path recipes use.

Recipes written for Megatron-Bridge import these names from here:
``from megatron.bridge.training.config import ConfigContainer, runtime_config_update``, and
megatron-core's ``OptimizerConfig`` and ``DistributedDataParallelConfig``, which the container's
``optimizer`` and ``ddp`` sections are. The container and its sections live in ``container``;
``runtime_config_update`` in ``resolve`` (it reads the container, so this module, which names
both, sits above them).
"""

from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.training.container import (
    ConfigContainer,
    TrainingConfig,
    check_config_types,
    default_optimizer,
)
from megatron.bridge.training.env_vars import AppliedEnvVars, EnvValue, check_env_vars
from megatron.bridge.training.resolve import resolve_config, runtime_config_update

__all__ = [
    "AppliedEnvVars",
    "ConfigContainer",
    "DistributedDataParallelConfig",
    "EnvValue",
    "OptimizerConfig",
    "TrainingConfig",
    "check_config_types",
    "check_env_vars",
    "default_optimizer",
    "resolve_config",
    "runtime_config_update",
]
