"""Qwen3-30B-A3B pre-training recipe, in the layouts NVIDIA publishes.

Model (Hugging Face ``Qwen/Qwen3-30B-A3B`` ``config.json``, which Megatron-Bridge's
``qwen3_moe_bridge`` reads): 48 MoE layers, hidden 2048, 32 heads of dimension 128 in 4 query
groups, 128 routed experts of width 768 (top-8, no shared expert), a 151936-token vocabulary,
sequence 4096.

Published layouts (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/qwen/<system>/qwen3_moe.py``): 8 GPUs, MXFP8, TP1 x EP8, global batch 512;
micro-batch 8 on GB300, 4 on GB200.
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "qwen3_30b_a3b", "spec"]

SPEC = published_spec("qwen3_30b_a3b", provider=MODEL_PROVIDER)
"""The recipe in plain values: 8 GB300 GPUs, MXFP8, TP1 x EP8 -> DP 8."""

spec, qwen3_30b_a3b = recipe_functions(SPEC, "Qwen3-30B-A3B", __name__)
