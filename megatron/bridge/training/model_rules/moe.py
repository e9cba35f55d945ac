"""megatron-core's mixture-of-experts rules on a model description: the per-layer MoE pattern,
the experts' width and biases, top-k routing, the dispatcher and its flex backend, expert
capacity and padding, shared experts, and the Transformer Engine the dispatch-backward overlap
needs.
"""

from __future__ import annotations

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.inputs import UNDESCRIBED_DEFAULTS, te_below, te_found

__all__ = [
    "capacity_factor",
    "check_dispatch_backward_te",
    "check_flex_backend",
    "check_moe_bias",
    "check_moe_capacity",
    "check_moe_ffn_hidden_size",
    "check_moe_layer_pattern",
    "check_router_padding",
    "check_router_topk",
    "check_shared_experts",
    "freq_text",
]

# megatron-core's choices (transformer_config.py).
_CAPACITY_LOAD_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")
_UNPADDED_DISPATCHERS = ("allgather", "alltoall_seq")
_SHARED_EXPERT_OVERLAP_DISPATCHERS = ("alltoall", "flex")


def check_moe_layer_pattern(model: ModelDescription) -> None:
    """Raise ``ValueError`` when moe_layer_freq's list form does not give one entry per layer.

    Mirrors megatron-core's ``gpt_layer_specs.get_gpt_decoder_layer_specs``, which asserts the
    length when it builds the layers (TransformerConfig does not check it, so neither does
    :func:`check_model`). Skipped while num_layers is unknown or the model has no experts.
    """
    freq = model.moe_layer_freq
    if isinstance(freq, int) or model.num_layers is None or not model.moe:
        return
    if len(freq) != model.num_layers:
        raise ValueError(
            f"moe_layer_freq (--moe-layer-freq) lists {len(freq)} layers, but num_layers is "
            f"{model.num_layers}: give one 0 (dense) or 1 (MoE) per layer, e.g. "
            f"([0]*3+[1]*{max(model.num_layers - 3, 1)}), or an int N for every N-th layer."
        )


def _some_layers_dense(moe_layer_freq: int | tuple[int, ...]) -> bool:
    """Whether moe_layer_freq leaves dense layers: an int above 1, or the list form with a 0.

    megatron-core's TransformerConfig.__post_init__ reads the two forms this way
    (``isinstance(moe_layer_freq, list) and 0 in moe_layer_freq``, ``moe_layer_freq > 1``).
    """
    if isinstance(moe_layer_freq, int):
        return moe_layer_freq > 1
    return 0 in moe_layer_freq


def freq_text(moe_layer_freq: int | tuple[int, ...]) -> str:
    """moe_layer_freq as the user wrote it (the list form as a list)."""
    return str(moe_layer_freq if isinstance(moe_layer_freq, int) else list(moe_layer_freq))


