"""Llama-3 70B pre-training recipe, in the layout NVIDIA publishes for H100.

Model: 80 layers, hidden 8192, 64 heads in 8 query groups, FFN 28672, sequence 8192 (Llama-3
architecture, see :mod:`megatron.bridge.recipes.llama_provider`). Published layout: TP4 (with sequence
parallelism) x PP4 with 5 virtual stages per rank x CP2, micro-batch 1. We run it on 64 GPUs
(DP 2) with global batch 128, the size of NVIDIA's published Llama-3 70B H100 runs.

Preset: ``userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192``. Its name has no ``_cp`` part
although the layout is CP2; NVIDIA's recipe uses it at CP2 all the same, and so does the preset
choice here (exact CP first, then the CP-less name, for every recipe and the CLI alike).

Published Blackwell and FP8 layouts (``gpu=`` / ``precision=`` pick them; Megatron-Bridge
``docs/performance-summary-archive.md`` 26.04.01, the most recent release with Llama-3 70B
rows, and ``perf_recipes/llama/<system>/llama3.py``), global batch 256 on 64 GPUs: GB300 FP8
current scaling TP1 with micro-batch 2 (Megatron-FSDP in the published run: the job
description has no Megatron-FSDP field, so it is planned as data parallelism with the
distributed optimizer), MXFP8 and NVFP4 TP1 x PP4 (VPP5); GB200 FP8 current scaling as on
GB300, MXFP8 and NVFP4 TP2 x PP4 (VPP5); H100 FP8 current scaling TP4 x PP8 (VPP5); and B200
BF16 TP2 x PP4 (VPP5) x CP2 with the ``userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192``
preset (``llama3_70b_pretrain_64gpu_b200_bf16_config``).
"""

from __future__ import annotations

from megatron.bridge.recipes.llama_provider import LLAMA3_PROVIDER
from megatron.bridge.recipes.models import recipe_model
from megatron.bridge.recipes.published import published_runs
from megatron.bridge.recipes.spec import recipe_functions, spec_of

__all__ = ["SPEC", "llama3_70b", "spec"]

SPEC = spec_of(
    "llama3_70b",
    provider=LLAMA3_PROVIDER,
    model=recipe_model("llama3_70b"),
    world_size=64,
    gpu="h100",
    global_batch_size=128,
    published=published_runs("llama3_70b"),
)
"""The recipe in plain values: 64 H100 GPUs, TP4 x PP4 (VPP5) x CP2 -> DP 2."""

spec, llama3_70b = recipe_functions(SPEC, "Llama-3 70B", __name__)
