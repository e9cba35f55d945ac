"""megatron-core's model-config rules, applied to a job description without torch.

megatron-core validates a model config in ``TransformerConfig.__post_init__`` (and the
``ModelParallelConfig.__post_init__`` it calls), when the config is finalized: on a cluster, after
the queue wait. :func:`check_model` applies the same rules to a
:class:`~megatron.bridge.training.job.ModelDescription` on a laptop, so planning a job rejects what
megatron-core would reject.

Scope (each rule is a small function citing the megatron-core code it mirrors; one more, the
experts' fused grouped MLP under Transformer Engine's op fuser, is asserted when megatron-core
builds the experts):

- the rules that read only description fields, with megatron-core's own derivations first
  (``expert_tensor_parallel_size`` None is the TP size, ``recompute_modules`` None is
  ``["core_attn"]``, an empty ``cuda_graph_modules`` is the whole layer, and the deprecated
  ``full_iteration`` module name turns ``cuda_graph_impl`` into ``"full_iteration"``);
- the rules that also read a megatron-core field the description does not hold (a callable):
  evaluated with that field at megatron-core's default, listed in :data:`UNDESCRIBED_DEFAULTS`;
- the rules that need a minimum Transformer Engine version, when ``te_version`` is given.

Not here: the layout rules (heads and query groups over TP, sequence parallelism, experts over
EP, the pipeline split), which ``parallel_layout.check_parallel_layout`` owns; and the rules that
read an overlap setting the comm-overlap plan decides (``overlap_p2p_comm_warmup_flush``,
``ep_overlap_early_attn_memory_release``, ``overlap_moe_expert_parallel_comm``,
``delay_wgrad_compute``, ``defer_embedding_wgrad_compute``), which ``comm_overlap.rules`` owns.

One file per part:

- ``inputs``: what the rules read besides a description field (:data:`UNDESCRIBED_DEFAULTS`, the
  Transformer Engine version) and the two-switch refusal several rules share;
- ``precision``: half precision, the FP8 and FP4 recipes, the layers kept in BF16;
- ``architecture``: the fused bias-activation kernels, MLA's output gate;
- ``moe``: the MoE layer pattern (:func:`check_moe_layer_pattern`), routing, dispatchers,
  capacity, shared experts;
- ``te_op_fuser``: the experts' fused grouped MLP (:func:`fused_grouped_mlp`, :func:`fused_glu`,
  :data:`TE_OP_FUSER_MINIMUM`);
- ``offloading``: CPU and fine-grained activation offloading (:data:`OFFLOAD_MODULES`);
- ``recompute``: activation recompute (:func:`recomputed_modules`);
- ``cuda_graphs``: CUDA-graph implementations and capture regions;
- ``check``: :func:`check_model`, which runs them all.

Pure standard library: importing this package loads neither torch nor megatron-core.
"""

from __future__ import annotations

from megatron.bridge.training.model_rules.check import check_model
from megatron.bridge.training.model_rules.inputs import UNDESCRIBED_DEFAULTS
from megatron.bridge.training.model_rules.moe import check_moe_layer_pattern
from megatron.bridge.training.model_rules.offloading import OFFLOAD_MODULES
from megatron.bridge.training.model_rules.recompute import recomputed_modules
from megatron.bridge.training.model_rules.te_op_fuser import (
    TE_OP_FUSER_MINIMUM,
    fused_glu,
    fused_grouped_mlp,
)

__all__ = [
    "OFFLOAD_MODULES",
    "TE_OP_FUSER_MINIMUM",
    "UNDESCRIBED_DEFAULTS",
    "check_model",
    "check_moe_layer_pattern",
    "fused_glu",
    "fused_grouped_mlp",
    "recomputed_modules",
]
