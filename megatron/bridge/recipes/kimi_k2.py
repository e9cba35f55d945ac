"""Kimi-K2 (1T, 32B active) pre-training recipe, in the layout NVIDIA publishes.

Model (Hugging Face ``moonshotai/Kimi-K2-Instruct`` ``config.json``, which Megatron-Bridge's
``kimi_bridge`` reads): DeepSeek-V3's architecture with 64 heads, 384 routed experts and one
dense layer: 61 layers, hidden 7168, multi-latent attention (query rank 1536, key/value rank
512, head dims 128 + 64 rotary, value 128), dense MLP 18432 in the first layer, then 60 MoE
layers of 384 routed experts (width 2048, top-8) and one shared expert (2048), no
multi-token prediction, a 163840-token vocabulary, sequence 4096.

Published layout (Megatron-Bridge ``docs/performance-summary-archive.md``, 26.06, the most
recent release with a Kimi-K2 row, and ``perf_recipes/kimi/gb300/kimi_k2.py``): 256 GB300
GPUs, MXFP8, TP1 x PP4 (VPP4) x EP64 on the pipeline layout ``Et*4|(t*4|)*14tL``, global batch
4096, micro-batch 2. The published run trains with the Muon optimizer; the plan does not
depend on the optimizer's update rule.

Its model builds as DeepSeek-V3's does (:mod:`megatron.bridge.recipes.architectures`).
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "kimi_k2", "spec"]

SPEC = published_spec("kimi_k2", provider=MODEL_PROVIDER)
"""The recipe in plain values: 256 GB300 GPUs, MXFP8, TP1 x PP4 (VPP4) x EP64 -> DP 64."""

spec, kimi_k2 = recipe_functions(SPEC, "Kimi-K2", __name__)
