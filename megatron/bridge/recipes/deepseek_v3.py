"""DeepSeek-V3 (671B, 37B active) pre-training recipe, in the layouts NVIDIA publishes.

Model (Hugging Face ``deepseek-ai/DeepSeek-V3`` ``config.json``, which Megatron-Bridge's
``deepseek_v3_bridge`` reads): 61 layers, hidden 7168, 128 heads with multi-latent attention
(query rank 1536, key/value rank 512, head dims 128 + 64 rotary, value 128), dense MLP 18432 in
the first 3 layers, then 58 MoE layers of 256 routed experts (width 2048, top-8) and one shared
expert (2048), one multi-token-prediction layer, a 129280-token vocabulary, sequence 4096.

Published layouts (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/deepseek/<system>/deepseek_v3.py``): TP1 with 61 + 1 MTP layers on a custom
pipeline layout ``Et*4|(t*4|)*14tmL`` (the embedding and 4 layers, 14 stages of 4, then the
last layer, the MTP layer and the loss): PP2 x VPP8 x EP32 on 256 GB300 GPUs, PP4 x VPP4 x EP64
on 256 GB200 GPUs, global batch 4096, micro-batch 1, MXFP8.

Its model builds with megatron-core's multi-latent attention config, not with the container's
``GPTModelProvider`` (:mod:`megatron.bridge.recipes.architectures`).
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "deepseek_v3", "spec"]

SPEC = published_spec("deepseek_v3", provider=MODEL_PROVIDER)
"""The recipe in plain values: 256 GB300 GPUs, MXFP8, TP1 x PP2 (VPP8) x EP32 -> DP 128."""

spec, deepseek_v3 = recipe_functions(SPEC, "DeepSeek-V3", __name__)
