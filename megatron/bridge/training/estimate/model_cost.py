"""The cost of a model, read from its :class:`ModelDescription`: :class:`ModelCost`.

:class:`ModelCost` answers every per-model question the step and memory estimates ask, through
its parts: the per-token FLOPs definition behind "Model TFLOP/s/GPU" (:class:`.ModelFlops`,
upstream Megatron-Bridge's ``num_floating_point_operations`` for transformers and hybrid Mamba
models), the bytes per token its layers' memory-bound kernels move (:class:`.ModelBytes`) and
the parameters one GPU holds of a layer, the embedding and the output layer
(:class:`.ModelParams`), each built on the widths and layer counts of :class:`.ModelShape`. It
knows nothing of the step, the pipeline stage or the links.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron.bridge.training.estimate.hybrid_pattern import HybridPattern, parse_hybrid_pattern
from megatron.bridge.training.estimate.model_bytes import ModelBytes
from megatron.bridge.training.estimate.model_flops import ModelFlops
from megatron.bridge.training.estimate.model_params import ModelParams

__all__ = ["HybridPattern", "ModelCost", "parse_hybrid_pattern"]


@dataclass(frozen=True)
class ModelCost(ModelFlops, ModelBytes, ModelParams):
    """FLOPs, memory-bound bytes and parameter counts of a model, read from its description."""
