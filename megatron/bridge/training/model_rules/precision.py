"""megatron-core's precision rules on a model description: one half precision, the FP8 and FP4
recipes, the decoder layers kept in BF16 under FP8, and the Transformer Engine an MoE model
needs for FP8.
"""

from __future__ import annotations

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.inputs import (
    UNDESCRIBED_DEFAULTS,
    refuse_both,
    te_below,
    te_found,
)

__all__ = [
    "check_bf16_layers",
    "check_fp4",
    "check_fp8_recipe",
    "check_half_precision",
    "check_moe_fp8_te",
]


def check_half_precision(model: ModelDescription) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: "Only one of fp16 and
    bf16"."""
    refuse_both(
        model,
        "fp16",
        "bf16",
        "megatron-core trains in one half precision. Set one of fp16 or bf16 to False.",
    )


def check_fp8_recipe(*, fp8: str | None, fp8_recipe: str) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: fp8_recipe='custom' needs
    fp8_quantizer_factory."""
    if fp8 and fp8_recipe == "custom" and not UNDESCRIBED_DEFAULTS["fp8_quantizer_factory"]:
        raise ValueError(
            f"fp8={fp8!r} with fp8_recipe='custom' needs fp8_quantizer_factory, which the job "
            "description does not hold (megatron-core's default: None). Choose fp8_recipe "
            "delayed, tensorwise, mxfp8 or blockwise."
        )


def check_bf16_layers(m: ModelDescription) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__ (under fp8 only): delayed
    scaling cannot keep layers in BF16, and each count is 0 to num_layers // PP."""
    if not (m.fp8 and m.first_last_layers_bf16):
        return
    if m.fp8_recipe == "delayed":
        raise ValueError(
            "first_last_layers_bf16=True with fp8_recipe='delayed': megatron-core cannot keep "
            "layers in BF16 under delayed scaling. Use fp8_recipe='tensorwise' (current "
            "scaling) or set first_last_layers_bf16=False."
        )
    if m.num_layers is None:
        return
    most = m.num_layers // m.pipeline_model_parallel_size
    for name in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
        count = getattr(m, name)
        if not 0 <= count <= most:
            raise ValueError(
                f"{name}={count}: megatron-core keeps 0 to num_layers // "
                f"pipeline_model_parallel_size = {most} layers in BF16 at each end; set {name} "
                f"to at most {most} or first_last_layers_bf16=False."
            )


def check_fp4(*, fp8: str | None, fp4: str | None, fp4_recipe: str) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__ ("FP4 validation"): FP4 and
    FP8 GEMMs exclude each other, and fp4_recipe='custom' needs fp4_quantizer_factory."""
    if fp4 and fp8:
        raise ValueError(
            f"fp4={fp4!r} and fp8={fp8!r} are both set; megatron-core trains in one of them. "
            "Set fp8=None for FP4 training, or fp4=None."
        )
    if fp4 and fp4_recipe == "custom" and not UNDESCRIBED_DEFAULTS["fp4_quantizer_factory"]:
        raise ValueError(
            f"fp4={fp4!r} with fp4_recipe='custom' needs fp4_quantizer_factory, which the job "
            "description does not hold (megatron-core's default: None). Choose fp4_recipe "
            "nvfp4."
        )


def check_moe_fp8_te(
    *, num_moe_experts: int | None, fp8: str | None, te_version: str | None
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: MoE FP8 training needs
    transformer-engine >= 1.7.0.dev0 (older TE fails on experts that receive no tokens)."""
    if num_moe_experts and fp8 and te_below(te_version, "1.7.0.dev0"):
        raise ValueError(
            f"num_moe_experts={num_moe_experts} with fp8={fp8!r} needs Transformer Engine >= 1.7 "
            f"(found {te_found(te_version)}). Upgrade Transformer Engine or set fp8=None."
        )
