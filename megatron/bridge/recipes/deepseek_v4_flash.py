"""DeepSeek-V4 Flash pre-training recipe, in the layouts NVIDIA publishes.

Model (Megatron-Bridge ``models/deepseek/deepseek_v4_bridge.py``, whose comments give the Hugging
Face values): 43 MoE layers and one multi-token-prediction layer, hidden 4096; DeepSeek-V4's
hybrid attention (``experimental_attention_variant="dsv4_hybrid"``): 64 query heads of 512 (448
+ 64 rotary) over one key/value head, query rank 1024, a grouped low-rank output projection
(rank 1024, 8 groups), a 128-token sliding window in every layer plus per-layer compressed keys
(``csa_compress_ratios``: ratio 4 with the DSA indexer's top-512, ratio 128 with every compressed
key); 256 routed experts of width 2048 (top-6) and one shared expert, the first 3 layers
hash-routed; 4 hyper-connection streams; a 129280-token vocabulary; sequence 4096.

Published layouts (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/deepseek/<system>/deepseek_v4.py``): 128 GB300 or GB200 GPUs, MXFP8, TP1 x EP64,
global batch 2048, micro-batch 1, selective recompute of the MLA up-projection.

The installed megatron-core (0.19) has no modules for this attention: the recipe plans and costs
its job (``bridge-overlap explain --recipe deepseek_v4_flash`` says so in a note), and building
its container is refused, naming the fields megatron-core lacks
(:mod:`megatron.bridge.training.megatron_core_support`).
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "deepseek_v4_flash", "spec"]

SPEC = published_spec("deepseek_v4_flash", provider=MODEL_PROVIDER)
"""The recipe in plain values: 128 GB300 GPUs, MXFP8, TP1 x EP64 -> DP 128."""

spec, deepseek_v4_flash = recipe_functions(SPEC, "DeepSeek-V4 Flash", __name__)
