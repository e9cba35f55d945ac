"""Qwen3-30B-A3B pre-training recipe, in the layouts NVIDIA publishes.

Model (Hugging Face ``Qwen/Qwen3-30B-A3B`` ``config.json``, which Megatron-Bridge's
``qwen3_moe_bridge`` reads): 48 MoE layers, hidden 2048, 32 heads of dimension 128 in 4 query
groups, 128 routed experts of width 768 (top-8, no shared expert), a 151936-token vocabulary,
sequence 4096.

Published layouts (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/qwen/<system>/qwen3_moe.py``): 8 GPUs, MXFP8, TP1 x EP8, global batch 512;
micro-batch 8 on GB300, 4 on GB200.

Importing this module loads no torch: :data:`SPEC` plans the recipe anywhere,
:func:`qwen3_30b_a3b` builds its ``ConfigContainer``.
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER, MOE_TRANSFORMER
from megatron.bridge.recipes.published import run
from megatron.bridge.recipes.spec import published_spec, recipe_functions
from megatron.bridge.training.job import ModelDescription

__all__ = ["SPEC", "qwen3_30b_a3b", "spec"]

_SOURCE = "Megatron-Bridge docs/performance-summary.md 26.08; perf_recipes/qwen/{}/qwen3_moe.py {}"

SPEC = published_spec(
    "qwen3_30b_a3b",
    provider=MODEL_PROVIDER,
    model=ModelDescription(
        **MOE_TRANSFORMER,
        num_layers=48,
        hidden_size=2048,
        num_attention_heads=32,
        num_query_groups=4,
        kv_channels=128,
        ffn_hidden_size=6144,
        vocab_size=151936,
        seq_length=4096,
        num_moe_experts=128,
        moe_router_topk=8,
        moe_ffn_hidden_size=768,
    ),
    runs=(
        run(
            "gb300",
            "fp8_mx",
            gpus=8,
            gbs=512,
            mbs=8,
            ep=8,
            etp=1,
            source=_SOURCE.format("gb300", "qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config"),
        ),
        run(
            "gb200",
            "fp8_mx",
            gpus=8,
            gbs=512,
            mbs=4,
            ep=8,
            etp=1,
            source=_SOURCE.format("gb200", "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"),
        ),
    ),
)
"""The recipe in plain values: 8 GB300 GPUs, MXFP8, TP1 x EP8 -> DP 8."""

spec, qwen3_30b_a3b = recipe_functions(SPEC, "Qwen3-30B-A3B", __name__)