def check_moe_ffn_hidden_size(
    *,
    num_moe_experts: int | None,
    moe_ffn_hidden_size: int | None,
    moe_layer_freq: int | tuple[int, ...],
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: a dense model may carry
    moe_ffn_hidden_size only as the dense layers of a mixed model (moe_layer_freq > 1, or a
    list with a 0), where megatron-core ignores it."""
    if (
        num_moe_experts is None
        and moe_ffn_hidden_size is not None
        and not _some_layers_dense(moe_layer_freq)
    ):
        raise ValueError(
            f"moe_ffn_hidden_size={moe_ffn_hidden_size} is set but num_moe_experts is None (a "
            "dense model). Set num_moe_experts, or set moe_ffn_hidden_size=None."
        )


def check_moe_bias(
    *, num_moe_experts: int | None, add_bias_linear: bool, expert_tensor_parallel_size: int
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: "Bias in Moe is only supported
    when ETP==1" (an assert)."""
    if num_moe_experts is not None and add_bias_linear and expert_tensor_parallel_size != 1:
        raise ValueError(
            f"num_moe_experts={num_moe_experts} with add_bias_linear=True (megatron-core's "
            "default) needs expert_tensor_parallel_size=1, got "
            f"{expert_tensor_parallel_size} (None means the tensor-parallel size): megatron-core "
            "supports expert biases only without expert tensor parallelism. Set "
            "add_bias_linear=False or expert_tensor_parallel_size=1."
        )


def check_router_topk(moe_router_topk: int, *, model: ModelDescription) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: top-1 routing after a softmax
    over one expert has a zero gradient, so megatron-core needs moe_router_pre_softmax (or a
    non-softmax score function, or sinkhorn balancing). It checks this for dense models too."""
    if (
        moe_router_topk == 1
        and model.moe_router_score_function == "softmax"
        and not model.moe_router_pre_softmax
        and model.moe_router_load_balancing_type != "sinkhorn"
    ):
        raise ValueError(
            "moe_router_topk=1 needs moe_router_pre_softmax=True, a non-softmax "
            "moe_router_score_function or moe_router_load_balancing_type='sinkhorn' (softmax "
            "scores after top-1 give a zero gradient). Set one of them, or moe_router_topk >= 2."
        )


def check_flex_backend(*, moe_token_dispatcher_type: str, moe_flex_dispatcher_backend: str) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: the ncclep backend belongs to
    the flex dispatcher (checked for dense models too)."""
    if moe_flex_dispatcher_backend == "ncclep" and moe_token_dispatcher_type != "flex":
        raise ValueError(
            "moe_flex_dispatcher_backend='ncclep' needs moe_token_dispatcher_type='flex', got "
            f"{moe_token_dispatcher_type!r}. Set moe_token_dispatcher_type='flex' or choose "
            "another moe_flex_dispatcher_backend."
        )


def capacity_factor(model: ModelDescription) -> float | None:
    """The expert capacity factor as megatron-core keeps it: a negative one reads as None
    (dropless)."""
    factor = model.moe_expert_capacity_factor
    return None if factor is not None and factor < 0 else factor


def check_moe_capacity(model: ModelDescription) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__ (for dense models too): the
    DeepEP flex backend does not pad expert inputs; token dropping needs a load-balancing type
    megatron-core pairs with a capacity; padding needs a capacity."""
    m = model
    deepep = UNDESCRIBED_DEFAULTS["moe_enable_deepep"] or m.moe_flex_dispatcher_backend == "deepep"
    if m.moe_token_dispatcher_type == "flex" and m.moe_pad_expert_input_to_capacity and deepep:
        raise ValueError(
            "moe_pad_expert_input_to_capacity=True is not supported by the flex dispatcher's "
            "deepep backend. Set moe_flex_dispatcher_backend='hybridep', or use the alltoall "
            "dispatcher, or set moe_pad_expert_input_to_capacity=False."
        )
    balancing = m.moe_router_load_balancing_type
    # megatron-core also takes a list of types (one per auxiliary loss) and checks each.
    types = (balancing,) if isinstance(balancing, str) else tuple(balancing)
    if m.moe_expert_capacity_factor is not None and any(
        t not in _CAPACITY_LOAD_BALANCING for t in types
    ):
        raise ValueError(
            f"moe_expert_capacity_factor={m.moe_expert_capacity_factor} needs every "
            f"moe_router_load_balancing_type in {list(_CAPACITY_LOAD_BALANCING)}, got "
            f"{balancing!r}. Change the load balancing, or set moe_expert_capacity_factor=None "
            "(dropless)."
        )
    if m.moe_pad_expert_input_to_capacity and capacity_factor(m) is None:
        raise ValueError(
            "moe_pad_expert_input_to_capacity=True needs a moe_expert_capacity_factor (got "
            f"{m.moe_expert_capacity_factor}; a negative one means dropless). Set a capacity "
            "factor, or moe_pad_expert_input_to_capacity=False."
        )


def check_router_padding(model: ModelDescription) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__ (for dense models too):
    moe_router_padding_for_fp8 turns moe_router_padding_for_quantization on, which pads
    routed token counts for FP8/FP4 GEMMs: it needs fp8 or fp4, and a dispatcher that permutes
    tokens itself."""
    m = model
    if not (m.moe_router_padding_for_quantization or m.moe_router_padding_for_fp8):
        return
    name = (
        "moe_router_padding_for_quantization"
        if m.moe_router_padding_for_quantization
        else "moe_router_padding_for_fp8"
    )
    if m.fp8 is None and m.fp4 is None:
        raise ValueError(
            f"{name}=True pads expert inputs for FP8/FP4 GEMMs and needs fp8 or fp4 set. Set "
            f"the precision, or {name}=False."
        )
    if m.moe_token_dispatcher_type in _UNPADDED_DISPATCHERS:
        raise ValueError(
            f"{name}=True is not supported by moe_token_dispatcher_type="
            f"{m.moe_token_dispatcher_type!r}. Use the alltoall or flex dispatcher, or "
            f"{name}=False."
        )


def check_shared_experts(
    *,
    moe_shared_expert_intermediate_size: int | None,
    moe_shared_expert_overlap: bool,
    moe_token_dispatcher_type: str,
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__: a positive shared-expert
    width, and shared-expert overlap only under a dispatcher that leaves the compute stream free
    (alltoall, flex)."""
    size = moe_shared_expert_intermediate_size
    if size is None:
        return
    if size <= 0:
        raise ValueError(
            f"moe_shared_expert_intermediate_size={size} must be > 0 (num_shared_experts x "
            "the width of one shared expert), or None for no shared experts."
        )
    if moe_shared_expert_overlap and moe_token_dispatcher_type not in (
        _SHARED_EXPERT_OVERLAP_DISPATCHERS
    ):
        raise ValueError(
            "moe_shared_expert_overlap=True needs moe_token_dispatcher_type alltoall or flex, "
            f"got {moe_token_dispatcher_type!r}. Change the dispatcher or set "
            "moe_shared_expert_overlap=False."
        )


def check_dispatch_backward_te(
    *, overlap_dispatch_backward_with_experts_wgrad: bool, te_version: str | None
) -> None:
    """Mirrors transformer_config.py TransformerConfig.__post_init__:
    overlap_dispatch_backward_with_experts_wgrad needs transformer-engine >= 2.3.0. (Its exclusion
    of overlap_moe_expert_parallel_comm and delay_wgrad_compute is the comm-overlap plan's rule.)"""
    if overlap_dispatch_backward_with_experts_wgrad and te_below(te_version, "2.3.0"):
        raise ValueError(
            "overlap_dispatch_backward_with_experts_wgrad=True needs Transformer Engine >= 2.3 "
            f"(found {te_found(te_version)}). Upgrade Transformer Engine or set it to False."
        )
