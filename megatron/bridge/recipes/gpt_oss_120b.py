"""GPT-OSS-120B pre-training recipe, in the layouts NVIDIA publishes.

Model (Hugging Face ``openai/gpt-oss-120b`` ``config.json``, which Megatron-Bridge's
``gpt_oss_bridge`` reads): 36 MoE layers, hidden 2880, 64 heads of dimension 64 in 8 query
groups, attention alternating a 128-token sliding window (even layers) and full attention (odd
layers), 128 routed experts of width 2880 (top-4, gated, with biases), YaRN rotary positions, a
201088-token vocabulary, sequence 4096.

Published layouts (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/gpt_oss/<system>/gpt_oss.py``): 64 GPUs, MXFP8, global batch 1280, micro-batch
4, TP1; EP16 on GB300, EP64 on GB200.

Importing this module loads no torch: :data:`SPEC` plans the recipe anywhere,
:func:`gpt_oss_120b` builds its ``ConfigContainer``.
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER, MOE_TRANSFORMER
from megatron.bridge.recipes.published import run
from megatron.bridge.recipes.spec import published_spec, recipe_functions
from megatron.bridge.training.job import ModelDescription

__all__ = ["SPEC", "gpt_oss_120b", "spec"]

_SOURCE = "Megatron-Bridge docs/performance-summary.md 26.08; perf_recipes/gpt_oss/{}/gpt_oss.py {}"

SPEC = published_spec(
    "gpt_oss_120b",
    provider=MODEL_PROVIDER,
    model=ModelDescription(
        **{
            **MOE_TRANSFORMER,
            # GPT-OSS experts and attention carry biases; its gated activation is the
            # sigmoid-weighted one megatron-core names quick_gelu.
            "add_bias_linear": True,
            "activation_func": "quick_gelu",
            "position_embedding_type": "yarn",
        },
        num_layers=36,
        hidden_size=2880,
        num_attention_heads=64,
        num_query_groups=8,
        kv_channels=64,
        ffn_hidden_size=2880,
        vocab_size=201088,
        seq_length=4096,
        # HF layer_types: sliding_attention on even layers, full_attention on odd ones; window
        # 128 tokens to the left.
        window_size=(128, 0),
        window_attn_skip_freq=2,
        num_moe_experts=128,
        moe_router_topk=4,
        moe_ffn_hidden_size=2880,
    ),
    runs=(
        run(
            "gb300",
            "fp8_mx",
            gpus=64,
            gbs=1280,
            mbs=4,
            ep=16,
            etp=1,
            source=_SOURCE.format("gb300", "gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config"),
        ),
        run(
            "gb200",
            "fp8_mx",
            gpus=64,
            gbs=1280,
            mbs=4,
            ep=64,
            etp=1,
            source=_SOURCE.format("gb200", "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config"),
        ),
    ),
)
"""The recipe in plain values: 64 GB300 GPUs, MXFP8, TP1 x EP16 -> DP 64."""

spec, gpt_oss_120b = recipe_functions(SPEC, "GPT-OSS-120B", __name__)
