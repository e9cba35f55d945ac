"""Llama-3 8B pre-training recipe, in the layouts NVIDIA publishes.

Model: 32 layers, hidden 4096, 32 heads in 8 query groups, FFN 14336, sequence 8192 (Llama-3
architecture, see :mod:`megatron.bridge.recipes.llama`).

Published layouts (Megatron-Bridge ``docs/performance-summary-archive.md``, 25.11, the most
recent release with a Llama-3 8B row, and ``perf_recipes/llama/<system>/llama3.py``): 8 GPUs,
global batch 128, TP1 PP1; micro-batch 2 on GB300, GB200 and B200 in FP8 current scaling or
MXFP8; micro-batch 1 on H100 in FP8 current scaling, where the published run shards with
Megatron-FSDP (FSDP 8). The job description has no Megatron-FSDP field: that run is planned
as data parallelism with the distributed optimizer.

Importing this module loads no torch: :data:`SPEC` plans the recipe anywhere,
:func:`llama3_8b` builds its ``ConfigContainer``.
"""

from __future__ import annotations

from megatron.bridge.recipes.llama import LLAMA3_ARCHITECTURE, LLAMA3_PROVIDER
from megatron.bridge.recipes.published import run
from megatron.bridge.recipes.spec import published_spec, recipe_functions
from megatron.bridge.training.job import ModelDescription

__all__ = ["SPEC", "llama3_8b", "spec"]

_SOURCE = (
    "Megatron-Bridge docs/performance-summary-archive.md 25.11; perf_recipes/llama/{}/llama3.py"
)

SPEC = published_spec(
    "llama3_8b",
    provider=LLAMA3_PROVIDER,
    model=ModelDescription(
        **LLAMA3_ARCHITECTURE,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        seq_length=8192,
    ),
    runs=(
        *(
            run(gpu, precision, gpus=8, gbs=128, mbs=2, source=_SOURCE.format(gpu))
            for gpu in ("gb300", "gb200", "b200")
            for precision in ("fp8_cs", "fp8_mx")
        ),
        run("h100", "fp8_cs", gpus=8, gbs=128, mbs=1, source=_SOURCE.format("h100")),
    ),
)
"""The recipe in plain values: 8 GB300 GPUs, FP8 current scaling, TP1 -> DP 8, micro-batch 2."""

spec, llama3_8b = recipe_functions(SPEC, "Llama-3 8B", __name__)
