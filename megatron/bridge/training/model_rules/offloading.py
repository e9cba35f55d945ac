"""megatron-core's activation-offloading rules: layer-wise CPU offloading, fine-grained
offloading of chosen modules (:data:`OFFLOAD_MODULES`), and which offloading runs under which
CUDA graphs.
"""

from __future__ import annotations

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.inputs import refuse_both

__all__ = [
    "OFFLOAD_MODULES",
    "check_cpu_offloading",
    "check_fine_grained_offloading",
    "check_offload_cuda_graphs",
]


def check_cpu_offloading(
    *,
    cpu_offloading: bool,
    cpu_offloading_num_layers: int,
    num_layers: int | None,
    pipeline_model_parallel_size: int,
    recompute_granularity: str | None,
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: offloaded layers below
    num_layers, no pipeline parallelism, no activation recompute."""
    if not cpu_offloading:
        return
    if num_layers is not None and not 0 <= cpu_offloading_num_layers < num_layers:
        raise ValueError(
            f"cpu_offloading_num_layers={cpu_offloading_num_layers}: megatron-core offloads "
            f"fewer layers than num_layers={num_layers}; set it between 0 and {num_layers - 1}."
        )
    if pipeline_model_parallel_size > 1:
        raise ValueError(
            f"cpu_offloading=True with pipeline_model_parallel_size={pipeline_model_parallel_size}:"
            " megatron-core offloads activations only without pipeline parallelism; set "
            "cpu_offloading=False or PP to 1."
        )
    if recompute_granularity is not None:
        raise ValueError(
            f"cpu_offloading=True with recompute_granularity={recompute_granularity!r}: "
            "megatron-core does not offload with activation recompute; choose one."
        )


#: The modules megatron-core's fine-grained activation offloading takes (transformer_config.py
#: TransformerConfig.__post_init__, ``allowed_modules``).
OFFLOAD_MODULES = (
    "attn_norm",
    "qkv_linear",
    "core_attn",
    "attn_proj",
    "mlp_norm",
    "expert_fc1",
    "moe_act",
    "fused_group_mlp",
)


def check_fine_grained_offloading(
    model: ModelDescription, recompute_modules: tuple[str, ...]
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__ (fine-grained activation
    offloading): not with cpu_offloading, a non-empty list of known modules, attn_proj only
    with core_attn, nothing inside the MoE layer when selective recompute rebuilds all of it,
    a non-negative size threshold, a fraction in [0, 1], fused_group_mlp only with TE's op
    fuser and without expert_fc1 / moe_act."""
    m = model
    if not m.fine_grained_activation_offloading:
        return
    refuse_both(
        m,
        "fine_grained_activation_offloading",
        "cpu_offloading",
        "megatron-core runs one activation offloading at a time; set one of them to False.",
        joined="with",
    )
    modules = m.offload_modules
    if not isinstance(modules, (tuple, list)) or not modules:
        raise ValueError(
            f"offload_modules={modules!r}: fine_grained_activation_offloading needs a non-empty "
            f"list of modules out of {', '.join(OFFLOAD_MODULES)}."
        )
    unknown = sorted({str(name) for name in modules} - set(OFFLOAD_MODULES))
    if unknown:
        raise ValueError(
            f"offload_modules has {', '.join(map(repr, unknown))}: megatron-core offloads "
            f"{', '.join(OFFLOAD_MODULES)}."
        )
    if "attn_proj" in modules and "core_attn" not in modules:
        raise ValueError(
            "offload_modules has attn_proj without core_attn: attn_proj's input is core "
            "attention's output, which core attention's backward needs; add core_attn."
        )
    inside_moe = sorted({"moe_act", "expert_fc1", "fused_group_mlp"} & set(modules))
    if m.recompute_granularity == "selective" and "moe" in recompute_modules and inside_moe:
        raise ValueError(
            f"offload_modules has {', '.join(inside_moe)} while recompute_modules has moe: the "
            "whole MoE layer is recomputed, so nothing inside it can be offloaded. Remove moe "
            "from recompute_modules or those modules from offload_modules."
        )
    size = m.min_offloaded_tensor_size
    if not (isinstance(size, int) and not isinstance(size, bool)) or size < 0:
        raise ValueError(f"min_offloaded_tensor_size={size!r}: give a non-negative element count.")
    fraction = m.activation_offload_fraction
    if (
        not isinstance(fraction, (int, float))
        or isinstance(fraction, bool)
        or not 0 <= fraction <= 1
    ):
        raise ValueError(f"activation_offload_fraction={fraction!r}: give a share between 0 and 1.")
    if "fused_group_mlp" in modules:
        if not m.use_transformer_engine_op_fuser:
            raise ValueError(
                "offload_modules has fused_group_mlp without use_transformer_engine_op_fuser: "
                "the fused grouped MLP runs in Transformer Engine's op fuser; set it to True."
            )
        partial = sorted({"expert_fc1", "moe_act"} & set(modules))
        if partial:
            raise ValueError(
                f"offload_modules has fused_group_mlp with {', '.join(partial)}: fused_group_mlp "
                "offloads the whole fused grouped MLP; remove the others."
            )


_MOE_OFFLOAD_MODULES = frozenset({"expert_fc1", "moe_act", "fused_group_mlp"})


def check_offload_cuda_graphs(
    model: ModelDescription, *, cuda_graph_impl: str, modules: tuple[str, ...]
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__ (CUDA graphs): layer-wise
    cpu_offloading only with full_iteration graphs; fine-grained offloading with
    transformer_engine or full_iteration graphs, or local graphs of parts of the MoE layer that
    offload only inside the experts; never with the moe capture region; full_iteration needs
    fine_grained_offloading_max_inflight_offloads. ``modules`` are the capture regions
    megatron-core is left with (``cuda_graph_capture``; empty: the whole layer)."""
    m = model
    if cuda_graph_impl == "none":
        return
    if m.cpu_offloading and cuda_graph_impl != "full_iteration":
        raise ValueError(
            f"cpu_offloading=True with cuda_graph_impl={cuda_graph_impl!r}: megatron-core "
            "offloads layer-wise only under full_iteration graphs; set cpu_offloading=False or "
            "cuda_graph_impl to 'none' or 'full_iteration'."
        )
    if not m.fine_grained_activation_offloading:
        return
    offloaded = set(m.offload_modules)
    if cuda_graph_impl == "local":
        outside = sorted(offloaded - _MOE_OFFLOAD_MODULES)
        if outside:
            raise ValueError(
                f"fine-grained offloading of {', '.join(outside)} with cuda_graph_impl='local': "
                "local graphs allow offloading only expert_fc1, moe_act and fused_group_mlp; "
                "remove the others or use cuda_graph_impl='transformer_engine'."
            )
        if not modules:
            raise ValueError(
                "fine-grained offloading with cuda_graph_impl='local' capturing whole layers: "
                "megatron-core needs cuda_graph_modules naming parts of the layer (e.g. attn, "
                "moe_router)."
            )
    if "moe" in modules:
        raise ValueError(
            f"fine-grained offloading with cuda_graph_modules={list(modules)}: megatron-core "
            "does not offload with the moe capture region; remove moe from cuda_graph_modules."
        )
    if cuda_graph_impl == "full_iteration" and (
        m.fine_grained_offloading_max_inflight_offloads is None
        or m.fine_grained_offloading_max_inflight_offloads < 0
    ):
        raise ValueError(
            "fine-grained offloading with cuda_graph_impl='full_iteration' needs "
            "fine_grained_offloading_max_inflight_offloads (a count >= 0, e.g. 1)."
        )
