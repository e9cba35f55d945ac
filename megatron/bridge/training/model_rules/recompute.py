"""megatron-core's activation-recompute rules: the granularity, method and layer count, the
modules selective recompute takes (:data:`RECOMPUTE_MODULES`, :func:`recomputed_modules`) and
what each needs of the model, and recompute under FP8.
"""

from __future__ import annotations

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.inputs import te_below, te_found

__all__ = [
    "RECOMPUTE_MODULES",
    "check_fp8_recompute",
    "check_recompute",
    "check_selective_modules",
    "recomputed_modules",
]

# megatron-core's choices (transformer_config.py).
_RECOMPUTE_GRANULARITIES = ("full", "selective")
_RECOMPUTE_METHODS = ("block", "uniform")
#: The modules megatron-core's selective recompute takes (transformer_config.py
#: TransformerConfig.__post_init__).
RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
    "gdn_norm_out",
)


def recomputed_modules(recompute_modules: tuple[str, ...] | None) -> tuple[str, ...]:
    """The modules megatron-core's selective recompute acts on for ``recompute_modules``.

    Mirrors transformer_config.py TransformerConfig.__post_init__: None means ["core_attn"]; an
    empty list stays empty (nothing is recomputed).
    """
    return ("core_attn",) if recompute_modules is None else tuple(recompute_modules)


def check_recompute(
    *,
    recompute_granularity: str | None,
    recompute_method: str | None,
    recompute_num_layers: int | None,
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: full recompute needs a method
    and a layer count; selective recompute takes no layer count (a method is accepted and unused).
    Nothing is checked when recompute_granularity is None."""
    granularity, method = recompute_granularity, recompute_method
    if granularity is None:
        return
    if granularity not in _RECOMPUTE_GRANULARITIES:
        raise ValueError(
            f"recompute_granularity={granularity!r} must be 'full', 'selective' or None."
        )
    if method is not None and method not in _RECOMPUTE_METHODS:
        raise ValueError(
            f"recompute_method={method!r} must be 'block' or 'uniform' (or None with "
            "selective recompute)."
        )
    if granularity == "full" and method is None:
        raise ValueError(
            "recompute_granularity='full' needs recompute_method 'block' or 'uniform'; set "
            "recompute_method."
        )
    if granularity == "full" and recompute_num_layers is None:
        raise ValueError(
            "recompute_granularity='full' needs recompute_num_layers (layers recomputed per "
            "pipeline stage, or per group with 'uniform'); set it."
        )
    if granularity == "selective" and recompute_num_layers is not None:
        raise ValueError(
            f"recompute_granularity='selective' takes recompute_num_layers=None, got "
            f"{recompute_num_layers}: selective recompute picks modules (recompute_modules), "
            "not layers. Set recompute_num_layers=None or use recompute_granularity='full'."
        )


def check_selective_modules(
    *,
    recompute_modules: tuple[str, ...],
    moe_shared_expert_intermediate_size: int | None,
    moe_shared_expert_overlap: bool,
    model: ModelDescription,
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__, under
    recompute_granularity='selective': known module names (an assert), and the modules that need a
    feature of the model."""
    unknown = sorted(set(recompute_modules) - set(RECOMPUTE_MODULES))
    if unknown:
        raise ValueError(
            f"recompute_modules has unknown names {unknown}; choose from {list(RECOMPUTE_MODULES)}."
        )
    needs = (
        ("moe_act", "moe_grouped_gemm=True", not model.moe_grouped_gemm),
        ("mla_up_proj", "multi_latent_attention=True", not model.multi_latent_attention),
        (
            "gdn_norm_out",
            "experimental_attention_variant='gated_delta_net'",
            model.experimental_attention_variant != "gated_delta_net",
        ),
    )
    for module, feature, missing in needs:
        if module in recompute_modules and missing:
            raise ValueError(
                f"recompute_modules contains {module!r}, which megatron-core supports only with "
                f"{feature}. Set it, or remove {module!r} from recompute_modules."
            )
    if (
        "shared_experts" in recompute_modules
        and moe_shared_expert_intermediate_size is not None
        and moe_shared_expert_overlap
    ):
        raise ValueError(
            "recompute_modules contains 'shared_experts', which cannot be recomputed with "
            "moe_shared_expert_overlap=True. Remove 'shared_experts' or set "
            "moe_shared_expert_overlap=False."
        )


def check_fp8_recompute(
    *,
    recompute_modules: tuple[str, ...],
    fp8: str | None,
    fp8_recipe: str,
    te_version: str | None,
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__, under
    recompute_granularity='selective': recomputing moe_act or layernorm in FP8 needs a
    current-scaling recipe and transformer-engine >= 2.6.0dev0."""
    recomputed = [m for m in ("moe_act", "layernorm") if m in recompute_modules]
    if not fp8 or not recomputed:
        return
    if fp8_recipe == "delayed":
        raise ValueError(
            f"recompute_modules {recomputed} with fp8={fp8!r} do not work with "
            "fp8_recipe='delayed'. Choose another fp8_recipe (tensorwise, mxfp8, blockwise) or "
            f"remove {recomputed} from recompute_modules."
        )
    if te_below(te_version, "2.6.0.dev0"):
        raise ValueError(
            f"recompute_modules {recomputed} with fp8={fp8!r} need Transformer Engine >= 2.6 "
            f"(found {te_found(te_version)}). Upgrade Transformer Engine or remove "
            f"{recomputed} from recompute_modules."
        )
