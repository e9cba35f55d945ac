"""The Llama-3 architecture shared by the Llama recipes.

RoPE (base 500000), SwiGLU MLP (gated linear unit with SiLU), RMSNorm, no bias in linear
layers, untied input and output embeddings, grouped-query attention, a 128256-token vocabulary.
The recipes (``llama3_70b``, ``llama31_405b``) give the dimensions and the parallel layout.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from megatron.bridge.models.gpt_provider import GPTModelProvider

__all__ = ["LLAMA3_ARCHITECTURE", "LLAMA3_PROVIDER", "llama3_provider"]

LLAMA3_ARCHITECTURE = MappingProxyType(
    {
        "vocab_size": 128256,
        "gated_linear_unit": True,
        "activation_func": "silu",
        "bias_activation_fusion": True,
        "add_bias_linear": False,
        "normalization": "RMSNorm",
        "position_embedding_type": "rope",
        "share_embeddings_and_output_weights": False,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
    }
)
"""The Llama-3 job-description fields every Llama recipe shares (megatron-core names)."""

LLAMA3_PROVIDER = "megatron.bridge.recipes.llama:llama3_provider"
"""Target of :func:`llama3_provider`, as a recipe spec names it."""


def llama3_provider(*, rope_scaling: bool = False, **fields: Any) -> GPTModelProvider:
    """A ``GPTModelProvider`` with the Llama-3 settings a job description does not hold.

    RoPE base 500000, layernorm epsilon, initialization and the bias-dropout fusion; ``fields`` set any
    other provider field (a recipe writes its description over the result). ``rope_scaling``
    turns on the Llama-3.1 RoPE frequency scaling (factor 8). Imports torch and megatron-core
    when called, not when this module is imported.
    """
    from megatron.bridge.models.gpt_provider import GPTModelProvider

    return GPTModelProvider(
        **{**LLAMA3_ARCHITECTURE, **fields},
        rotary_base=500_000,
        rope_scaling=rope_scaling,
        rope_scaling_factor=8.0,
        layernorm_epsilon=1e-5,
        init_method_std=0.008,
        bias_dropout_fusion=True,
    )
