"""The routed experts' fused grouped MLP under Transformer Engine's op fuser: when megatron-core
builds it (:func:`fused_grouped_mlp`, :func:`fused_glu`) and what megatron-core asserts when it
does (:func:`check_te_op_fuser`, :data:`TE_OP_FUSER_MINIMUM`).
"""

from __future__ import annotations

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.inputs import UNDESCRIBED_DEFAULTS, te_below, te_found

__all__ = ["TE_OP_FUSER_MINIMUM", "check_te_op_fuser", "fused_glu", "fused_grouped_mlp"]


TE_OP_FUSER_MINIMUM = (2, 14)
"""The Transformer Engine version megatron-core's ``TEGroupedMLP`` needs for its fused grouped MLP
(``moe/experts.py`` ``_is_fused_impl_supported``: ``is_te_min_version("2.14.0")``)."""

#: Gated activations whose fused grouped MLP megatron-core builds (SwiGLU, quick-GeGLU).
_FUSED_GLU_ACTIVATIONS = ("silu", "quick_gelu")


def fused_grouped_mlp(m: ModelDescription) -> bool:
    """The routed experts run Transformer Engine's fused grouped MLP: the op fuser
    (``use_transformer_engine_op_fuser``) on grouped-GEMM experts (megatron-core's
    ``TEGroupedMLP``, built for ``moe_grouped_gemm``; ``SequentialMLP`` has no fused path)."""
    return bool(m.use_transformer_engine_op_fuser and m.num_moe_experts and m.moe_grouped_gemm)


def fused_glu(m: ModelDescription) -> bool:
    """The experts' activation is one whose gated fused path megatron-core builds (a SwiGLU or a
    quick-GeGLU)."""
    return m.gated_linear_unit and m.activation_func in _FUSED_GLU_ACTIVATIONS


def check_te_op_fuser(m: ModelDescription, *, etp: int, te_version: str | None) -> None:
    """Mirrors moe/experts.py TEGroupedMLP.__init__, which asserts _is_fused_impl_supported() when
    use_transformer_engine_op_fuser is on (at model build, on every rank). The launch variable
    the gated path also needs is the launch plan's (launch_env.cutedsl_fused_grouped_mlp). Not
    checked: GroupedLinear's scale_bias, which the check also asks of a TE op fuser for experts
    with an fc2 bias (a feature of TE's API, not a version the description holds)."""
    if not fused_grouped_mlp(m):
        return
    field = "use_transformer_engine_op_fuser=True"
    minimum = ".".join(map(str, TE_OP_FUSER_MINIMUM))
    if te_below(te_version, f"{minimum}.0"):
        raise ValueError(
            f"{field} needs Transformer Engine >= {minimum} for the experts' fused grouped MLP "
            f"(found {te_found(te_version)}). Upgrade Transformer Engine or set "
            "use_transformer_engine_op_fuser=False."
        )
    if etp > 1:
        raise ValueError(
            f"{field} with expert_tensor_parallel_size={etp}: the experts' fused grouped MLP runs "
            "without tensor parallelism. Set expert_tensor_parallel_size=1 or "
            "use_transformer_engine_op_fuser=False."
        )
    split = [
        name
        for name in ("expert_fc1", "moe_act")
        if m.fine_grained_activation_offloading and name in m.offload_modules
    ]
    if split:
        raise ValueError(
            f"{field} with offload_modules holding {split}: the fused grouped MLP offloads only "
            "as a whole. Offload 'fused_group_mlp' instead, or set "
            "use_transformer_engine_op_fuser=False."
        )
    if UNDESCRIBED_DEFAULTS["moe_apply_probs_on_input"]:
        raise ValueError(
            f"{field} with moe_apply_probs_on_input=True: the fused grouped MLP scales by the "
            "router probabilities after the activation. Set one of them to False."
        )
    glu = fused_glu(m)
    srelu = (
        m.activation_func == "squared_relu"
        and m.use_fused_weighted_squared_relu
        and not m.gated_linear_unit
    )
    if not (glu or srelu):
        raise ValueError(
            f"{field} with activation_func={m.activation_func!r}, gated_linear_unit="
            f"{m.gated_linear_unit}, use_fused_weighted_squared_relu="
            f"{m.use_fused_weighted_squared_relu}: the experts' fused grouped MLP runs a gated "
            "silu or quick_gelu, or a squared_relu (not gated) with "
            "use_fused_weighted_squared_relu=True. Change the activation fields or set "
            "use_transformer_engine_op_fuser=False."
        )
