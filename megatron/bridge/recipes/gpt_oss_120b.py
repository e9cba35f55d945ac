"""GPT-OSS-120B pre-training recipe, in the layouts NVIDIA publishes.

Model (Hugging Face ``openai/gpt-oss-120b`` ``config.json``, which Megatron-Bridge's
``gpt_oss_bridge`` reads): 36 MoE layers, hidden 2880, 64 heads of dimension 64 in 8 query
groups, attention alternating a 128-token sliding window (even layers) and full attention (odd
layers), 128 routed experts of width 2880 (top-4, gated, with biases), YaRN rotary positions, a
201088-token vocabulary, sequence 4096.

Published layouts (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/gpt_oss/<system>/gpt_oss.py``): 64 GPUs, MXFP8, global batch 1280, micro-batch
4, TP1; EP16 on GB300, EP64 on GB200.
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.spec import published_spec, recipe_functions

__all__ = ["SPEC", "gpt_oss_120b", "spec"]

SPEC = published_spec(
    "gpt_oss_120b",
    provider=MODEL_PROVIDER,
    # GPT-OSS's YaRN rotary settings, which GPTModel reads off the config (Megatron-Bridge
    # models/gpt_oss/gpt_oss_bridge.py, GPTOSSBridge.provider_bridge).
    provider_options=(
        ("yarn_rotary_scaling_factor", 32.0),
        ("yarn_original_max_position_embeddings", 4096),
        ("yarn_beta_fast", 32.0),
        ("yarn_beta_slow", 1.0),
        ("yarn_correction_range_round_to_int", False),
        ("yarn_mscale", None),
        ("yarn_mscale_all_dim", None),
    ),
)
"""The recipe in plain values: 64 GB300 GPUs, MXFP8, TP1 x EP16 -> DP 64."""

spec, gpt_oss_120b = recipe_functions(SPEC, "GPT-OSS-120B", __name__)
