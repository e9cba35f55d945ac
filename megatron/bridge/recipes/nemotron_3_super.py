"""Nemotron 3 Super (120B, 12B active) pre-training recipe, in the layouts NVIDIA publishes.

Model (Megatron-LM ``examples/post_training/modelopt/conf/nvidia/
NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh``; Megatron-Bridge's ``nemotron_h_bridge`` and
``recipes/nemotronh/h100/nemotron_3_super.py``): a hybrid Mamba model of 88 layers (Mamba,
attention and latent-MoE layers in the ``hybrid_layer_pattern`` of its ``models.json`` entry),
hidden 4096; Mamba with 128 heads of dimension 64, state 128, 8 groups; attention with 32 heads
of dimension 128 in 2 query groups; 512 routed experts of width 2688 computing in a 1024-wide
latent (top-22, sigmoid router with expert bias, weights scaled 5.0) and a shared expert of
5376; squared-ReLU, no position embedding; a 131072-token vocabulary; one multi-token-prediction
layer (attention then MoE) run for two depths; sequence 8192.

Published layouts (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/nemotronh/<system>/nemotronh.py``): 64 GPUs, EP64 with ETP1, global batch 512,
micro-batch 1, in MXFP8 and NVFP4; TP1 on GB300, TP2 with sequence parallelism on GB200.

The hybrid model itself is megatron-core's ``HybridModel``, which the container's
``GPTModelProvider`` does not build (:mod:`megatron.bridge.recipes.architectures`).
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "nemotron_3_super", "spec"]

SPEC = published_spec(
    "nemotron_3_super",
    provider=MODEL_PROVIDER,
    # NVFP4 keeps the last 14 layers in BF16: Megatron-Bridge training/mixed_precision.py
    # nemotron_3_super_bf16_with_nvfp4_mixed (first_last_layers_bf16, num_layers_at_end_in_bf16
    # 14, none at the start), the precision perf_recipes/nemotronh/common.py gives every NVFP4
    # run (scripts/performance/configs/nemotronh/nemotron_3_llm_pretrain.py in 26.04-26.06.01).
    bf16_layers=(("nvfp4", 0, 14),),
)
"""The recipe in plain values: 64 GB300 GPUs, MXFP8, TP1 x EP64 -> DP 64; in NVFP4 the last 14
layers stay in BF16."""

spec, nemotron_3_super = recipe_functions(SPEC, "Nemotron 3 Super", __name__)
