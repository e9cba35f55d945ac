"""Llama-3 8B pre-training recipe, in the layouts NVIDIA publishes.

Model: 32 layers, hidden 4096, 32 heads in 8 query groups, FFN 14336, sequence 8192 (Llama-3
architecture, see :mod:`megatron.bridge.recipes.llama_provider`).

Published layouts (Megatron-Bridge ``docs/performance-summary-archive.md``, 25.11, the most
recent release with a Llama-3 8B row, and ``perf_recipes/llama/<system>/llama3.py``): 8 GPUs,
global batch 128, TP1 PP1; micro-batch 2 on GB300, GB200 and B200 in FP8 current scaling or
MXFP8; micro-batch 1 on H100 in FP8 current scaling, where the published run shards with
Megatron-FSDP (FSDP 8). The job description has no Megatron-FSDP field: that run is planned
as data parallelism with the distributed optimizer.
"""

from __future__ import annotations

from megatron.bridge.recipes.llama_provider import LLAMA3_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "llama3_8b", "spec"]

SPEC = published_spec("llama3_8b", provider=LLAMA3_PROVIDER)
"""The recipe in plain values: 8 GB300 GPUs, FP8 current scaling, TP1 -> DP 8, micro-batch 2."""

spec, llama3_8b = recipe_functions(SPEC, "Llama-3 8B", __name__)
