"""Nemotron 3 Nano (30B, 3B active) pre-training recipe, in the layout NVIDIA publishes.

Model (Megatron-Bridge ``recipes/nemotronh/h100/nemotron_3_nano.py``
``nemotron_3_nano_pretrain_8gpu_h100_bf16_config``; vocabulary from Hugging Face
``nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16``): a hybrid Mamba model of 52 layers (23 Mamba,
6 attention, 23 MoE, in the ``hybrid_layer_pattern`` of its ``models.json`` entry), hidden
2688; Mamba with 64 heads of dimension 64, state 128, 8 groups; attention with 32 heads of
dimension 128 in 2 query groups; MoE with 128 routed experts of width 1856 (top-6,
squared-ReLU, sigmoid router) and a shared expert of 3712; no position embedding; a
131072-token vocabulary; sequence 8192.

Published layout (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/nemotronh/gb300/nemotronh.py``): 8 GB300 GPUs, MXFP8, TP1 x EP8, global batch
512, micro-batch 4.

The hybrid model itself is megatron-core's ``HybridModel``, which the container's
``GPTModelProvider`` does not build (:mod:`megatron.bridge.recipes.architectures`).
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.models import recipe_model
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["NANO_MODEL", "SPEC", "nemotron_3_nano", "spec"]

NANO_MODEL = recipe_model("nemotron_3_nano")
"""The Nemotron 3 Nano architecture (parallel sizes at megatron-core's defaults), as
:data:`SPEC` starts from it."""

SPEC = published_spec("nemotron_3_nano", provider=MODEL_PROVIDER)
"""The recipe in plain values: 8 GB300 GPUs, MXFP8, TP1 x EP8 -> DP 8."""

spec, nemotron_3_nano = recipe_functions(SPEC, "Nemotron 3 Nano", __name__)
