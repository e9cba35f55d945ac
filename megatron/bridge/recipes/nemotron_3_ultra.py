"""Nemotron 3 Ultra (550B, 55B active) pre-training recipe, in the layouts NVIDIA publishes.

Model (Megatron-LM ``examples/post_training/modelopt/conf/nvidia/
NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.sh``; Megatron-Bridge's
``recipes/nemotronh/h100/nemotron_3_ultra.py``): Nemotron 3 Super's architecture
(:mod:`megatron.bridge.recipes.nemotron_3_super`) at 108 layers and hidden 8192: Mamba with 256
heads, attention with 64 heads in 2 query groups, 512 routed experts of width 5120 in a
2048-wide latent and a shared expert of 10240; two multi-token-prediction depths of one
repeated layer; sequence 8192.

Published layouts (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/nemotronh/<system>/nemotronh.py``): 256 GPUs, MXFP8, EP64 with ETP1, global batch
256, micro-batch 1, Megatron-FSDP, selective recompute of the experts' activation; TP1 on GB300,
TP2 with sequence parallelism on GB200.

The hybrid model itself is megatron-core's ``HybridModel``, which the container's
``GPTModelProvider`` does not build (:mod:`megatron.bridge.recipes.architectures`).
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "nemotron_3_ultra", "spec"]

SPEC = published_spec("nemotron_3_ultra", provider=MODEL_PROVIDER)
"""The recipe in plain values: 256 GB300 GPUs, MXFP8, TP1 x EP64 -> DP 256, Megatron-FSDP."""

spec, nemotron_3_ultra = recipe_functions(SPEC, "Nemotron 3 Ultra", __name__)
