"""Llama-3.1 405B pre-training recipe, in the layout NVIDIA publishes for H100.

Model: 126 layers, hidden 16384, 128 heads in 8 query groups, FFN 53248, sequence 8192,
Llama-3.1 RoPE scaling (Llama-3 architecture, see :mod:`megatron.bridge.recipes.llama`).
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

Importing this module loads no torch: :data:`SPEC` plans the recipe anywhere,
:func:`llama31_405b` builds its ``ConfigContainer``.
"""

from __future__ import annotations

from megatron.bridge.recipes.llama import LLAMA3_ARCHITECTURE, LLAMA3_PROVIDER
from megatron.bridge.recipes.published import run
from megatron.bridge.recipes.spec import recipe_functions, spec_of
from megatron.bridge.training.job import ModelDescription

__all__ = ["SPEC", "llama31_405b", "spec"]

_SOURCE = (
    "Megatron-Bridge docs/performance-summary-archive.md 26.06; "
    "perf_recipes/llama/{0}/llama31.py llama31_405b_pretrain_{1}gpu_{0}_{2}_config"
)

SPEC = spec_of(
    "llama31_405b",
    provider=LLAMA3_PROVIDER,
    provider_options=(("rope_scaling", True),),
    model=ModelDescription(
        **LLAMA3_ARCHITECTURE,
        num_layers=126,
        hidden_size=16384,
        num_attention_heads=128,
        num_query_groups=8,
        ffn_hidden_size=53248,
        seq_length=8192,
        # The embedding and the loss always count as pipeline layers, so (126 + 2) / PP must
        # divide by VPP.
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
        tensor_model_parallel_size=8,
        pipeline_model_parallel_size=8,
        virtual_pipeline_model_parallel_size=8,
        context_parallel_size=2,
    ),
    world_size=1024,
    gpu="h100",
    global_batch_size=512,
    lr=8e-5,
    min_lr=8e-6,
    published=(
        run(
            "gb300",
            "fp8_cs",
            gpus=256,
            gbs=1536,
            tp=4,
            pp=8,
            vp=4,
            source=_SOURCE.format("gb300", "256", "fp8cs"),
        ),
        run(
            "gb300",
            "fp8_mx",
            gpus=256,
            gbs=1536,
            tp=2,
            pp=8,
            vp=4,
            cp=2,
            source=_SOURCE.format("gb300", "256", "fp8mx"),
        ),
        run(
            "gb300",
            "nvfp4",
            gpus=256,
            gbs=1536,
            tp=4,
            pp=8,
            vp=4,
            source=_SOURCE.format("gb300", "256", "nvfp4"),
        ),
        run(
            "gb200",
            "fp8_cs",
            gpus=256,
            gbs=1536,
            tp=4,
            pp=16,
            vp=4,
            source=_SOURCE.format("gb200", "256", "fp8cs"),
        ),
        run(
            "gb200",
            "fp8_mx",
            gpus=256,
            gbs=1536,
            tp=4,
            pp=16,
            vp=8,
            source=_SOURCE.format("gb200", "256", "fp8mx"),
        ),
        run(
            "gb200",
            "nvfp4",
            gpus=256,
            gbs=1536,
            tp=4,
            pp=16,
            vp=8,
            source=_SOURCE.format("gb200", "256", "nvfp4"),
        ),
        run(
            "h100",
            "fp8_cs",
            gpus=1024,
            gbs=1536,
            tp=8,
            pp=8,
            vp=8,
            cp=2,
            source=_SOURCE.format("h100", "1024", "fp8cs"),
        ),
    ),
)
"""The recipe in plain values: 1024 H100 GPUs, TP8 x PP8 (VPP8) x CP2 -> DP 8."""

spec, llama31_405b = recipe_functions(SPEC, "Llama-3.1 405B", __name__)
