"""Qwen3-235B-A22B pre-training recipe, in the layouts NVIDIA publishes.

Model (Hugging Face ``Qwen/Qwen3-235B-A22B`` ``config.json``, which Megatron-Bridge's
``qwen3_moe_bridge`` reads): 94 MoE layers, hidden 4096, 64 heads of dimension 128 in 4 query
groups, 128 routed experts of width 1536 (top-8, no shared expert), a 151936-token vocabulary,
sequence 4096.

Published layouts (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/qwen/<system>/qwen3_moe.py``): 256 GPUs, MXFP8, global batch 8192, TP1 x EP32;
PP4 x VPP12 with micro-batch 2 on GB300, PP8 x VPP3 with micro-batch 1 on GB200. The embedding
and the loss count as one layer each in the pipeline split (``recipes/qwen/h100/qwen3_moe.py``),
so 96 layers split evenly over the 48 (GB300) or 24 (GB200) virtual stages.
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "qwen3_235b_a22b", "spec"]

SPEC = published_spec("qwen3_235b_a22b", provider=MODEL_PROVIDER)
"""The recipe in plain values: 256 GB300 GPUs, MXFP8, TP1 x PP4 (VPP12) x EP32 -> DP 64."""

spec, qwen3_235b_a22b = recipe_functions(SPEC, "Qwen3-235B-A22B", __name__)
