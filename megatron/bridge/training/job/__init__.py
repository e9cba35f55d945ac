"""The one description of a training job: plain values, megatron-core's field names, no torch.

A :class:`JobDescription` says what the overlap plan, the layout checks, the launch environment
and the step estimate read about a job: the model (:class:`ModelDescription`, every field named
and defaulted as megatron-core's ``TransformerConfig`` / the GPT provider name it), the world
size, the GPU, the batch sizes, the optimizer sharding and where Transformer Engine stands.

Every route builds one, through one function each way:

- from megatron-core configs: ``megatron.bridge.training.job_configs.describe_configs``;
- onto a megatron-core model config: ``megatron.bridge.training.job_configs.write_model``;
- from a recipe (``RecipeSpec.job``) and from ``bridge-overlap explain`` flags
  (``megatron.bridge.cli.flags``), which change fields of a recipe's description by name.

Derived layout facts (data-parallel size, interleaving, expert data parallelism, the precision
name) are properties, computed from the fields and never stored twice. A new model field is one
field in ``model`` plus the rules that read it.

The parts: ``model`` (:class:`ModelDescription` and the value names of its fields),
``description`` (:class:`JobDescription` and its derived layout facts), ``limits`` (the bounds
checked before planning: :func:`check_limits`, :func:`check_micro_batch_chunks`).
"""

from megatron.bridge.training.job.description import (
    OUTER_DP_SHARDING_STRATEGIES,
    ConfigName,
    JobDescription,
)
from megatron.bridge.training.job.limits import (
    CLUSTER_FIELDS,
    check_cluster_field,
    check_limits,
    check_micro_batch_chunks,
)
from megatron.bridge.training.job.model import (
    BF16_LAYER_DEFAULTS,
    ActivationName,
    ModelDescription,
    PositionEmbeddingType,
    PrecisionName,
)

__all__ = [
    "BF16_LAYER_DEFAULTS",
    "CLUSTER_FIELDS",
    "OUTER_DP_SHARDING_STRATEGIES",
    "ActivationName",
    "ConfigName",
    "JobDescription",
    "ModelDescription",
    "PositionEmbeddingType",
    "PrecisionName",
    "check_cluster_field",
    "check_limits",
    "check_micro_batch_chunks",
]
