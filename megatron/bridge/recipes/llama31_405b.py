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

Importing this module loads no torch: :data:`SPEC` plans the recipe anywhere,
:func:`llama31_405b` builds its ``ConfigContainer``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megatron.bridge.recipes.llama import LLAMA3_VOCAB_SIZE
from megatron.bridge.recipes.spec import ModelShape, RecipeSpec

if TYPE_CHECKING:
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
    from megatron.bridge.training.config import ConfigContainer

__all__ = ["PUBLISHED", "SPEC", "llama31_405b", "perf_env_plugin", "spec"]

HIDDEN_SIZE = 16384
"""Model width; also what the userbuffers preset is looked up for."""

SPEC = RecipeSpec(
    name="llama31_405b",
    model=ModelShape(
        provider="megatron.bridge.recipes.llama:llama3_provider",
        num_layers=126,
        hidden_size=HIDDEN_SIZE,
        num_attention_heads=128,
        num_query_groups=8,
        ffn_hidden_size=53248,
        vocab_size=LLAMA3_VOCAB_SIZE,
        seq_length=8192,
        options=(("rope_scaling", True),),
        # The embedding and the loss always count as pipeline layers, so (126 + 2) / pp_size
        # must be divisible by vpp_size.
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    ),
    num_gpus=1024,
    gpu="h100",
    tp_size=8,
    pp_size=8,
    vpp_size=8,
    cp_size=2,
    micro_batch_size=1,
    global_batch_size=512,
    lr=8e-5,
    min_lr=8e-6,
)
"""The recipe in plain values: 1024 H100 GPUs, TP8 x PP8 (VPP8) x CP2 -> DP 8."""

PUBLISHED = SPEC
"""The published run (``num_gpus``, ``gpu``): the spec itself."""


def spec(**overrides: Any) -> RecipeSpec:
    """The recipe's spec with keyword overrides (``gpu``, ``precision``, sizes, ...); no torch."""
    return SPEC.with_overrides(**overrides)


def llama31_405b(**overrides: Any) -> ConfigContainer:
    """Llama-3.1 405B: a complete ``ConfigContainer`` in the published layout, sizes overridable.

    Keywords: ``gpu``, ``precision``, ``tp_size``, ``pp_size``, ``vpp_size`` (None or 1: no
    interleaving), ``cp_size``, ``seq_length``, ``micro_batch_size``, ``global_batch_size``,
    ``tp_comm_overlap``. ``gpu`` and ``precision`` pick the userbuffers preset (``None`` with a
    logged warning when none is published for the resulting shape).
    """
    return spec(**overrides).build()


def perf_env_plugin(
    cfg: ConfigContainer,
    *,
    num_gpus: int = PUBLISHED.num_gpus,
    gpu: str = PUBLISHED.gpu,
    **overrides: Any,
) -> PerfEnvPlugin:
    """NeMo-Run ``PerfEnvPlugin`` for a config of this recipe (sizes read from ``cfg``)."""
    from megatron.bridge.recipes import common

    return common.perf_env_plugin(cfg, num_gpus=num_gpus, gpu=gpu, **overrides)
