"""The Llama-3 architecture shared by the Llama recipes.

RoPE (base 500000), SwiGLU MLP (gated linear unit with SiLU), RMSNorm, no bias in linear
layers, untied input and output embeddings, grouped-query attention, a 128256-token vocabulary.
The recipes (``llama3_70b``, ``llama31_405b``) give the dimensions and the parallel layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from megatron.bridge.models.gpt_provider import GPTModelProvider

__all__ = ["LLAMA3_VOCAB_SIZE", "llama3_provider"]

LLAMA3_VOCAB_SIZE = 128256
"""Size of the Llama-3 tokenizer vocabulary."""


def llama3_provider(
    *,
    num_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_query_groups: int,
    ffn_hidden_size: int,
    seq_length: int,
    vocab_size: int = LLAMA3_VOCAB_SIZE,
    rope_scaling: bool = False,
) -> GPTModelProvider:
    """A Llama-3 ``GPTModelProvider`` with these dimensions (parallel sizes left at 1).

    ``rope_scaling`` turns on the Llama-3.1 RoPE frequency scaling (factor 8). Imports torch
    and megatron-core when called, not when this module is imported.
    """
    import torch.nn.functional as F

    from megatron.bridge.models.gpt_provider import GPTModelProvider

    return GPTModelProvider(
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        num_query_groups=num_query_groups,
        ffn_hidden_size=ffn_hidden_size,
        seq_length=seq_length,
        vocab_size=vocab_size,
        position_embedding_type="rope",
        rotary_base=500_000,
        rope_scaling=rope_scaling,
        rope_scaling_factor=8.0,
        share_embeddings_and_output_weights=False,
        normalization="RMSNorm",
        layernorm_epsilon=1e-5,
        add_bias_linear=False,
        gated_linear_unit=True,
        activation_func=F.silu,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=0.008,
        bias_activation_fusion=True,
        bias_dropout_fusion=True,
    )
