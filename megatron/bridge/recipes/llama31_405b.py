"""Llama-3.1 405B pre-training recipe, in the layout NVIDIA publishes for H100.

Model: 126 layers, hidden 16384, 128 heads in 8 query groups, FFN 53248, sequence 8192,
Llama-3.1 RoPE scaling (Llama-3 architecture, see :mod:`megatron.bridge.recipes.llama_provider`).
Published layout: TP8 (with sequence parallelism) x PP8 with 8 virtual stages per rank x CP2,
micro-batch 1. 126 layers do not split into 8 x 8 = 64 pipeline chunks, so the layout counts
the embedding and the loss as one layer each (``account_for_embedding_in_pipeline_split`` and
``account_for_loss_in_pipeline_split``): 128 layers, 2 per chunk; the first chunk holds the
embedding and one transformer layer, the last one transformer layer and the loss. We run it on
1024 GPUs (DP 8) with global batch 512.

Preset: ``userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192`` (exact lookup, CP included).

Published Blackwell and FP8 layouts (``gpu=`` / ``precision=`` pick them; Megatron-Bridge
``docs/performance-summary-archive.md`` 26.06, the most recent release with Llama-3.1 405B
rows, and ``perf_recipes/llama/<system>/llama31.py``), global batch 1536, micro-batch 1: on
256 GB300 GPUs FP8 current scaling and NVFP4 at TP4 x PP8 (VPP4), MXFP8 at TP2 x PP8 (VPP4) x
CP2; on 256 GB200 GPUs FP8 current scaling at TP4 x PP16 (VPP4), MXFP8 and NVFP4 at TP4 x PP16
(VPP8); on 1024 H100 GPUs FP8 current scaling at TP8 x PP8 (VPP8) x CP2.
"""

from __future__ import annotations

from megatron.bridge.recipes.llama_provider import LLAMA3_PROVIDER
from megatron.bridge.recipes.models import recipe_model
from megatron.bridge.recipes.published import published_runs
from megatron.bridge.recipes.spec import recipe_functions, spec_of

__all__ = ["SPEC", "llama31_405b", "spec"]

SPEC = spec_of(
    "llama31_405b",
    provider=LLAMA3_PROVIDER,
    provider_options=(("rope_scaling", True),),
    model=recipe_model("llama31_405b"),
    world_size=1024,
    gpu="h100",
    global_batch_size=512,
    lr=8e-5,
    min_lr=8e-6,
    published=published_runs("llama31_405b"),
)
"""The recipe in plain values: 1024 H100 GPUs, TP8 x PP8 (VPP8) x CP2 -> DP 8."""

spec, llama31_405b = recipe_functions(SPEC, "Llama-3.1 405B", __name__)
