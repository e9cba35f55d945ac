"""The Llama-3 provider shared by the Llama recipes.

The Llama-3 architecture (RoPE, SwiGLU MLP with SiLU, RMSNorm, no bias in linear layers, untied
input and output embeddings, grouped-query attention, a 128256-token vocabulary) is the
``llama3`` entry of ``models.json`` (:mod:`megatron.bridge.recipes.models`); each Llama recipe's
entry (``llama3_8b``, ``llama3_70b``, ``llama31_405b``) starts from it and gives the dimensions.
:func:`llama3_provider` adds what a job description does not hold (RoPE base 500000, ...).

It lives apart from :mod:`megatron.bridge.recipes.llama`, which re-exports the Llama recipes
under upstream's names: the recipes import this module, and that one imports the recipes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megatron.bridge.recipes.models import recipe_model_fields

if TYPE_CHECKING:
    from megatron.bridge.models.gpt_provider import GPTModelProvider

__all__ = ["LLAMA3_PROVIDER", "llama3_provider"]

LLAMA3_PROVIDER = "megatron.bridge.recipes.llama_provider:llama3_provider"
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
        **{**recipe_model_fields("llama3"), **fields},
        rotary_base=500_000,
        rope_scaling=rope_scaling,
        rope_scaling_factor=8.0,
        layernorm_epsilon=1e-5,
        init_method_std=0.008,
        bias_dropout_fusion=True,
    )
