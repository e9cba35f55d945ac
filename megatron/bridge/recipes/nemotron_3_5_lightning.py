"""Nemotron 3.5 Lightning pre-training recipe, in the layout NVIDIA publishes.

Model (Megatron-Bridge ``perf_recipes/nemotronh/gb200/nemotronh.py``
``nemotron_3_5_lightning_pretrain_8gpu_gb200_bf16_config`` and
``recipes/nemotronh/h100/nemotron_3_nano.py`` ``nemotron_3_5_lightning_pretrain_config``):
Nemotron 3 Nano's architecture (:mod:`megatron.bridge.recipes.nemotron_3_nano`) with two
multi-token-prediction depths, each an attention layer and an MoE layer (MTP pattern ``*E``,
one layer repeated for both depths).

Published layout (Megatron-Bridge ``docs/performance-summary.md``, 26.08): 8 GB200 GPUs,
MXFP8, TP1 x EP8, global batch 512, micro-batch 2, sequence 8192.
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "nemotron_3_5_lightning", "spec"]

SPEC = published_spec("nemotron_3_5_lightning", provider=MODEL_PROVIDER)
"""The recipe in plain values: 8 GB200 GPUs, MXFP8, TP1 x EP8 -> DP 8."""

spec, nemotron_3_5_lightning = recipe_functions(SPEC, "Nemotron 3.5 Lightning", __name__)
