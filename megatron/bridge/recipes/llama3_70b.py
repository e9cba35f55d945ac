"""Llama-3 70B pre-training recipe, in the layout NVIDIA publishes for H100.

Model: 80 layers, hidden 8192, 64 heads in 8 query groups, FFN 28672, sequence 8192 (Llama-3
architecture, see :mod:`megatron.bridge.recipes.llama`). Published layout: TP4 (with sequence
parallelism) x PP4 with 5 virtual stages per rank x CP2, micro-batch 1. We run it on 64 GPUs
(DP 2) with global batch 128, the size of NVIDIA's published Llama-3 70B H100 runs.

Preset: ``userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192``. Its name has no ``_cp`` part
although the layout is CP2; NVIDIA's recipe uses it at CP2 all the same, and so does the preset
choice here (exact CP first, then the CP-less name, for every recipe and the CLI alike).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megatron.bridge.recipes import common
from megatron.bridge.recipes.common import Gpu, Precision, PublishedRun
from megatron.bridge.recipes.llama import llama3_provider
from megatron.bridge.training.config import ConfigContainer

if TYPE_CHECKING:
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

__all__ = ["PUBLISHED", "llama3_70b", "perf_env_plugin"]

PUBLISHED = PublishedRun(num_gpus=64, gpu="h100")
"""The published run: 64 H100 GPUs (TP4 x PP4 x CP2 -> DP 2)."""

HIDDEN_SIZE = 8192
"""Model width; also what the userbuffers preset is looked up for."""


def llama3_70b(
    *,
    gpu: Gpu = PUBLISHED.gpu,
    precision: Precision = "bf16",
    tp_size: int = 4,
    pp_size: int = 4,
    vpp_size: int | None = 5,
    cp_size: int = 2,
    seq_length: int = 8192,
    micro_batch_size: int = 1,
    global_batch_size: int = 128,
    tp_comm_overlap: bool = True,
) -> ConfigContainer:
    """Llama-3 70B: a complete ``ConfigContainer`` in the published layout, sizes overridable.

    ``gpu`` and ``precision`` pick the userbuffers preset (``None`` with a logged warning when
    none is published for the resulting shape). ``vpp_size`` None or 1 turns interleaving off.
    """
    model = llama3_provider(
        num_layers=80,
        hidden_size=HIDDEN_SIZE,
        num_attention_heads=64,
        num_query_groups=8,
        ffn_hidden_size=28672,
        seq_length=seq_length,
    )
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
