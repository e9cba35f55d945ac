"""Kimi-K2 (1T, 32B active) pre-training recipe, in the layout NVIDIA publishes.

Model (Hugging Face ``moonshotai/Kimi-K2-Instruct`` ``config.json``, which Megatron-Bridge's
``kimi_bridge`` reads): DeepSeek-V3's architecture with 64 heads, 384 routed experts and one
dense layer: 61 layers, hidden 7168, multi-latent attention (query rank 1536, key/value rank
512, head dims 128 + 64 rotary, value 128), dense MLP 18432 in the first layer, then 60 MoE
layers of 384 routed experts (width 2048, top-8) and one shared expert (2048), no
multi-token prediction, a 163840-token vocabulary, sequence 4096.

Published layout (Megatron-Bridge ``docs/performance-summary-archive.md``, 26.06, the most
recent release with a Kimi-K2 row, and ``perf_recipes/kimi/gb300/kimi_k2.py``): 256 GB300
GPUs, MXFP8, TP1 x PP4 (VPP4) x EP64 on the pipeline layout ``Et*4|(t*4|)*14tL``, global batch
4096, micro-batch 2. The published run trains with the Muon optimizer; the plan does not
depend on the optimizer's update rule.

Importing this module loads no torch: :data:`SPEC` plans the recipe anywhere. :func:`kimi_k2`
builds a ``ConfigContainer`` with the description written over a ``GPTModelProvider`` (see
:mod:`megatron.bridge.recipes.architectures` for what that model build needs).
"""

from __future__ import annotations

from megatron.bridge.recipes.architectures import MODEL_PROVIDER, MOE_TRANSFORMER
from megatron.bridge.recipes.published import run
from megatron.bridge.recipes.spec import published_spec, recipe_functions
from megatron.bridge.training.job import ModelDescription

__all__ = ["KIMI_K2_LAYOUT", "SPEC", "kimi_k2", "spec"]

KIMI_K2_LAYOUT = "Et*4|(t*4|)*14tL"
"""The pipeline layout of the published run: 16 virtual stages, the last layer with the loss
(Megatron-Bridge ``recipes/kimi/h100/kimi_k2.py`` ``_get_kimi_k2_pipeline_layout``, (4, 4))."""

SPEC = published_spec(
    "kimi_k2",
    provider=MODEL_PROVIDER,
    model=ModelDescription(
        **MOE_TRANSFORMER,
        num_layers=61,
        hidden_size=7168,
        num_attention_heads=64,
        ffn_hidden_size=18432,
        vocab_size=163840,
        seq_length=4096,
        multi_latent_attention=True,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        num_moe_experts=384,
        moe_router_topk=8,
        moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048,
        moe_layer_freq=(0,) + (1,) * 60,
        moe_router_score_function="sigmoid",
        moe_router_load_balancing_type="seq_aux_loss",
    ),
    runs=(
        run(
            "gb300",
            "fp8_mx",
            gpus=256,
            gbs=4096,
            mbs=2,
            pp=4,
            vp=4,
            ep=64,
            etp=1,
            layout=KIMI_K2_LAYOUT,
            source="Megatron-Bridge docs/performance-summary-archive.md 26.06; "
            "perf_recipes/kimi/gb300/kimi_k2.py kimi_k2_pretrain_256gpu_gb300_fp8mx_config",
        ),
    ),
)
"""The recipe in plain values: 256 GB300 GPUs, MXFP8, TP1 x PP4 (VPP4) x EP64 -> DP 64."""

spec, kimi_k2 = recipe_functions(SPEC, "Kimi-K2", __name__)
