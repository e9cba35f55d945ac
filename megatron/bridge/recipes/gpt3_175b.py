"""GPT-3 175B pre-training recipe, in the layout NVIDIA publishes for H100.

Model: 96 layers, hidden 12288, 96 heads, FFN 4 x hidden, sequence 2048, learned absolute
positions, LayerNorm, GeLU, tied embeddings. Published layout: TP4 (with sequence
parallelism) x PP8 with 6 virtual stages per rank, micro-batch 1, global batch 2048, on 1024
GPUs (DP 32), bf16 with the ``userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048`` preset.

The model is the ``gpt3_175b`` entry of ``models.json`` (:mod:`megatron.bridge.recipes.models`).
Every size is a keyword argument; the userbuffers preset follows them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megatron.bridge.recipes.models import recipe_model
from megatron.bridge.recipes.spec import recipe_functions, spec_of

if TYPE_CHECKING:
    from megatron.bridge.models.gpt_provider import GPTModelProvider

__all__ = [
    "GPT3_175B_MODEL",
    "GPT3_PROVIDER",
    "SPEC",
    "gpt3_175b",
    "gpt3_provider",
    "spec",
]

GPT3_PROVIDER = "megatron.bridge.recipes.gpt3_175b:gpt3_provider"
"""Target of :func:`gpt3_provider`, as a recipe spec names it."""

GPT3_175B_MODEL = recipe_model("gpt3_175b")
"""GPT-3 175B in its published layout (TP4 x PP8, VPP6)."""

SPEC = spec_of(
    "gpt3_175b",
    provider=GPT3_PROVIDER,
    model=GPT3_175B_MODEL,
    world_size=1024,
    gpu="h100",
    global_batch_size=2048,
    lr=6e-5,
    min_lr=6e-6,
)
"""The recipe in plain values: 1024 H100 GPUs, TP4 x PP8 (VPP6) -> DP 32."""

spec, gpt3_175b = recipe_functions(SPEC, "GPT-3 175B", __name__)


def gpt3_provider(**fields: Any) -> GPTModelProvider:
    """A ``GPTModelProvider`` with the GPT-3 settings a job description does not hold.

    Zero-centred LayerNorm gamma, initialization and the bias-dropout fusion; ``fields`` set any other
    provider field (a recipe writes its description over the result).
    """
    from megatron.bridge.models.gpt_provider import GPTModelProvider

    return GPTModelProvider(
        **fields,
        layernorm_zero_centered_gamma=True,
        init_method_std=0.006,
        bias_dropout_fusion=True,
    )
