"""megatron-core's rules on what a layer is built from: the fused bias-activation kernels an MLP
activation has, and multi-latent attention's missing output gate.
"""

from __future__ import annotations

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.inputs import refuse_both

__all__ = ["check_bias_activation_fusion", "check_mla_output_gate"]


def check_bias_activation_fusion(
    *,
    bias_activation_fusion: bool,
    activation_func: str,
    gated_linear_unit: bool,
    add_bias_linear: bool,
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__, bias_activation_fusion: fused
    kernels exist for gelu, silu (swiglu) and quick_gelu (gated only), and the gelu one adds a
    bias, so an ungated gelu MLP needs add_bias_linear."""
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
