"""GPT-3 175B pre-training recipe, in the layout NVIDIA publishes for H100.

Model: 96 layers, hidden 12288, 96 heads, FFN 4 x hidden, sequence 2048, learned absolute
positions, LayerNorm, GeLU, tied embeddings. Published layout: TP4 (with sequence
parallelism) x PP8 with 6 virtual stages per rank, micro-batch 1, global batch 2048, on 1024
GPUs (DP 32), bf16 with the ``userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048`` preset.

Every size is a keyword argument; the userbuffers preset follows them. Importing this module
loads no torch: :data:`SPEC` plans the recipe anywhere, :func:`gpt3_175b` builds its
``ConfigContainer``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from megatron.bridge.recipes.spec import ModelShape, RecipeSpec

if TYPE_CHECKING:
    from megatron.bridge.models.gpt_provider import GPTModelProvider
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
    from megatron.bridge.training.config import ConfigContainer

__all__ = ["PUBLISHED", "SPEC", "gpt3_175b", "gpt3_provider", "perf_env_plugin", "spec"]

HIDDEN_SIZE = 12288
"""Model width; also what the userbuffers preset is looked up for."""

SPEC = RecipeSpec(
    name="gpt3_175b",
    model=ModelShape(
        provider="megatron.bridge.recipes.gpt3_175b:gpt3_provider",
        num_layers=96,
        hidden_size=HIDDEN_SIZE,
        num_attention_heads=96,
        ffn_hidden_size=4 * HIDDEN_SIZE,
        vocab_size=51200,
        seq_length=2048,
    ),
    num_gpus=1024,
    gpu="h100",
    tp_size=4,
    pp_size=8,
    vpp_size=6,
    micro_batch_size=1,
    global_batch_size=2048,
    lr=6e-5,
    min_lr=6e-6,
)
"""The recipe in plain values: 1024 H100 GPUs, TP4 x PP8 (VPP6) -> DP 32."""

PUBLISHED = SPEC
"""The published run (``num_gpus``, ``gpu``): the spec itself."""


def spec(**overrides: Any) -> RecipeSpec:
    """The recipe's spec with keyword overrides (``gpu``, ``precision``, sizes, ...); no torch."""
    return SPEC.with_overrides(**overrides)


def gpt3_175b(**overrides: Any) -> ConfigContainer:
    """GPT-3 175B: a complete ``ConfigContainer`` in the published layout, sizes overridable.

    Keywords: ``gpu``, ``precision``, ``tp_size``, ``pp_size``, ``vpp_size`` (None or 1: no
    interleaving), ``cp_size``, ``seq_length``, ``micro_batch_size``, ``global_batch_size``,
    ``tp_comm_overlap``. ``gpu`` and ``precision`` pick the userbuffers preset (``None`` with a
    logged warning when none is published for the resulting shape).
    """
    return spec(**overrides).build()


def gpt3_provider(**dims: Any) -> GPTModelProvider:
    """The GPT-3 architecture with these dimensions (parallel sizes left at 1)."""
    from megatron.bridge.models.gpt_provider import GPTModelProvider

    return GPTModelProvider(
        **dims,
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
