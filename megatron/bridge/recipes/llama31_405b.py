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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megatron.bridge.recipes import common
from megatron.bridge.recipes.common import Gpu, Precision, PublishedRun
from megatron.bridge.recipes.llama import llama3_provider
from megatron.bridge.training.config import ConfigContainer

if TYPE_CHECKING:
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

__all__ = ["PUBLISHED", "llama31_405b", "perf_env_plugin"]

PUBLISHED = PublishedRun(num_gpus=1024, gpu="h100")
"""The published run: 1024 H100 GPUs (TP8 x PP8 x CP2 -> DP 8)."""

HIDDEN_SIZE = 16384
"""Model width; also what the userbuffers preset is looked up for."""


def llama31_405b(
    *,
    gpu: Gpu = PUBLISHED.gpu,
    precision: Precision = "bf16",
    tp_size: int = 8,
    pp_size: int = 8,
    vpp_size: int | None = 8,
    cp_size: int = 2,
    seq_length: int = 8192,
    micro_batch_size: int = 1,
    global_batch_size: int = 512,
    tp_comm_overlap: bool = True,
) -> ConfigContainer:
    """Llama-3.1 405B: a complete ``ConfigContainer`` in the published layout, sizes overridable.

    ``gpu`` and ``precision`` pick the userbuffers preset (``None`` with a logged warning when
    none is published for the resulting shape). The embedding and the loss always count as
    pipeline layers, so ``(126 + 2) / pp_size`` must be divisible by ``vpp_size``.
    """
    model = llama3_provider(
        num_layers=126,
        hidden_size=HIDDEN_SIZE,
        num_attention_heads=128,
        num_query_groups=8,
        ffn_hidden_size=53248,
        seq_length=seq_length,
        rope_scaling=True,
    )
    model.account_for_embedding_in_pipeline_split = True
    model.account_for_loss_in_pipeline_split = True
    return common.assemble(
        model=model,
        gpu=gpu,
        precision=precision,
        tp_size=tp_size,
        pp_size=pp_size,
        vpp_size=vpp_size,
        cp_size=cp_size,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        tp_comm_overlap=tp_comm_overlap,
        lr=8e-5,
        min_lr=8e-6,
    )


def perf_env_plugin(
    cfg: ConfigContainer,
    *,
    num_gpus: int = PUBLISHED.num_gpus,
    gpu: Gpu = PUBLISHED.gpu,
    **overrides: Any,
) -> PerfEnvPlugin:
    """NeMo-Run ``PerfEnvPlugin`` for a config of this recipe (sizes read from ``cfg``)."""
    return common.perf_env_plugin(cfg, num_gpus=num_gpus, gpu=gpu, **overrides)
