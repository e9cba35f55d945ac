"""megatron-core's rules on what a layer is built from: the fused bias-activation kernels an MLP
activation has, multi-latent attention's missing output gate, and the CP exchange of each
layer's attention.
"""

from __future__ import annotations

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.inputs import refuse_both

__all__ = ["check_bias_activation_fusion", "check_cp_comm_type", "check_mla_output_gate"]


def check_bias_activation_fusion(
    *,
    bias_activation_fusion: bool,
    activation_func: str,
    gated_linear_unit: bool,
    add_bias_linear: bool,
    glu_linear_offset: float = 0.0,
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__, bias_activation_fusion: fused
    kernels exist for gelu, silu (swiglu) and quick_gelu (gated only), the gelu one adds a
    bias, so an ungated gelu MLP needs add_bias_linear, and only the quick-GeGLU one adds a
    ``glu_linear_offset``."""
    if not bias_activation_fusion:
        return
    fix = "or set bias_activation_fusion=False"
    if activation_func not in ("gelu", "silu", "quick_gelu"):
        raise ValueError(
            f"bias_activation_fusion=True fuses gelu, silu (swiglu) or quick_gelu, not "
            f"activation_func={activation_func!r}: change the activation {fix}."
        )
    if activation_func == "gelu" and not gated_linear_unit and not add_bias_linear:
        raise ValueError(
            "bias_activation_fusion=True with an ungated gelu MLP needs add_bias_linear=True (the "
            f"fused kernel adds the fc1 bias): set add_bias_linear=True {fix}."
        )
    if activation_func == "quick_gelu" and not gated_linear_unit:
        raise ValueError(
            "bias_activation_fusion=True with quick_gelu needs gated_linear_unit=True: set it "
            f"{fix}."
        )
    if glu_linear_offset != 0.0 and activation_func != "quick_gelu":
        raise ValueError(
            f"bias_activation_fusion=True with glu_linear_offset={glu_linear_offset}: only the "
            f"fused quick-GeGLU kernel adds the offset, not activation_func={activation_func!r}. "
            f"Use quick_gelu, set glu_linear_offset=0.0 {fix}."
        )


def check_mla_output_gate(model: ModelDescription) -> None:
    """Mirrors transformer_config.py MLATransformerConfig.__post_init__ (the config an MLA model
    is built from): NotImplementedError for an output gate."""
    refuse_both(
        model,
        "attention_output_gate",
        "multi_latent_attention",
        "megatron-core's MLA has no output gate. Set attention_output_gate=False, or use "
        "standard attention.",
        joined="with",
    )


def check_cp_comm_type(model: ModelDescription) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__ on ``cp_comm_type`` under
    CP: the per-layer form holds one entry per layer, and DeepSeek's sparse attention
    (``experimental_attention_variant="dsa"``) exchanges its sequence by all-gather only."""
    m = model
    if m.context_parallel_size <= 1:
        return
    kinds = m.cp_comm_type
    if isinstance(kinds, tuple) and m.num_layers is not None and len(kinds) != m.num_layers:
        raise ValueError(
            f"cp_comm_type has {len(kinds)} entries for num_layers={m.num_layers}: give one "
            "per layer, or one string for every layer."
        )
    if m.experimental_attention_variant == "dsa":
        listed = kinds if isinstance(kinds, tuple) else (kinds,)
        if not all(k is not None and k.replace("_", "").lower() == "allgather" for k in listed):
            raise ValueError(
                f"experimental_attention_variant='dsa' with context_parallel_size="
                f"{m.context_parallel_size} exchanges the sequence by all-gather only: set "
                f"cp_comm_type='all_gather' (it is {kinds!r})."
            )
