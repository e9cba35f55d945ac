"""megatron-core's CUDA-graph rules on a model description: the implementation and capture
regions megatron-core is left with (:func:`cuda_graph_capture`), the regions this model has, and
activation recompute under a graph.
"""

from __future__ import annotations

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.moe import capacity_factor, freq_text

__all__ = ["check_cuda_graph_modules", "check_cuda_graph_recompute", "cuda_graph_capture"]

# megatron-core's choices (transformer_config.py, transformer/enums.py, cuda_graph_config.py).
_CUDA_GRAPH_IMPLS = ("none", "transformer_engine", "local", "full_iteration")
_CUDA_GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
# Deprecated module names and the cuda_graph_impl values each may be combined with.
_DEPRECATED_CUDA_GRAPH_MODULES = {
    "full_iteration": ("none", "local", "full_iteration"),
    "full_iteration_inference": ("none", "local"),
}


def cuda_graph_capture(
    *, cuda_graph_impl: str, cuda_graph_modules: tuple[str, ...]
) -> tuple[str, tuple[str, ...]]:
    """Mirrors transformer_config.py TransformerConfig.__post_init__ with
    cuda_graph_config.normalize_cuda_graph_modules,
    validate_deprecated_cuda_graph_modules_migration_inputs and
    get_deprecated_cuda_graph_modules_migration: returns the implementation and the capture
    regions megatron-core is left with. An empty tuple is megatron-core's "full" (the whole
    layer); "full" may also be given alone. The deprecated name "full_iteration" switches the
    implementation to full_iteration; "full_iteration_inference" touches only inference."""
    names = tuple(cuda_graph_modules)
    if "full" in names and names != ("full",):
        raise ValueError(
            f"cuda_graph_modules={list(names)}: 'full' (the whole layer) cannot be combined "
            "with other modules. Use an empty cuda_graph_modules for the whole layer, or list "
            "modules without 'full'."
        )
    if names == ("full",):
        names = ()
    unknown = [
        n for n in names if n not in _CUDA_GRAPH_MODULES and n not in _DEPRECATED_CUDA_GRAPH_MODULES
    ]
    if unknown:
        raise ValueError(
            f"cuda_graph_modules has unknown names {unknown}; choose from "
            f"{list(_CUDA_GRAPH_MODULES)}, or leave it empty for the whole layer."
        )
    deprecated = sorted({n for n in names if n in _DEPRECATED_CUDA_GRAPH_MODULES})
    if len(deprecated) > 1:
        raise ValueError(
            f"cuda_graph_modules contains the deprecated names {deprecated} together; use "
            "cuda_graph_impl='full_iteration' instead of them."
        )
    impl = cuda_graph_impl
    if deprecated:
        (name,) = deprecated
        allowed = _DEPRECATED_CUDA_GRAPH_MODULES[name]
        if impl not in allowed:
            raise ValueError(
                f"cuda_graph_modules contains the deprecated {name!r}, which cannot be combined "
                f"with cuda_graph_impl={impl!r} (allowed: {list(allowed)}). Drop {name!r} and "
                "use cuda_graph_impl='full_iteration'."
            )
        if name == "full_iteration":
            impl = "full_iteration"
    if impl not in _CUDA_GRAPH_IMPLS:
        raise ValueError(
            f"cuda_graph_impl={cuda_graph_impl!r} must be one of {list(_CUDA_GRAPH_IMPLS)}."
        )
    modules = tuple(n for n in names if n in _CUDA_GRAPH_MODULES)
    if impl == "full_iteration" and modules:
        raise ValueError(
            f"cuda_graph_impl='full_iteration' captures the whole iteration, so "
            f"cuda_graph_modules must be empty, got {list(modules)}. Empty cuda_graph_modules "
            "or choose cuda_graph_impl 'local' or 'transformer_engine'."
        )
    if impl == "local" and ("moe_router" in modules or "moe_preprocess" in modules):
        # The local implementation captures the router and the preprocess step together.
        modules = (*modules, *(m for m in ("moe_router", "moe_preprocess") if m not in modules))
    return impl, modules


