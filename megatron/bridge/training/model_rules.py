"""megatron-core's model-config rules, applied to a job description without torch.

megatron-core validates a model config in ``TransformerConfig.__post_init__`` (and the
``ModelParallelConfig.__post_init__`` it calls), when the config is finalized: on a cluster, after
the queue wait. :func:`check_model` applies the same rules to a
:class:`~megatron.bridge.training.job.ModelDescription` on a laptop, so planning a job rejects what
megatron-core would reject.

Scope (each rule is a small function below, citing the megatron-core code it mirrors; one more,
the experts' fused grouped MLP under Transformer Engine's op fuser, is asserted when megatron-core
builds the experts):

- the rules that read only description fields, with megatron-core's own derivations first
  (``expert_tensor_parallel_size`` None is the TP size, ``recompute_modules`` None is
  ``["core_attn"]``, an empty ``cuda_graph_modules`` is the whole layer, and the deprecated
  ``full_iteration`` module name turns ``cuda_graph_impl`` into ``"full_iteration"``);
- the rules that also read a megatron-core field the description does not hold (a callable):
  evaluated with that field at megatron-core's default, listed in :data:`UNDESCRIBED_DEFAULTS`;
- the rules that need a minimum Transformer Engine version, when ``te_version`` is given.

Not here: the layout rules (heads and query groups over TP, sequence parallelism, experts over
EP, the pipeline split), which ``parallel_layout.check_parallel_layout`` owns; and the rules that
read an overlap setting the comm-overlap plan decides (``overlap_p2p_comm_warmup_flush``,
``ep_overlap_early_attn_memory_release``, ``overlap_moe_expert_parallel_comm``,
``delay_wgrad_compute``, ``defer_embedding_wgrad_compute``), which ``comm_overlap.rules`` owns.

Pure standard library: importing this module loads neither torch nor megatron-core.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from megatron.bridge.training.job import ModelDescription

__all__ = [
    "OFFLOAD_MODULES",
    "TE_OP_FUSER_MINIMUM",
    "UNDESCRIBED_DEFAULTS",
    "check_model",
    "check_moe_layer_pattern",
    "fused_glu",
    "fused_grouped_mlp",
    "recomputed_modules",
]

UNDESCRIBED_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "fp8_quantizer_factory": None,
        "fp4_quantizer_factory": None,
        "moe_enable_deepep": False,
        "moe_apply_probs_on_input": False,
    }
)
"""megatron-core ``TransformerConfig`` fields that :func:`check_model`'s rules read but
``ModelDescription`` does not hold, with megatron-core's defaults, which the rules assume. A
config that sets one of them differently (a provider with ``attention_dropout=0.0``) can pass a
rule that rejects its description."""

_D = UNDESCRIBED_DEFAULTS  # short name for the rules below

# megatron-core's choices (transformer_config.py, transformer/enums.py, cuda_graph_config.py).
_RECOMPUTE_GRANULARITIES = ("full", "selective")
_RECOMPUTE_METHODS = ("block", "uniform")
_RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
    "gdn_norm_out",
)
_CUDA_GRAPH_IMPLS = ("none", "transformer_engine", "local", "full_iteration")
_CAPACITY_LOAD_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")
_UNPADDED_DISPATCHERS = ("allgather", "alltoall_seq")
_CUDA_GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
# Deprecated module names and the cuda_graph_impl values each may be combined with.
_DEPRECATED_CUDA_GRAPH_MODULES = {
    "full_iteration": ("none", "local", "full_iteration"),
    "full_iteration_inference": ("none", "local"),
}
_SHARED_EXPERT_OVERLAP_DISPATCHERS = ("alltoall", "flex")

_VERSION = re.compile(
    r"\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[._-]?(?P<stage>dev|alpha|a|beta|b|rc|c|preview|pre|post)[._-]?(?P<number>\d*))?",
    re.IGNORECASE,
)
_STAGE_ORDER = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2}
_STAGE_ORDER.update({"rc": 3, "c": 3, "pre": 3, "preview": 3, "post": 5})
_FINAL = 4


def _version_key(text: str) -> tuple[tuple[int, ...], int, int]:
    # Release, stage (dev < a < b < rc < final < post) and stage number: enough of PEP 440 to
    # compare a Transformer Engine version with megatron-core's minimums the way its
    # is_te_min_version (packaging.version) does. A local part (+abc) does not change the order.
    match = _VERSION.match(text)
    if match is None:
        raise ValueError(
            f"te_version={text!r} is not a version number; pass Transformer Engine's "
            "__version__ (e.g. '2.8.0'), '0.0.0' when it is not installed, or None when unknown."
        )
    release = tuple(int(part) for part in match["release"].split("."))
    release = (*release, *(0,) * (3 - len(release)))
    stage = match["stage"]
    if stage is None:
        return release, _FINAL, 0
    return release, _STAGE_ORDER[stage.lower()], int(match["number"] or 0)


def _te_below(te_version: str | None, minimum: str) -> bool:
    # None: the version is unknown, and a minimum-version rule cannot fail.
    return te_version is not None and _version_key(te_version) < _version_key(minimum)


def _te_found(te_version: str) -> str:
    # How an error names the version found; megatron-core reads a missing TE as 0.0.0.
    return "not installed" if _version_key(te_version)[0] == (0, 0, 0) else te_version


# ---------------------------------------------------------------------------- precision


def _check_bias_activation_fusion(
    *,
    bias_activation_fusion: bool,
    activation_func: str,
    gated_linear_unit: bool,
    add_bias_linear: bool,
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__, bias_activation_fusion: fused
    # kernels exist for gelu, silu (swiglu) and quick_gelu (gated only), and the gelu one adds a
    # bias, so an ungated gelu MLP needs add_bias_linear.
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


def _check_half_precision(*, bf16: bool, fp16: bool) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: "Only one of fp16 and bf16".
    if fp16 and bf16:
        raise ValueError(
            "fp16=True and bf16=True: megatron-core trains in one half precision. Set one of "
            "fp16 or bf16 to False."
        )


def _check_cpu_offloading(
    *,
    cpu_offloading: bool,
    cpu_offloading_num_layers: int,
    num_layers: int | None,
    pipeline_model_parallel_size: int,
    recompute_granularity: str | None,
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: offloaded layers below
    # num_layers, no pipeline parallelism, no activation recompute.
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


def _check_fine_grained_offloading(
    model: ModelDescription, recompute_modules: tuple[str, ...]
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__ (fine-grained activation
    # offloading): not with cpu_offloading, a non-empty list of known modules, attn_proj only
    # with core_attn, nothing inside the MoE layer when selective recompute rebuilds all of it,
    # a non-negative size threshold, a fraction in [0, 1], fused_group_mlp only with TE's op
    # fuser and without expert_fc1 / moe_act.
    m = model
    if not m.fine_grained_activation_offloading:
        return
    if m.cpu_offloading:
        raise ValueError(
            "fine_grained_activation_offloading=True with cpu_offloading=True: megatron-core "
            "runs one activation offloading at a time; set one of them to False."
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


def _check_offload_cuda_graphs(
    model: ModelDescription, *, cuda_graph_impl: str, modules: tuple[str, ...]
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__ (CUDA graphs): layer-wise
    # cpu_offloading only with full_iteration graphs; fine-grained offloading with
    # transformer_engine or full_iteration graphs, or local graphs of parts of the MoE layer that
    # offload only inside the experts; never with the moe capture region; full_iteration needs
    # fine_grained_offloading_max_inflight_offloads. ``modules`` are the capture regions
    # megatron-core is left with (``_cuda_graph_capture``; empty: the whole layer).
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


def _check_fp8_recipe(*, fp8: str | None, fp8_recipe: str) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: fp8_recipe='custom' needs
    # fp8_quantizer_factory.
    if fp8 and fp8_recipe == "custom" and not _D["fp8_quantizer_factory"]:
        raise ValueError(
            f"fp8={fp8!r} with fp8_recipe='custom' needs fp8_quantizer_factory, which the job "
            "description does not hold (megatron-core's default: None). Choose fp8_recipe "
            "delayed, tensorwise, mxfp8 or blockwise."
        )


def _check_bf16_layers(m: ModelDescription) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__ (under fp8 only): delayed
    # scaling cannot keep layers in BF16, and each count is 0 to num_layers // PP.
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


def _check_fp4(*, fp8: str | None, fp4: str | None, fp4_recipe: str) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__ ("FP4 validation"): FP4 and
    # FP8 GEMMs exclude each other, and fp4_recipe='custom' needs fp4_quantizer_factory.
    if fp4 and fp8:
        raise ValueError(
            f"fp4={fp4!r} and fp8={fp8!r} are both set; megatron-core trains in one of them. "
            "Set fp8=None for FP4 training, or fp4=None."
        )
    if fp4 and fp4_recipe == "custom" and not _D["fp4_quantizer_factory"]:
        raise ValueError(
            f"fp4={fp4!r} with fp4_recipe='custom' needs fp4_quantizer_factory, which the job "
            "description does not hold (megatron-core's default: None). Choose fp4_recipe "
            "nvfp4."
        )


def _check_moe_fp8_te(
    *, num_moe_experts: int | None, fp8: str | None, te_version: str | None
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: MoE FP8 training needs
    # transformer-engine >= 1.7.0.dev0 (older TE fails on experts that receive no tokens).
    if num_moe_experts and fp8 and _te_below(te_version, "1.7.0.dev0"):
        raise ValueError(
            f"num_moe_experts={num_moe_experts} with fp8={fp8!r} needs Transformer Engine >= 1.7 "
            f"(found {_te_found(te_version)}). Upgrade Transformer Engine or set fp8=None."
        )


# ---------------------------------------------------------------------------- attention


def _check_mla_output_gate(*, multi_latent_attention: bool, attention_output_gate: bool) -> None:
    # Mirrors transformer_config.py MLATransformerConfig.__post_init__ (the config an MLA model
    # is built from): NotImplementedError for an output gate.
    if multi_latent_attention and attention_output_gate:
        raise ValueError(
            "attention_output_gate=True with multi_latent_attention=True: megatron-core's MLA "
            "has no output gate. Set attention_output_gate=False, or use standard attention."
        )


# ---------------------------------------------------------------------------- mixture of experts


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


def _freq_text(moe_layer_freq: int | tuple[int, ...]) -> str:
    """moe_layer_freq as the user wrote it (the list form as a list)."""
    return str(moe_layer_freq if isinstance(moe_layer_freq, int) else list(moe_layer_freq))


def _check_moe_ffn_hidden_size(
    *,
    num_moe_experts: int | None,
    moe_ffn_hidden_size: int | None,
    moe_layer_freq: int | tuple[int, ...],
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: a dense model may carry
    # moe_ffn_hidden_size only as the dense layers of a mixed model (moe_layer_freq > 1, or a
    # list with a 0), where megatron-core ignores it.
    if (
        num_moe_experts is None
        and moe_ffn_hidden_size is not None
        and not _some_layers_dense(moe_layer_freq)
    ):
        raise ValueError(
            f"moe_ffn_hidden_size={moe_ffn_hidden_size} is set but num_moe_experts is None (a "
            "dense model). Set num_moe_experts, or set moe_ffn_hidden_size=None."
        )


def _check_moe_bias(
    *, num_moe_experts: int | None, add_bias_linear: bool, expert_tensor_parallel_size: int
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: "Bias in Moe is only supported
    # when ETP==1" (an assert).
    if num_moe_experts is not None and add_bias_linear and expert_tensor_parallel_size != 1:
        raise ValueError(
            f"num_moe_experts={num_moe_experts} with add_bias_linear=True (megatron-core's "
            "default) needs expert_tensor_parallel_size=1, got "
            f"{expert_tensor_parallel_size} (None means the tensor-parallel size): megatron-core "
            "supports expert biases only without expert tensor parallelism. Set "
            "add_bias_linear=False or expert_tensor_parallel_size=1."
        )


def _check_router_topk(moe_router_topk: int, *, model: ModelDescription) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: top-1 routing after a softmax
    # over one expert has a zero gradient, so megatron-core needs moe_router_pre_softmax (or a
    # non-softmax score function, or sinkhorn balancing). It checks this for dense models too.
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


def _check_flex_backend(
    *, moe_token_dispatcher_type: str, moe_flex_dispatcher_backend: str
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: the ncclep backend belongs to
    # the flex dispatcher (checked for dense models too).
    if moe_flex_dispatcher_backend == "ncclep" and moe_token_dispatcher_type != "flex":
        raise ValueError(
            "moe_flex_dispatcher_backend='ncclep' needs moe_token_dispatcher_type='flex', got "
            f"{moe_token_dispatcher_type!r}. Set moe_token_dispatcher_type='flex' or choose "
            "another moe_flex_dispatcher_backend."
        )


def _capacity_factor(model: ModelDescription) -> float | None:
    """The expert capacity factor as megatron-core keeps it: a negative one reads as None
    (dropless)."""
    factor = model.moe_expert_capacity_factor
    return None if factor is not None and factor < 0 else factor


def _check_moe_capacity(model: ModelDescription) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__ (for dense models too): the
    # DeepEP flex backend does not pad expert inputs; token dropping needs a load-balancing type
    # megatron-core pairs with a capacity; padding needs a capacity.
    m = model
    deepep = _D["moe_enable_deepep"] or m.moe_flex_dispatcher_backend == "deepep"
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
    if m.moe_pad_expert_input_to_capacity and _capacity_factor(m) is None:
        raise ValueError(
            "moe_pad_expert_input_to_capacity=True needs a moe_expert_capacity_factor (got "
            f"{m.moe_expert_capacity_factor}; a negative one means dropless). Set a capacity "
            "factor, or moe_pad_expert_input_to_capacity=False."
        )


def _check_router_padding(model: ModelDescription) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__ (for dense models too):
    # moe_router_padding_for_fp8 turns moe_router_padding_for_quantization on, which pads
    # routed token counts for FP8/FP4 GEMMs: it needs fp8 or fp4, and a dispatcher that permutes
    # tokens itself.
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


def _check_shared_experts(
    *,
    moe_shared_expert_intermediate_size: int | None,
    moe_shared_expert_overlap: bool,
    moe_token_dispatcher_type: str,
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: a positive shared-expert width,
    # and shared-expert overlap only under a dispatcher that leaves the compute stream free
    # (alltoall, flex).
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


def _check_dispatch_backward_te(
    *, overlap_dispatch_backward_with_experts_wgrad: bool, te_version: str | None
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__:
    # overlap_dispatch_backward_with_experts_wgrad needs transformer-engine >= 2.3.0. (Its exclusion
    # of overlap_moe_expert_parallel_comm and delay_wgrad_compute is the comm-overlap plan's rule.)
    if overlap_dispatch_backward_with_experts_wgrad and _te_below(te_version, "2.3.0"):
        raise ValueError(
            "overlap_dispatch_backward_with_experts_wgrad=True needs Transformer Engine >= 2.3 "
            f"(found {_te_found(te_version)}). Upgrade Transformer Engine or set it to False."
        )


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


def _check_te_op_fuser(m: ModelDescription, *, etp: int, te_version: str | None) -> None:
    # Mirrors moe/experts.py TEGroupedMLP.__init__, which asserts _is_fused_impl_supported() when
    # use_transformer_engine_op_fuser is on (at model build, on every rank). The launch variable the gated path also needs is the launch plan's
    # (launch_env.cutedsl_fused_grouped_mlp). Not checked: GroupedLinear's scale_bias, which the
    # check also asks of a TE op fuser for experts with an fc2 bias (a feature of TE's API, not
    # a version the description holds).
    if not fused_grouped_mlp(m):
        return
    field = "use_transformer_engine_op_fuser=True"
    minimum = ".".join(map(str, TE_OP_FUSER_MINIMUM))
    if _te_below(te_version, f"{minimum}.0"):
        raise ValueError(
            f"{field} needs Transformer Engine >= {minimum} for the experts' fused grouped MLP "
            f"(found {_te_found(te_version)}). Upgrade Transformer Engine or set "
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
    if _D["moe_apply_probs_on_input"]:
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


# ---------------------------------------------------------------------------- recompute


def recomputed_modules(recompute_modules: tuple[str, ...] | None) -> tuple[str, ...]:
    """The modules megatron-core's selective recompute acts on for ``recompute_modules``.

    Mirrors transformer_config.py TransformerConfig.__post_init__: None means ["core_attn"]; an
    empty list stays empty (nothing is recomputed).
    """
    return ("core_attn",) if recompute_modules is None else tuple(recompute_modules)


def _check_recompute(
    *,
    recompute_granularity: str | None,
    recompute_method: str | None,
    recompute_num_layers: int | None,
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__: full recompute needs a method
    # and a layer count; selective recompute takes no layer count (a method is accepted and unused).
    # Nothing is checked when recompute_granularity is None.
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


def _check_selective_modules(
    *,
    recompute_modules: tuple[str, ...],
    moe_shared_expert_intermediate_size: int | None,
    moe_shared_expert_overlap: bool,
    model: ModelDescription,
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__, under
    # recompute_granularity='selective': known module names (an assert), and the modules that need a
    # feature of the model.
    unknown = sorted(set(recompute_modules) - set(_RECOMPUTE_MODULES))
    if unknown:
        raise ValueError(
            f"recompute_modules has unknown names {unknown}; choose from "
            f"{list(_RECOMPUTE_MODULES)}."
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


def _check_fp8_recompute(
    *,
    recompute_modules: tuple[str, ...],
    fp8: str | None,
    fp8_recipe: str,
    te_version: str | None,
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__, under
    # recompute_granularity='selective': recomputing moe_act or layernorm in FP8 needs a
    # current-scaling recipe and transformer-engine >= 2.6.0dev0.
    recomputed = [m for m in ("moe_act", "layernorm") if m in recompute_modules]
    if not fp8 or not recomputed:
        return
    if fp8_recipe == "delayed":
        raise ValueError(
            f"recompute_modules {recomputed} with fp8={fp8!r} do not work with "
            "fp8_recipe='delayed'. Choose another fp8_recipe (tensorwise, mxfp8, blockwise) or "
            f"remove {recomputed} from recompute_modules."
        )
    if _te_below(te_version, "2.6.0.dev0"):
        raise ValueError(
            f"recompute_modules {recomputed} with fp8={fp8!r} need Transformer Engine >= 2.6 "
            f"(found {_te_found(te_version)}). Upgrade Transformer Engine or remove "
            f"{recomputed} from recompute_modules."
        )


# ---------------------------------------------------------------------------- CUDA graphs


def _cuda_graph_capture(
    *, cuda_graph_impl: str, cuda_graph_modules: tuple[str, ...]
) -> tuple[str, tuple[str, ...]]:
    # Mirrors transformer_config.py TransformerConfig.__post_init__ with
    # cuda_graph_config.normalize_cuda_graph_modules,
    # validate_deprecated_cuda_graph_modules_migration_inputs and
    # get_deprecated_cuda_graph_modules_migration: returns the implementation and the capture
    # regions megatron-core is left with. An empty tuple is megatron-core's "full" (the whole
    # layer); "full" may also be given alone. The deprecated name "full_iteration" switches the
    # implementation to full_iteration; "full_iteration_inference" touches only inference.
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


def _check_cuda_graph_modules(
    *,
    cuda_graph_impl: str,
    modules: tuple[str, ...],
    num_moe_experts: int | None,
    moe_layer_freq: int | tuple[int, ...],
    model: ModelDescription,
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__, per-layer implementations
    # (local, transformer_engine): which capture regions exist in this model.
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
            f"{_freq_text(moe_layer_freq)} every layer is an MoE layer. Remove 'mlp' from "
            "cuda_graph_modules."
        )
    capacity = _capacity_factor(model)
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


def _check_cuda_graph_recompute(
    *,
    cuda_graph_impl: str,
    modules: tuple[str, ...],
    recompute_granularity: str | None,
    recompute_modules: tuple[str, ...],
    model: ModelDescription,
) -> None:
    # Mirrors transformer_config.py TransformerConfig.__post_init__, CUDA graphs with activation
    # recompute: full recompute only under a full-iteration graph; selective recompute of a captured
    # region only when the region has no dropout (a graph cannot replay the random mask), with
    # megatron-core's default attention_dropout and hidden_dropout.
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


# ---------------------------------------------------------------------------- entry point


def check_model(model: ModelDescription, *, te_version: str | None = None) -> None:
    """Raise ``ValueError`` for a model megatron-core's ``TransformerConfig`` would reject.

    Mirrors the rules of megatron-core's ``TransformerConfig.__post_init__`` (and
    ``ModelParallelConfig.__post_init__``) that read the description's fields, each error naming
    the field(s) and the fix; see the module docstring for what is left to the layout check and
    to the comm-overlap plan. ``te_version`` is the Transformer Engine version where the job runs
    (``"0.0.0"`` when it is not installed, as megatron-core reads it); None means unknown, and the
    minimum-version rules are skipped. Shape fields left None (unknown) are read by no rule here.
    """
    m = model
    if te_version is not None:
        _version_key(te_version)
    etp = (
        m.tensor_model_parallel_size
        if m.expert_tensor_parallel_size is None
        else m.expert_tensor_parallel_size
    )
    recompute_modules = recomputed_modules(m.recompute_modules)

    _check_half_precision(bf16=m.bf16, fp16=m.fp16)
    _check_bias_activation_fusion(
        bias_activation_fusion=m.bias_activation_fusion,
        activation_func=m.activation_func,
        gated_linear_unit=m.gated_linear_unit,
        add_bias_linear=m.add_bias_linear,
    )
    _check_fp8_recipe(fp8=m.fp8, fp8_recipe=m.fp8_recipe)
    _check_fp4(fp8=m.fp8, fp4=m.fp4, fp4_recipe=m.fp4_recipe)
    _check_bf16_layers(m)
    _check_moe_fp8_te(num_moe_experts=m.num_moe_experts, fp8=m.fp8, te_version=te_version)

    _check_mla_output_gate(
        multi_latent_attention=m.multi_latent_attention,
        attention_output_gate=m.attention_output_gate,
    )
    _check_moe_ffn_hidden_size(
        num_moe_experts=m.num_moe_experts,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_layer_freq=m.moe_layer_freq,
    )
    _check_moe_bias(
        num_moe_experts=m.num_moe_experts,
        add_bias_linear=m.add_bias_linear,
        expert_tensor_parallel_size=etp,
    )
    _check_router_topk(m.moe_router_topk, model=m)
    _check_flex_backend(
        moe_token_dispatcher_type=m.moe_token_dispatcher_type,
        moe_flex_dispatcher_backend=m.moe_flex_dispatcher_backend,
    )
    _check_moe_capacity(m)
    _check_router_padding(m)
    _check_shared_experts(
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        moe_shared_expert_overlap=m.moe_shared_expert_overlap,
        moe_token_dispatcher_type=m.moe_token_dispatcher_type,
    )
    _check_dispatch_backward_te(
        overlap_dispatch_backward_with_experts_wgrad=m.overlap_dispatch_backward_with_experts_wgrad,
        te_version=te_version,
    )
    _check_te_op_fuser(m, etp=etp, te_version=te_version)

    _check_cpu_offloading(
        cpu_offloading=m.cpu_offloading,
        cpu_offloading_num_layers=m.cpu_offloading_num_layers,
        num_layers=m.num_layers,
        pipeline_model_parallel_size=m.pipeline_model_parallel_size,
        recompute_granularity=m.recompute_granularity,
    )
    _check_fine_grained_offloading(m, recompute_modules)
    _check_recompute(
        recompute_granularity=m.recompute_granularity,
        recompute_method=m.recompute_method,
        recompute_num_layers=m.recompute_num_layers,
    )
    if m.recompute_granularity == "selective":
        _check_selective_modules(
            model=m,
            recompute_modules=recompute_modules,
            moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
            moe_shared_expert_overlap=m.moe_shared_expert_overlap,
        )
        _check_fp8_recompute(
            recompute_modules=recompute_modules,
            fp8=m.fp8,
            fp8_recipe=m.fp8_recipe,
            te_version=te_version,
        )

    impl, modules = _cuda_graph_capture(
        cuda_graph_impl=m.cuda_graph_impl, cuda_graph_modules=m.cuda_graph_modules
    )
    _check_offload_cuda_graphs(m, cuda_graph_impl=impl, modules=modules)
    _check_cuda_graph_modules(
        model=m,
        cuda_graph_impl=impl,
        modules=modules,
        num_moe_experts=m.num_moe_experts,
        moe_layer_freq=m.moe_layer_freq,
    )
    _check_cuda_graph_recompute(
        model=m,
        cuda_graph_impl=impl,
        modules=modules,
        recompute_granularity=m.recompute_granularity,
        recompute_modules=recompute_modules,
    )
