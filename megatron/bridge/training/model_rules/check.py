"""The model rules' entry point: :func:`check_model` runs every area's rules on a description."""

from __future__ import annotations

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.architecture import (
    check_bias_activation_fusion,
    check_cp_comm_type,
    check_mla_output_gate,
)
from megatron.bridge.training.model_rules.cuda_graphs import (
    check_cuda_graph_modules,
    check_cuda_graph_recompute,
    cuda_graph_capture,
)
from megatron.bridge.training.model_rules.inputs import version_key
from megatron.bridge.training.model_rules.moe import (
    check_dispatch_backward_te,
    check_flex_backend,
    check_moe_bias,
    check_moe_capacity,
    check_moe_ffn_hidden_size,
    check_router_padding,
    check_router_topk,
    check_shared_experts,
)
from megatron.bridge.training.model_rules.offloading import (
    check_cpu_offloading,
    check_fine_grained_offloading,
    check_offload_cuda_graphs,
)
from megatron.bridge.training.model_rules.precision import (
    check_bf16_layers,
    check_fp4,
    check_fp8_recipe,
    check_half_precision,
    check_moe_fp8_te,
)
from megatron.bridge.training.model_rules.recompute import (
    check_fp8_recompute,
    check_recompute,
    check_selective_modules,
    recomputed_modules,
)
from megatron.bridge.training.model_rules.te_op_fuser import check_te_op_fuser

__all__ = ["check_model"]


def check_model(model: ModelDescription, *, te_version: str | None = None) -> None:
    """Raise ``ValueError`` for a model megatron-core's ``TransformerConfig`` would reject.

    Mirrors the rules of megatron-core's ``TransformerConfig.__post_init__`` (and
    ``ModelParallelConfig.__post_init__``) that read the description's fields, each error naming
    the field(s) and the fix; see the package docstring for what is left to the layout check and
    to the comm-overlap plan. ``te_version`` is the Transformer Engine version where the job runs
    (``"0.0.0"`` when it is not installed, as megatron-core reads it); None means unknown, and the
    minimum-version rules are skipped. Shape fields left None (unknown) are read by no rule here.
    """
    m = model
    if te_version is not None:
        version_key(te_version)
    etp = (
        m.tensor_model_parallel_size
        if m.expert_tensor_parallel_size is None
        else m.expert_tensor_parallel_size
    )
    recompute_modules = recomputed_modules(m.recompute_modules)

    check_half_precision(m)
    check_bias_activation_fusion(
        bias_activation_fusion=m.bias_activation_fusion,
        activation_func=m.activation_func,
        gated_linear_unit=m.gated_linear_unit,
        add_bias_linear=m.add_bias_linear,
        glu_linear_offset=m.glu_linear_offset,
    )
    check_fp8_recipe(fp8=m.fp8, fp8_recipe=m.fp8_recipe)
    check_fp4(fp8=m.fp8, fp4=m.fp4, fp4_recipe=m.fp4_recipe)
    check_bf16_layers(m)
    check_moe_fp8_te(num_moe_experts=m.num_moe_experts, fp8=m.fp8, te_version=te_version)

    check_mla_output_gate(m)
    check_cp_comm_type(m)
    check_moe_ffn_hidden_size(
        num_moe_experts=m.num_moe_experts,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_layer_freq=m.moe_layer_freq,
    )
    check_moe_bias(
        num_moe_experts=m.num_moe_experts,
        add_bias_linear=m.add_bias_linear,
        expert_tensor_parallel_size=etp,
    )
    check_router_topk(m.moe_router_topk, model=m)
    check_flex_backend(
        moe_token_dispatcher_type=m.moe_token_dispatcher_type,
        moe_flex_dispatcher_backend=m.moe_flex_dispatcher_backend,
    )
    check_moe_capacity(m)
    check_router_padding(m)
    check_shared_experts(
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        moe_shared_expert_overlap=m.moe_shared_expert_overlap,
        moe_token_dispatcher_type=m.moe_token_dispatcher_type,
    )
    check_dispatch_backward_te(
        overlap_dispatch_backward_with_experts_wgrad=m.overlap_dispatch_backward_with_experts_wgrad,
        te_version=te_version,
    )
    check_te_op_fuser(m, etp=etp, te_version=te_version)

    check_cpu_offloading(
        cpu_offloading=m.cpu_offloading,
        cpu_offloading_num_layers=m.cpu_offloading_num_layers,
        num_layers=m.num_layers,
        pipeline_model_parallel_size=m.pipeline_model_parallel_size,
        recompute_granularity=m.recompute_granularity,
    )
    check_fine_grained_offloading(m, recompute_modules)
    check_recompute(
        recompute_granularity=m.recompute_granularity,
        recompute_method=m.recompute_method,
        recompute_num_layers=m.recompute_num_layers,
    )
    if m.recompute_granularity == "selective":
        check_selective_modules(
            model=m,
            recompute_modules=recompute_modules,
            moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
            moe_shared_expert_overlap=m.moe_shared_expert_overlap,
        )
        check_fp8_recompute(
            recompute_modules=recompute_modules,
            fp8=m.fp8,
            fp8_recipe=m.fp8_recipe,
            te_version=te_version,
        )

    impl, modules = cuda_graph_capture(
        cuda_graph_impl=m.cuda_graph_impl, cuda_graph_modules=m.cuda_graph_modules
    )
    check_offload_cuda_graphs(m, cuda_graph_impl=impl, modules=modules)
    check_cuda_graph_modules(
        model=m,
        cuda_graph_impl=impl,
        modules=modules,
        num_moe_experts=m.num_moe_experts,
        moe_layer_freq=m.moe_layer_freq,
    )
    check_cuda_graph_recompute(
        model=m,
        cuda_graph_impl=impl,
        modules=modules,
        recompute_granularity=m.recompute_granularity,
        recompute_modules=recompute_modules,
    )