def check_cuda_graph_modules(
    *,
    cuda_graph_impl: str,
    modules: tuple[str, ...],
    num_moe_experts: int | None,
    moe_layer_freq: int | tuple[int, ...],
    model: ModelDescription,
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__, per-layer implementations
    (local, transformer_engine): which capture regions exist in this model."""
    if cuda_graph_impl not in ("local", "transformer_engine"):
        return
    where = f"cuda_graph_impl={cuda_graph_impl!r} with cuda_graph_modules={list(modules)}"
    if "moe" in modules and "moe_router" in modules:
        raise ValueError(
            f"{where}: 'moe' and 'moe_router' cannot be captured together (with the local "
            "implementation 'moe_preprocess' implies 'moe_router'). Keep one of them."
        )
    if "moe_preprocess" in modules and "moe_router" not in modules:
        raise ValueError(f"{where}: 'moe_preprocess' needs 'moe_router' too; add it.")
    if num_moe_experts is None or num_moe_experts <= 1:
        graphed = [m for m in ("moe", "moe_router") if m in modules]
        if graphed:
            raise ValueError(
                f"{where}: {graphed} capture MoE layers, which need num_moe_experts > 1 (got "
                f"{num_moe_experts}). Remove {graphed} from cuda_graph_modules."
            )
        return
    # megatron-core reads "every layer is MoE" as moe_layer_freq == 1 or the list form without
    # a 0 (an int N > 1 passes whatever num_layers is).
    all_moe = moe_layer_freq == 1 if isinstance(moe_layer_freq, int) else 0 not in moe_layer_freq
    if all_moe and "mlp" in modules:
        raise ValueError(
            f"{where}: 'mlp' captures dense MLP layers, and with moe_layer_freq="
            f"{freq_text(moe_layer_freq)} every layer is an MoE layer. Remove 'mlp' from "
            "cuda_graph_modules."
        )
    capacity = capacity_factor(model)
    if capacity is None or not model.moe_pad_expert_input_to_capacity:
        if "moe" in modules:
            raise ValueError(
                f"{where}: 'moe' capture needs drop-and-pad MoE (moe_expert_capacity_factor and "
                "moe_pad_expert_input_to_capacity=True; megatron-core's default is dropless). "
                "Set both, or use 'moe_router' instead of 'moe'."
            )
        syncing = capacity is not None or model.moe_router_padding_for_fp8
        alltoall = model.moe_token_dispatcher_type == "alltoall"
        if "moe_preprocess" in modules and alltoall and syncing:
            field, value = (
                ("moe_expert_capacity_factor", capacity)
                if capacity is not None
                else ("moe_router_padding_for_fp8", True)
            )
            raise ValueError(
                f"{where}: the alltoall dispatcher's preprocess step copies token counts to the "
                f"host and synchronizes with {field}={value}, which a CUDA graph cannot capture. "
                "Remove 'moe_preprocess' (with cuda_graph_impl='local', 'moe_router' too), or "
                f"unset {field}."
            )


def check_cuda_graph_recompute(
    *,
    cuda_graph_impl: str,
    modules: tuple[str, ...],
    recompute_granularity: str | None,
    recompute_modules: tuple[str, ...],
    model: ModelDescription,
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__, CUDA graphs with activation
    recompute: full recompute only under a full-iteration graph; selective recompute of a captured
    region only when the region has no dropout (a graph cannot replay the random mask), with
    megatron-core's default attention_dropout and hidden_dropout."""
    if cuda_graph_impl == "none" or not recompute_granularity:
        return
    if recompute_granularity != "selective":
        if cuda_graph_impl != "full_iteration":
            raise ValueError(
                f"recompute_granularity={recompute_granularity!r} with "
                f"cuda_graph_impl={cuda_graph_impl!r}: full recompute works only with "
                "cuda_graph_impl='full_iteration'. Change one of them."
            )
        return
    if (
        cuda_graph_impl == "transformer_engine"
        and "moe" in recompute_modules
        and "moe_router" in modules
    ):
        raise ValueError(
            "recompute_modules contains 'moe' and cuda_graph_modules 'moe_router' with "
            "cuda_graph_impl='transformer_engine': the recomputed region would cover the graph. "
            "Remove one of them."
        )
    whole_layer = cuda_graph_impl == "full_iteration" or not modules
    pairs = (
        ("core_attn", "attn", model.attention_dropout),
        ("mlp", "mlp", model.hidden_dropout),
        ("moe", "moe", model.hidden_dropout),
    )
    for recomputed, graphed, dropout in pairs:
        captured = whole_layer or graphed in modules
        if dropout != 0.0 and captured and recomputed in recompute_modules:
            region = "the whole layer" if whole_layer else f"{graphed!r}"
            raise ValueError(
                f"recompute_modules contains {recomputed!r} (recompute_modules=None means "
                f"['core_attn']) while the CUDA graph captures {region}: a graphed recompute "
                f"cannot replay dropout, and the region's dropout is {dropout}. Set the dropout to "
                f"0.0, or remove {recomputed!r} from recompute_modules or the region from the "
                "CUDA graph."
            )
