"""Small models for hand-counted estimate tests: 2 layers of hidden 64 with 4 heads, one per
kind of layer the estimate prices (dense GQA, MoE, MLA, hybrid Mamba)."""

from __future__ import annotations

import dataclasses

from megatron.bridge.training.job import ModelDescription

_SIZE = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 128}
_DATA = {"seq_length": 32, "vocab_size": 100, "normalization": "RMSNorm"}
_GLU = {"gated_linear_unit": True, "kv_channels": 16}

#: 2 layers, hidden 64, 4 heads of 16 in 2 query groups, SwiGLU FFN 128, RoPE.
DENSE = ModelDescription(
    **_SIZE, **_DATA, **_GLU, num_query_groups=2, position_embedding_type="rope"
)

#: 2 layers (MoE then dense), hidden 64, 4 heads of 16 (MHA), learned positions (no rotary);
#: 8 experts, top-2, expert width 32, SwiGLU, a shared expert 64 wide; dense FFN 128; grouped
#: GEMM.
_EXPERTS = {"num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 32}
_SHARED = {"moe_shared_expert_intermediate_size": 64, "moe_layer_freq": (1, 0)}
MOE = ModelDescription(**_SIZE, **_DATA, **_GLU, **_EXPERTS, **_SHARED, moe_grouped_gemm=True)

#: 2 layers, hidden 64, MLA with 4 heads (q_lora_rank 24, kv_lora_rank 16, qk_head_dim 8,
#: rotary part 4, v_head_dim 8), RoPE; a plain (not gated) MLP 128 wide.
_LATENT = {"multi_latent_attention": True, "q_lora_rank": 24, "kv_lora_rank": 16}
_HEADS = {"qk_head_dim": 8, "qk_pos_emb_head_dim": 4, "v_head_dim": 8}
MLA = ModelDescription(**_SIZE, **_DATA, **_LATENT, **_HEADS, position_embedding_type="rope")

#: Hybrid "M*-E": Mamba (state 8, head_dim 16 -> 8 heads, 2 groups), attention (4 heads of 16,
#: no position embedding), a plain MLP 96 wide, an MoE layer (4 experts, top-1, width 32).
_MAMBA = {"mamba_state_dim": 8, "mamba_head_dim": 16, "mamba_num_groups": 2}
_ROUTED = {"num_moe_experts": 4, "moe_router_topk": 1, "moe_ffn_hidden_size": 32}
HYBRID = dataclasses.replace(
    ModelDescription(**_SIZE, **_DATA, **_MAMBA, **_ROUTED, position_embedding_type="none"),
    num_layers=4,
    ffn_hidden_size=96,
    kv_channels=16,
    hybrid_layer_pattern="M*-E",
)


def buildable_on_cpu(*, grouped_query: bool) -> dict[str, object]:
    """Recipe changes that shrink a dense recipe's architecture to 2 layers of hidden 64 (4
    heads, in 2 groups with ``grouped_query``) on TP 1, PP 1, CP 1, so megatron-core builds it on
    the CPU; global batch 8, no userbuffers preset."""
    return {
        "model.num_layers": 2,
        "model.hidden_size": 64,
        "model.num_attention_heads": 4,
        "model.num_query_groups": 2 if grouped_query else None,
        "model.ffn_hidden_size": 160,
        "model.vocab_size": 1000,
        "model.seq_length": 32,
        "model.tensor_model_parallel_size": 1,
        "model.pipeline_model_parallel_size": 1,
        "model.virtual_pipeline_model_parallel_size": None,
        "model.context_parallel_size": 1,
        "global_batch_size": 8,
        "preset": "none",
    }


def built_parameters(spec) -> int:
    """The parameters of the model megatron-core builds on the CPU for a recipe spec.

    torch's LayerNorm (megatron-core's CPU fallback) has no zero-centred gamma; the parameter
    count is the same either way."""
    provider = spec.build().model
    provider.use_cpu_initialization = True
    provider.layernorm_zero_centered_gamma = False
    return sum(p.numel() for p in provider.provide().parameters())
