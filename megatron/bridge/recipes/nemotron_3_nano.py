"""Nemotron 3 Nano (30B, 3B active) pre-training recipe, in the layout NVIDIA publishes.

Model (Megatron-Bridge ``recipes/nemotronh/h100/nemotron_3_nano.py``
``nemotron_3_nano_pretrain_8gpu_h100_bf16_config``; vocabulary from Hugging Face
``nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16``): a hybrid Mamba model of 52 layers (23 Mamba,
6 attention, 23 MoE, in the pattern :data:`NANO_PATTERN`), hidden 2688; Mamba with 64 heads of
dimension 64, state 128, 8 groups; attention with 32 heads of dimension 128 in 2 query groups;
MoE with 128 routed experts of width 1856 (top-6, squared-ReLU, sigmoid router) and a shared
expert of 3712; no position embedding; a 131072-token vocabulary; sequence 8192.

Published layout (Megatron-Bridge ``docs/performance-summary.md``, 26.08, and
``perf_recipes/nemotronh/gb300/nemotronh.py``): 8 GB300 GPUs, MXFP8, TP1 x EP8, global batch
512, micro-batch 4.

Importing this module loads no torch: :data:`SPEC` plans the recipe anywhere.
:func:`nemotron_3_nano` builds a ``ConfigContainer`` with the description written over a
``GPTModelProvider``; the hybrid model itself is megatron-core's ``HybridModel`` (see
:mod:`megatron.bridge.recipes.architectures`).
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER
from megatron.bridge.recipes.published import run
from megatron.bridge.recipes.spec import published_spec, recipe_functions
from megatron.bridge.training.job import ModelDescription

__all__ = ["NANO_MODEL", "NANO_PATTERN", "SPEC", "nemotron_3_nano", "spec"]

NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
"""Nemotron 3 Nano's layers, one symbol a layer (M Mamba, * attention, E MoE)."""

NANO_MODEL = ModelDescription(
    num_layers=52,
    hybrid_layer_pattern=NANO_PATTERN,
    hidden_size=2688,
    num_attention_heads=32,
    num_query_groups=2,
    kv_channels=128,
    ffn_hidden_size=1856,
    mamba_num_heads=64,
    mamba_head_dim=64,
    mamba_state_dim=128,
    mamba_num_groups=8,
    vocab_size=131072,
    seq_length=8192,
    activation_func="squared_relu",
    add_bias_linear=False,
    normalization="RMSNorm",
    position_embedding_type="none",
    share_embeddings_and_output_weights=False,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    num_moe_experts=128,
    moe_router_topk=6,
    moe_ffn_hidden_size=1856,
    moe_shared_expert_intermediate_size=3712,
    moe_router_score_function="sigmoid",
    moe_router_load_balancing_type="seq_aux_loss",
    moe_grouped_gemm=True,
    moe_token_dispatcher_type="flex",
    moe_flex_dispatcher_backend="hybridep",
)
"""The Nemotron 3 Nano architecture (parallel sizes at megatron-core's defaults)."""

SPEC = published_spec(
    "nemotron_3_nano",
    provider=MODEL_PROVIDER,
    model=NANO_MODEL,
    runs=(
        run(
            "gb300",
            "fp8_mx",
            gpus=8,
            gbs=512,
            mbs=4,
            ep=8,
            etp=1,
            source="Megatron-Bridge docs/performance-summary.md 26.08; "
            "perf_recipes/nemotronh/gb300/nemotronh.py nemotron_3_nano_pretrain_8gpu_gb300_fp8mx_config",
        ),
    ),
)
"""The recipe in plain values: 8 GB300 GPUs, MXFP8, TP1 x EP8 -> DP 8."""

spec, nemotron_3_nano = recipe_functions(SPEC, "Nemotron 3 Nano", __name__)
