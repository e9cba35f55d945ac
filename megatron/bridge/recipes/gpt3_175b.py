"""GPT-3 175B pre-training recipe, in the layout NVIDIA publishes for H100.

Model: 96 layers, hidden 12288, 96 heads, FFN 4 x hidden, sequence 2048, learned absolute
positions, LayerNorm, GeLU, tied embeddings. Published layout: TP4 (with sequence
parallelism) x PP8 with 6 virtual stages per rank, micro-batch 1, global batch 2048, on 1024
GPUs (DP 32), bf16 with the ``userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048`` preset.

Every size is a keyword argument; the userbuffers preset follows them (see
:func:`megatron.bridge.recipes.common.select_userbuffers_preset`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.recipes import common
from megatron.bridge.recipes.common import Gpu, Precision, PublishedRun
from megatron.bridge.training.config import ConfigContainer

if TYPE_CHECKING:
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

__all__ = ["PUBLISHED", "gpt3_175b", "perf_env_plugin"]

PUBLISHED = PublishedRun(num_gpus=1024, gpu="h100")
"""The published run: 1024 H100 GPUs (TP4 x PP8 -> DP 32)."""

HIDDEN_SIZE = 12288
"""Model width; also what the userbuffers preset is looked up for."""


def gpt3_175b(
    *,
    gpu: Gpu = PUBLISHED.gpu,
    precision: Precision = "bf16",
    tp_size: int = 4,
    pp_size: int = 8,
    vpp_size: int | None = 6,
    cp_size: int = 1,
    seq_length: int = 2048,
    micro_batch_size: int = 1,
    global_batch_size: int = 2048,
    tp_comm_overlap: bool = True,
) -> ConfigContainer:
    """GPT-3 175B: a complete ``ConfigContainer`` in the published layout, sizes overridable.

    ``gpu`` and ``precision`` pick the userbuffers preset (``None`` with a logged warning when
    none is published for the resulting shape). ``vpp_size`` None or 1 turns interleaving off.
    """
    model = GPTModelProvider(
        num_layers=96,
        hidden_size=HIDDEN_SIZE,
        num_attention_heads=96,
        ffn_hidden_size=4 * HIDDEN_SIZE,
        seq_length=seq_length,
        vocab_size=51200,
        position_embedding_type="learned_absolute",
        share_embeddings_and_output_weights=True,
        normalization="LayerNorm",
        layernorm_zero_centered_gamma=True,
        add_bias_linear=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=0.006,
        bias_activation_fusion=True,
        bias_dropout_fusion=True,
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
        lr=6e-5,
        min_lr=6e-6,
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
