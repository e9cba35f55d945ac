"""Llama-3 70B pre-training recipe, in the layout NVIDIA publishes for H100.

Model: 80 layers, hidden 8192, 64 heads in 8 query groups, FFN 28672, sequence 8192 (Llama-3
architecture, see :mod:`megatron.bridge.recipes.llama`). Published layout: TP4 (with sequence
parallelism) x PP4 with 5 virtual stages per rank x CP2, micro-batch 1. We run it on 64 GPUs
(DP 2) with global batch 128, the size of NVIDIA's published Llama-3 70B H100 runs.

Preset: ``userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192``. Its name has no ``_cp`` part
although the layout is CP2; NVIDIA's recipe uses it at CP2 all the same, and so does the preset
choice here (exact CP first, then the CP-less name, for every recipe and the CLI alike).

Importing this module loads no torch: :data:`SPEC` plans the recipe anywhere,
:func:`llama3_70b` builds its ``ConfigContainer``.
"""

from __future__ import annotations

from megatron.bridge.recipes.llama import LLAMA3_ARCHITECTURE, LLAMA3_PROVIDER
from megatron.bridge.recipes.spec import recipe_functions, spec_of
from megatron.bridge.training.job import ModelDescription

__all__ = ["SPEC", "llama3_70b", "spec"]

SPEC = spec_of(
    "llama3_70b",
    provider=LLAMA3_PROVIDER,
    model=ModelDescription(
        **LLAMA3_ARCHITECTURE,
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_query_groups=8,
        ffn_hidden_size=28672,
        seq_length=8192,
        tensor_model_parallel_size=4,
        pipeline_model_parallel_size=4,
        virtual_pipeline_model_parallel_size=5,
        context_parallel_size=2,
    ),
    world_size=64,
    gpu="h100",
    global_batch_size=128,
)
"""The recipe in plain values: 64 H100 GPUs, TP4 x PP4 (VPP5) x CP2 -> DP 2."""

spec, llama3_70b = recipe_functions(SPEC, "Llama-3 70B", __name__)
