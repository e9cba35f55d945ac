"""Model-config rules (megatron/bridge/training/model_rules/), against megatron-core itself.

The property: for a generated job description, our torch-free verdict (the layout check and
``check_model``) rejects exactly when megatron-core's ``TransformerConfig`` built from the
description's fields raises. A rule that drifts from megatron-core fails here.

Scope of the generated layouts: ``check_parallel_layout`` also enforces rules that megatron-core
checks outside ``TransformerConfig`` (the rank grids, the even pipeline split, experts per EP
rank, the context-parallel sequence split, interleaving without a pipeline);
``test_parallel_layout.py`` holds those to megatron-core. Here the world size, the layer count,
the expert count and the sequence length are drawn so those rules hold, while the rules
``TransformerConfig`` shares with the layout check (heads and query groups over TP, sequence
parallelism without TP, EP without experts, the ``account_for_*`` pipeline split) are drawn on
both sides of the line.

Transformer Engine cannot be installed on a CPU test machine, so its version (the one thing
megatron-core reads of it here) is patched to the version the description is checked against.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import typing
import warnings
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from megatron.core import utils as mcore_utils
from megatron.core.transformer.enums import CudaGraphModule
from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
from packaging.version import Version

from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.megatron_core_support import DSV4_HYBRID_FIELDS
from megatron.bridge.training.model_rules import OFFLOAD_MODULES, UNDESCRIBED_DEFAULTS, check_model
from megatron.bridge.training.parallel_layout import check_parallel_layout

TRANSFORMER_CONFIG_FIELDS = {f.name: f for f in dataclasses.fields(TransformerConfig)}
# The dimensions an MLA model's config (MLATransformerConfig) adds.
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
# The description's fields TransformerConfig does not declare: the GPT provider's, MLA's
# dimensions and the HybridModel's layer pattern.
GPT_PROVIDER_FIELDS = {
    "seq_length",
    "vocab_size",
    "make_vocab_size_divisible_by",
    "position_embedding_type",
    "share_embeddings_and_output_weights",
    *MLA_FIELDS,
    "hybrid_layer_pattern",
    # DeepSeek-V4's attention fields, which the provider declares for a megatron-core that
    # has them; megatron_core_support refuses to build them from one that does not.
    *DSV4_HYBRID_FIELDS,
}

# What megatron-core raises for a config it rejects: its checks are ValueErrors and asserts,
# and an unknown CUDA graph module name is a KeyError of the CudaGraphModule enum.
MCORE_REJECTIONS = (AssertionError, ValueError, TypeError, NotImplementedError, KeyError)

# A Transformer Engine new enough for every minimum-version rule: megatron-core's stand-in for
# "version unknown" (te_version=None), where check_model skips those rules.
RECENT_TE = "99.0.0"


# ---------------------------------------------------------------------------- the two verdicts


def transformer_config_fields(model: ModelDescription) -> dict:
    """The description's fields as ``TransformerConfig`` keywords, plus what the job adds."""
    fields = {}
    for f in dataclasses.fields(model):
        if f.name not in TRANSFORMER_CONFIG_FIELDS:
            continue
        value = getattr(model, f.name)
        if f.name == "cuda_graph_modules":
            value = list(value) if value else "full"
        elif isinstance(value, tuple):
            value = list(value)
        fields[f.name] = value
    # The mixed-precision config always writes pipeline_dtype (megatron-core requires it with
    # PP > 1); it is not a model-description field.
    fields["pipeline_dtype"] = torch.bfloat16
    if model.multi_latent_attention:
        fields.update({name: getattr(model, name) for name in MLA_FIELDS})
    if model.overlap_p2p_comm_warmup_flush:
        # The comm-overlap plan (rules._pp) owns this rule: it writes overlap_p2p_comm=True and
        # batch_p2p_comm=False or rejects the job. Give megatron-core what the plan would write.
        fields.update(overlap_p2p_comm=True, batch_p2p_comm=False)
    return fields


def megatron_core_error(model: ModelDescription, te_version: str | None) -> Exception | None:
    """What megatron-core's ``TransformerConfig`` raises for the description, or None."""
    fields = transformer_config_fields(model)
    te = Version(RECENT_TE if te_version is None else te_version)
    with warnings.catch_warnings(), mock.patch.object(mcore_utils, "_te_version", te):
        warnings.simplefilter("ignore")
        try:
            # An MLA model is built from MLATransformerConfig, which adds its own rules.
            (MLATransformerConfig if model.multi_latent_attention else TransformerConfig)(**fields)
        except MCORE_REJECTIONS as exc:
            return exc
    return None


def layout_keywords(model: ModelDescription, world_size: int) -> dict:
    """``check_parallel_layout``'s keywords for a description (as ``check_layout`` passes them)."""
    return {
        "world_size": world_size,
        "tp_size": model.tensor_model_parallel_size,
        "pp_size": model.pipeline_model_parallel_size,
        "vpp_size": model.virtual_pipeline_model_parallel_size,
        "cp_size": model.context_parallel_size,
        "ep_size": model.expert_model_parallel_size,
        "etp_size": model.expert_tensor_parallel_size,
        "sequence_parallel": model.sequence_parallel,
        "num_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_query_groups": model.num_query_groups,
        "num_moe_experts": model.num_moe_experts,
        "seq_length": model.seq_length,
        "account_for_embedding_in_pipeline_split": model.account_for_embedding_in_pipeline_split,
        "account_for_loss_in_pipeline_split": model.account_for_loss_in_pipeline_split,
    }


def bridge_error(
    model: ModelDescription, world_size: int, te_version: str | None
) -> ValueError | None:
    """Our torch-free verdict: the layout check, then ``check_model``; any other error escapes."""
    try:
        check_parallel_layout(**layout_keywords(model, world_size))
        check_model(model, te_version=te_version)
    except ValueError as exc:
        return exc
    return None


# ---------------------------------------------------------------------------- generated jobs


def mostly(valid: list, invalid: list, weight: int = 4) -> st.SearchStrategy:
    """One of ``valid`` (each ``weight`` times as likely) or, now and then, of ``invalid``."""
    return st.sampled_from(valid * weight + invalid)


CUDA_GRAPH_MODULE_NAMES = [m.name for m in CudaGraphModule]
# moe_layer_freq's int and list forms (held as a tuple), with and without dense layers.
MOE_LAYER_FREQS = [1, 1, 2, 4, (0, 1, 1, 1), (1, 1, 1, 1), (0, 0, 1, 1)]
CUDA_GRAPH_IMPLS = list(typing.get_args(TRANSFORMER_CONFIG_FIELDS["cuda_graph_impl"].type))
# megatron-core's recompute module names; the unsupported ones need a feature the description
# does not hold (grouped GEMM, MLA, gated delta net), so megatron-core's defaults reject them.
RECOMPUTE_MODULES = ["core_attn", "layernorm", "mlp", "moe", "shared_experts"]
UNSUPPORTED_RECOMPUTE_MODULES = ["moe_act", "mla_up_proj", "gdn_norm_out"]


def recompute_module_lists(weight: int) -> st.SearchStrategy:
    """None, or up to three distinct recompute module names: each of :data:`RECOMPUTE_MODULES`
    ``weight`` times as likely as each unsupported or unknown one."""
    names = mostly(RECOMPUTE_MODULES, [*UNSUPPORTED_RECOMPUTE_MODULES, "bogus"], weight)
    return st.one_of(st.none(), st.lists(names, max_size=3, unique=True).map(tuple))


TE_VERSIONS = [
    None,
    "0.0.0",
    "1.6.0",
    "1.7.0.dev0",
    "2.2.0",
    "2.3.0.dev0",
    "2.3.0",
    "2.5.1",
    "2.6.0.dev0",
    "2.6.0rc1",
    "2.8.0+cu12",
    "2.14.0",
]


@st.composite
def layouts(draw) -> tuple[dict, int]:
    """Layout and shape fields of a description, and a world size that fits its grids.

    TransformerConfig's own layout rules (heads and query groups over TP, sequence parallelism
    without TP, EP without experts, the ``account_for_*`` split) are now and then broken; the
    rules it does not check are kept (see the module docstring).
    """
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4]))
    # Interleaving needs a pipeline (initialize_model_parallel's rule, not TransformerConfig's).
    vpp = draw(st.sampled_from([None, 1] if pp == 1 else [None, 1, 2]))
    cp = draw(st.sampled_from([1, 2]))
    moe = draw(st.booleans())
    ep = draw(st.sampled_from([1, 2, 4]) if moe else mostly([1], [2], 20))
    etp = draw(st.sampled_from([None, None, 1, 2]))
    heads = tp * draw(st.sampled_from([1, 2, 4]))
    if tp > 1 and draw(mostly([False], [True], 20)):
        heads += 1
    embedding = draw(st.booleans())
    loss = draw(st.booleans())
    extra = int(embedding) + int(loss)
    if extra and draw(mostly([False], [True], 6)):
        num_layers = draw(st.integers(1, 24))  # TransformerConfig checks this split itself
    else:
        unit = pp * (vpp or 1)
        total = unit * draw(st.integers(1, 3))
        while total <= extra:
            total += unit
        num_layers = total - extra
    experts = None
    if moe:
        experts = ep * draw(st.sampled_from([1, 2, 4] if ep > 1 else [1, 2, 4, 8]))
    fields = {
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": pp,
        "virtual_pipeline_model_parallel_size": vpp,
        "context_parallel_size": cp,
        "expert_model_parallel_size": ep,
        "expert_tensor_parallel_size": etp,
        "sequence_parallel": draw(st.booleans() if tp > 1 else mostly([False], [True], 20)),
        "account_for_embedding_in_pipeline_split": embedding,
        "account_for_loss_in_pipeline_split": loss,
        "num_layers": num_layers,
        "hidden_size": 64 * heads,
        "num_attention_heads": heads,
        "num_query_groups": draw(mostly([None, tp, max(1, tp // 2), 2 * tp], [3], 10)),
        "kv_channels": draw(st.sampled_from([None, 64, 128])),
        "ffn_hidden_size": draw(st.sampled_from([None, 1024])),
        "seq_length": draw(st.sampled_from([None, 2 * cp * 512])),
        "vocab_size": draw(st.sampled_from([None, 32000])),
        "num_moe_experts": experts,
    }
    world_size = math.lcm(tp * cp * pp, (tp if etp is None else etp) * ep * pp)
    return fields, world_size


@st.composite
def small_layouts(draw) -> tuple[dict, int]:
    """A valid small layout (TP 1-2, EP 1-2, no pipeline), dense or MoE."""
    tp = draw(st.sampled_from([1, 2]))
    moe = draw(st.booleans())
    ep = draw(st.sampled_from([1, 2])) if moe else 1
    etp = draw(st.sampled_from([None, 1]))
    fields = {
        "tensor_model_parallel_size": tp,
        "expert_model_parallel_size": ep,
        "expert_tensor_parallel_size": etp,
        "sequence_parallel": tp > 1 and draw(st.booleans()),
        "num_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_moe_experts": ep * draw(st.sampled_from([1, 2, 4])) if moe else None,
    }
    return fields, math.lcm(tp, (tp if etp is None else etp) * ep)


@st.composite
def model_settings(draw, moe: bool) -> dict:
    """The description's fields other than the layout and the shape.

    Each field is mostly valid and now and then invalid, so that most rejected descriptions
    break one rule, and the rules that combine fields (MoE bias and ETP, recompute and CUDA
    graphs, FP8 and Transformer Engine) decide the verdict often.
    """
    bf16, fp16 = draw(mostly([(True, False), (False, True), (False, False)], [(True, True)], 10))
    dispatcher = draw(mostly(["allgather", "alltoall", "flex"], ["alltoall_seq"], 5))
    backends = ["deepep", "hybridep"]
    backend = draw(
        st.sampled_from([*backends, "ncclep"])
        if dispatcher == "flex"
        else mostly(backends, ["ncclep"], 10)
    )
    granularity = draw(mostly([None, "full", "selective", "selective"], ["bogus"], 10))
    if granularity == "full":
        method = draw(mostly(["uniform", "block"], [None, "bogus"], 10))
        recompute_layers = draw(mostly([1, 2], [None], 10))
    elif granularity == "selective":
        method = draw(mostly([None, None, "uniform"], ["bogus"], 10))
        recompute_layers = draw(mostly([None], [1], 10))
    else:
        method = draw(st.sampled_from([None, "uniform", "block", "bogus"]))
        recompute_layers = draw(st.sampled_from([None, 1]))
    recompute_modules = draw(recompute_module_lists(8))
    # The MoE capture regions carry most rules: drawn more often than attn, mlp and mamba.
    graph_names = [*CUDA_GRAPH_MODULE_NAMES, "moe", "moe_router", "moe_preprocess"]
    graph_modules = draw(
        st.one_of(
            st.just(()),
            st.lists(
                mostly(
                    graph_names, ["full", "full_iteration", "full_iteration_inference", "bogus"], 3
                ),
                min_size=1,
                max_size=3,
            ).map(tuple),
        )
    )
    return {
        "gated_linear_unit": draw(st.booleans()),
        "add_bias_linear": draw(mostly([False], [True], 2) if moe else st.booleans()),
        "add_qkv_bias": draw(st.booleans()),
        "normalization": draw(st.sampled_from(["LayerNorm", "RMSNorm"])),
        "position_embedding_type": draw(st.sampled_from(["learned_absolute", "rope"])),
        "bf16": bf16,
        "fp16": fp16,
        "fp8": draw(st.sampled_from([None, "e4m3", "hybrid"])),
        "fp8_recipe": draw(mostly(["delayed", "tensorwise", "mxfp8", "blockwise"], ["custom"], 3)),
        # The BF16 layer counts around the per-stage bound (layers drawn are 4 to 16 a stage).
        "first_last_layers_bf16": draw(st.booleans()),
        "num_layers_at_start_in_bf16": draw(mostly([0, 1, 2], [17, 64], 3)),
        "num_layers_at_end_in_bf16": draw(mostly([0, 1, 4], [17, 64], 3)),
        "moe_router_topk": draw(mostly([2, 4, 8], [1], 8)),
        "moe_ffn_hidden_size": draw(
            st.sampled_from([None, 512]) if moe else mostly([None], [512], 6)
        ),
        "moe_shared_expert_intermediate_size": draw(mostly([None, 1024], [0], 10)),
        "moe_layer_freq": draw(st.sampled_from(MOE_LAYER_FREQS)),
        "moe_latent_size": draw(st.sampled_from([None, 256])),
        "multi_latent_attention": draw(st.booleans()),
        "q_lora_rank": draw(st.sampled_from([None, 512])),
        "attention_output_gate": draw(mostly([False], [True], 3)),
        "window_size": draw(st.sampled_from([None, (128, 0)])),
        "window_attn_skip_freq": draw(st.sampled_from([None, 2, (1, 1, 0, 1)])),
        # The per-layer form's length against num_layers (1 to 24 layers drawn) under CP.
        "cp_comm_type": draw(
            st.sampled_from(
                [None, "p2p", "a2a", "all_gather", ("a2a",), ("p2p", "a2a"), ("p2p",) * 3]
            )
        ),
        "moe_token_dispatcher_type": dispatcher,
        "moe_flex_dispatcher_backend": backend,
        "moe_shared_expert_overlap": draw(mostly([False], [True], 2)),
        "recompute_granularity": granularity,
        "recompute_method": method,
        "recompute_num_layers": recompute_layers,
        "recompute_modules": recompute_modules,
        "mtp_num_layers": draw(st.sampled_from([None, 0, 1, 2])),
        "gradient_accumulation_fusion": draw(st.booleans()),
        "cuda_graph_impl": draw(mostly(["none", "none", "none", *CUDA_GRAPH_IMPLS], ["bogus"], 4)),
        "cuda_graph_modules": graph_modules,
        "overlap_dispatch_backward_with_experts_wgrad": draw(mostly([False], [True], 4)),
        # ep_overlap_early_attn_memory_release is the comm-overlap plan's rule (rules._ep).
        "overlap_p2p_comm_warmup_flush": draw(st.booleans()),
        **draw(offload_settings()),
    }


@st.composite
def offload_settings(draw) -> dict:
    """The activation-offloading fields: fine-grained offloading mostly on, its module list
    mostly of megatron-core's names, its threshold and fraction mostly in range, the op fuser
    fused_group_mlp needs, and now and then the layer-wise cpu_offloading it excludes."""
    return {
        "fine_grained_activation_offloading": draw(st.booleans()),
        "offload_modules": draw(
            st.lists(mostly(list(OFFLOAD_MODULES), ["bogus"], 8), max_size=3, unique=True).map(
                tuple
            )
        ),
        "min_offloaded_tensor_size": draw(mostly([0, 1024 * 1024, 500_000_000], [-1], 10)),
        "activation_offload_fraction": draw(mostly([0.0, 0.5, 1.0], [-0.5, 1.5], 10)),
        "use_transformer_engine_op_fuser": draw(st.booleans()),
        "fine_grained_offloading_max_inflight_offloads": draw(st.sampled_from([None, 0, 1])),
        "cpu_offloading": draw(mostly([False], [True], 6)),
    }


@st.composite
def jobs(draw, layout: st.SearchStrategy) -> tuple[ModelDescription, int, str | None]:
    """A description (a ``layout`` and model settings), its world size and a TE version."""
    fields, world_size = draw(layout)
    fields |= draw(model_settings(moe=fields["num_moe_experts"] is not None))
    return ModelDescription(**fields), world_size, draw(st.sampled_from(TE_VERSIONS))


def assert_same_verdict(job: tuple[ModelDescription, int, str | None]) -> None:
    """Our verdict and megatron-core's agree on ``job``."""
    model, world_size, te_version = job
    ours = bridge_error(model, world_size, te_version)
    theirs = megatron_core_error(model, te_version)
    assert (ours is None) == (theirs is None), (
        f"check_parallel_layout + check_model: {ours!r}\n"
        f"megatron-core TransformerConfig: {theirs!r}\n"
        f"te_version={te_version!r}, world_size={world_size}\n{model}"
    )


#: The small bf16 model without biases the focused strategies below vary.
SMALL_MODEL = {
    "num_layers": 4,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "add_bias_linear": False,
    "bf16": True,
}


@st.composite
def cuda_graph_models(draw) -> ModelDescription:
    """A valid small model whose CUDA graph, recompute and MoE-layer fields vary.

    The CUDA graph rules combine the implementation, the capture regions (with megatron-core's
    deprecated names and its local-implementation router/preprocess pairing), the experts, the
    MoE layer frequency and the recompute settings; here nothing else fails.
    """
    granularity = draw(st.sampled_from([None, None, "full", "selective", "selective"]))
    full = granularity == "full"
    graph_names = [*CUDA_GRAPH_MODULE_NAMES, "full", "full_iteration", "full_iteration_inference"]
    return ModelDescription(
        **SMALL_MODEL,
        num_moe_experts=draw(st.sampled_from([None, 1, 2, 8, 8])),
        moe_layer_freq=draw(st.sampled_from(MOE_LAYER_FREQS)),
        moe_token_dispatcher_type=draw(st.sampled_from(["allgather", "alltoall", "flex"])),
        moe_shared_expert_intermediate_size=draw(st.sampled_from([None, 1024])),
        recompute_granularity=granularity,
        recompute_method="uniform" if full else None,
        recompute_num_layers=1 if full else None,
        recompute_modules=draw(
            st.one_of(
                st.none(),
                st.lists(st.sampled_from(RECOMPUTE_MODULES), max_size=2, unique=True).map(tuple),
            )
        ),
        cuda_graph_impl=draw(mostly(CUDA_GRAPH_IMPLS, ["bogus"], 8)),
        cuda_graph_modules=draw(st.lists(st.sampled_from(graph_names), max_size=3).map(tuple)),
    )


@st.composite
def capacity_models(draw) -> ModelDescription:
    """A valid small MoE or dense model whose capacity, padding, dispatcher, precision and
    MoE CUDA graph fields vary.

    Token dropping and padding combine with the load balancing, the flex backend, router
    padding for FP8/FP4 (both of megatron-core's names) and the MoE capture regions; here
    nothing else fails.
    """
    graph_names = ["moe", "moe_router", "moe_preprocess", "attn"]
    return ModelDescription(
        **SMALL_MODEL,
        fp8=draw(st.sampled_from([None, "e4m3", "e4m3"])),
        fp8_recipe="tensorwise",
        fp4=draw(st.sampled_from([None, None, "nvfp4"])),
        num_moe_experts=draw(st.sampled_from([None, 8, 8, 8])),
        moe_token_dispatcher_type=draw(
            st.sampled_from(["allgather", "alltoall", "alltoall", "flex"])
        ),
        moe_flex_dispatcher_backend=draw(st.sampled_from(["deepep", "hybridep"])),
        moe_router_load_balancing_type=draw(st.sampled_from(["aux_loss", "none", "sinkhorn"])),
        moe_expert_capacity_factor=draw(st.sampled_from([None, None, 1.0, -1.0])),
        moe_pad_expert_input_to_capacity=draw(st.sampled_from([False, False, True])),
        moe_router_padding_for_fp8=draw(st.booleans()),
        moe_router_padding_for_quantization=draw(st.booleans()),
        cuda_graph_impl=draw(st.sampled_from(["none", "local", "transformer_engine"])),
        cuda_graph_modules=draw(
            st.lists(st.sampled_from(graph_names), min_size=1, max_size=3, unique=True).map(tuple)
        ),
    )


@st.composite
def recompute_models(draw) -> tuple[ModelDescription, str | None]:
    """A valid small model whose recompute, FP8 and shared-expert fields vary, and a TE version.

    The selective-recompute rules combine the module names with FP8, its recipe, the
    Transformer Engine version and the shared-expert overlap; here nothing else fails.
    """
    moe = draw(st.booleans())
    model = ModelDescription(
        **SMALL_MODEL,
        fp8=draw(st.sampled_from([None, "e4m3", "hybrid"])),
        fp8_recipe=draw(st.sampled_from(["delayed", "tensorwise", "mxfp8", "blockwise"])),
        num_moe_experts=8 if moe else None,
        moe_token_dispatcher_type="alltoall",
        moe_shared_expert_intermediate_size=draw(st.sampled_from([None, 1024])),
        moe_shared_expert_overlap=draw(st.booleans()),
        recompute_granularity=draw(mostly([None, "full", "selective"], ["bogus"], 6)),
        recompute_method=draw(mostly([None, "uniform", "block"], ["bogus"], 6)),
        recompute_num_layers=draw(st.sampled_from([None, 1])),
        recompute_modules=draw(recompute_module_lists(4)),
    )
    return model, draw(st.sampled_from(TE_VERSIONS))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(layouts()))
def test_torch_free_verdict_equals_megatron_core(job) -> None:
    assert_same_verdict(job)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(small_layouts()))
def test_model_rules_equal_megatron_core_on_a_valid_layout(job) -> None:
    # Without layout errors, every rejection is check_model's: the combined rules (recompute
    # and CUDA graphs, MoE and FP8 with TE versions) decide the verdict more often.
    assert_same_verdict(job)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuda_graph_models())
def test_cuda_graph_rules_equal_megatron_core(model) -> None:
    world_size = 1
    assert_same_verdict((model, world_size, None))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity_models())
def test_capacity_and_router_padding_rules_equal_megatron_core(model) -> None:
    world_size = 1
    assert_same_verdict((model, world_size, None))


@pytest.mark.parametrize(
    ("balancing", "refused"),
    [(["aux_loss", "seq_aux_loss"], False), (["aux_loss", "sinkhorn"], True)],
)
def test_a_list_of_load_balancing_types_is_checked_type_by_type(balancing, refused) -> None:
    # megatron-core pairs a list of types with a list of auxiliary-loss coefficients, which the
    # description does not hold: the config is built with one coefficient per type.
    model = ModelDescription(
        **SMALL_MODEL,
        num_moe_experts=8,
        moe_token_dispatcher_type="alltoall",
        moe_expert_capacity_factor=1.0,
        moe_router_load_balancing_type=tuple(balancing),
    )
    fields = transformer_config_fields(model) | {"moe_aux_loss_coeff": [0.01] * len(balancing)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if refused:
            with pytest.raises(ValueError, match="moe_expert_capacity_factor only works"):
                TransformerConfig(**fields)
            with pytest.raises(ValueError, match="needs every moe_router_load_balancing_type"):
                check_model(model)
        else:
            TransformerConfig(**fields)
            check_model(model)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recompute_models())
def test_recompute_rules_equal_megatron_core(model_and_te) -> None:
    model, te_version = model_and_te
    world_size = 1
    assert_same_verdict((model, world_size, te_version))


# ---------------------------------------------------------------------------- named cases

MOE = {"num_moe_experts": 8, "moe_token_dispatcher_type": "alltoall"}
MOE_NO_BIAS = {**MOE, "add_bias_linear": False}


def _case(id: str, *expected: str, te_version: str | None = None, **fields):
    """A named case: the model fields, the TE version, then what is expected (a message)."""
    return pytest.param(fields, te_version, *expected, id=id)


def _graphs(impl: str, *modules: str) -> dict:
    """CUDA graphs of ``impl`` capturing ``modules``."""
    return {"cuda_graph_impl": impl, "cuda_graph_modules": modules}


def _selective(*modules: str) -> dict:
    """Selective recompute of ``modules``."""
    return {"recompute_granularity": "selective", "recompute_modules": modules}


def _full(method: str, layers: int) -> dict:
    """Full recompute by ``method`` of ``layers`` layers."""
    return {
        "recompute_granularity": "full",
        "recompute_method": method,
        "recompute_num_layers": layers,
    }


def _fp8(fp8: str, recipe: str) -> dict:
    """FP8 training in format ``fp8`` by recipe ``recipe``."""
    return {"fp8": fp8, "fp8_recipe": recipe}


REJECTED = [
    _case(
        "moe-bias-etp-defaults-to-tp",
        r"add_bias_linear=True.*expert_tensor_parallel_size=1, got 2",
        **MOE,
        tensor_model_parallel_size=2,
    ),
    _case(
        "moe-bias-explicit-etp",
        r"add_bias_linear.*expert_tensor_parallel_size",
        **MOE,
        expert_tensor_parallel_size=2,
    ),
    _case("fp16-bf16", r"fp16=True and bf16=True", bf16=True, fp16=True),
    _case("fp8-custom", r"fp8_quantizer_factory", **_fp8("hybrid", "custom")),
    _case(
        "bf16-layers-delayed",
        r"first_last_layers_bf16=True with fp8_recipe='delayed'",
        **_fp8("hybrid", "delayed"),
        first_last_layers_bf16=True,
    ),
    _case(
        "bf16-layers-over-a-stage",
        r"num_layers_at_end_in_bf16=3: .* = 2 layers",
        **_fp8("hybrid", "tensorwise"),
        first_last_layers_bf16=True,
        num_layers_at_end_in_bf16=3,
        pipeline_model_parallel_size=2,
    ),
    _case(
        "moe-fp8-old-te",
        r"num_moe_experts=8 with fp8='hybrid' needs Transformer Engine >= 1\.7",
        **MOE_NO_BIAS,
        fp8="hybrid",
        te_version="1.6.0",
    ),
    _case("dense-moe-ffn", r"moe_ffn_hidden_size=512.*num_moe_experts", moe_ffn_hidden_size=512),
    _case("top1", r"moe_router_topk=1.*pre_softmax", moe_router_topk=1),
    _case(
        "ncclep-not-flex",
        r"moe_flex_dispatcher_backend='ncclep'.*moe_token_dispatcher_type='flex'",
        moe_flex_dispatcher_backend="ncclep",
    ),
    _case(
        "shared-expert-size-0",
        r"moe_shared_expert_intermediate_size=0",
        moe_shared_expert_intermediate_size=0,
    ),
    _case(
        "shared-overlap-allgather",
        r"moe_shared_expert_overlap=True.*moe_token_dispatcher_type",
        moe_shared_expert_intermediate_size=1024,
        moe_shared_expert_overlap=True,
    ),
    _case(
        "dispatch-backward-old-te",
        r"overlap_dispatch_backward_with_experts_wgrad=True needs Transformer Engine >= 2\.3",
        overlap_dispatch_backward_with_experts_wgrad=True,
        te_version="2.2.0",
    ),
    _case("granularity", r"recompute_granularity='partial'", recompute_granularity="partial"),
    _case(
        "full-no-method",
        r"recompute_granularity='full' needs recompute_method",
        recompute_granularity="full",
        recompute_num_layers=1,
    ),
    _case(
        "full-no-layers",
        r"needs recompute_num_layers",
        recompute_granularity="full",
        recompute_method="uniform",
    ),
    _case("bad-method", r"recompute_method='all'", **_full("all", 1)),
    _case(
        "selective-layers",
        r"recompute_num_layers=None, got 2",
        recompute_granularity="selective",
        recompute_num_layers=2,
    ),
    _case(
        "unknown-recompute-module",
        r"recompute_modules has unknown names \['attention'\]",
        **_selective("attention"),
    ),
    _case("moe-act-no-grouped-gemm", r"'moe_act'.*moe_grouped_gemm", **_selective("moe_act")),
    _case(
        "shared-experts-recompute-overlap",
        r"'shared_experts'.*moe_shared_expert_overlap",
        **MOE,
        **_selective("shared_experts"),
        moe_shared_expert_intermediate_size=1024,
        moe_shared_expert_overlap=True,
    ),
    _case(
        "fp8-delayed-layernorm-recompute",
        r"fp8_recipe='delayed'",
        **_selective("layernorm"),
        fp8="e4m3",
    ),
    _case(
        "fp8-layernorm-recompute-old-te",
        r"Transformer Engine >= 2\.6",
        **_selective("layernorm"),
        **_fp8("e4m3", "tensorwise"),
        te_version="2.5.1",
    ),
    _case("bad-impl", r"cuda_graph_impl='cudnn'", cuda_graph_impl="cudnn"),
    _case(
        "unknown-graph-module",
        r"cuda_graph_modules has unknown names \['attention'\]",
        **_graphs("local", "attention"),
    ),
    _case("full-with-attn", r"'full'.*cannot be combined", **_graphs("local", "full", "attn")),
    _case(
        "full-iteration-modules",
        r"cuda_graph_modules must be empty",
        **_graphs("full_iteration", "attn"),
    ),
    _case(
        "deprecated-full-iteration-migrates",
        r"cuda_graph_modules must be empty",
        **_graphs("none", "full_iteration", "attn"),
    ),
    _case(
        "deprecated-full-iteration-te",
        r"deprecated 'full_iteration'.*cuda_graph_impl='transformer_engine'",
        **_graphs("transformer_engine", "full_iteration"),
    ),
    _case(
        "two-deprecated",
        r"deprecated names",
        cuda_graph_modules=("full_iteration", "full_iteration_inference"),
    ),
    _case("moe-graph-dense", r"num_moe_experts > 1", **_graphs("transformer_engine", "moe_router")),
    _case(
        "local-preprocess-implies-router",
        r"'moe' and 'moe_router' cannot be captured together",
        **MOE_NO_BIAS,
        **_graphs("local", "moe", "moe_preprocess"),
    ),
    _case(
        "te-preprocess-without-router",
        r"'moe_preprocess' needs 'moe_router'",
        **MOE_NO_BIAS,
        **_graphs("transformer_engine", "moe_preprocess"),
    ),
    _case("mlp-graph-all-moe", r"moe_layer_freq=1", **MOE_NO_BIAS, **_graphs("local", "mlp")),
    _case("moe-graph-dropless", r"drop-and-pad", **MOE_NO_BIAS, **_graphs("local", "moe")),
    _case(
        "preprocess-graph-with-capacity",
        r"preprocess step copies token counts to the host.*moe_expert_capacity_factor=1.0",
        **MOE_NO_BIAS,
        moe_expert_capacity_factor=1.0,
        **_graphs("transformer_engine", "moe_router", "moe_preprocess"),
    ),
    _case(
        "local-router-graph-with-fp8-padding",
        r"moe_router_padding_for_fp8=True.*'moe_router' too",
        **MOE_NO_BIAS,
        fp8="e4m3",
        moe_router_padding_for_fp8=True,
        **_graphs("local", "moe_router"),
    ),
    _case(
        "capacity-with-sinkhorn",
        r"moe_expert_capacity_factor=1.0 needs every moe_router_load_balancing_type",
        **MOE,
        moe_expert_capacity_factor=1.0,
        moe_router_load_balancing_type="sinkhorn",
    ),
    _case(
        "pad-without-capacity",
        r"moe_pad_expert_input_to_capacity=True needs a moe_expert_capacity_factor",
        **MOE,
        moe_expert_capacity_factor=-1.0,
        moe_pad_expert_input_to_capacity=True,
    ),
    _case(
        "pad-with-deepep",
        r"deepep backend",
        **{**MOE, "moe_token_dispatcher_type": "flex"},
        moe_expert_capacity_factor=1.0,
        moe_pad_expert_input_to_capacity=True,
    ),
    _case("fp4-with-fp8", r"fp4='e2m1' and fp8='e4m3'", fp8="e4m3", fp4="e2m1"),
    _case(
        "fp4-custom-recipe",
        r"fp4_recipe='custom' needs fp4_quantizer_factory",
        fp4="e2m1",
        fp4_recipe="custom",
    ),
    _case(
        "router-padding-without-fp8",
        r"moe_router_padding_for_quantization=True .*needs fp8 or fp4",
        **MOE,
        moe_router_padding_for_quantization=True,
    ),
    _case(
        "router-padding-allgather",
        r"moe_router_padding_for_fp8=True is not supported by moe_token_dispatcher_type='allgather'",
        **{**MOE, "moe_token_dispatcher_type": "allgather"},
        fp8="e4m3",
        moe_router_padding_for_fp8=True,
    ),
    _case(
        "full-recompute-per-layer-graph",
        r"cuda_graph_impl='full_iteration'",
        cuda_graph_impl="transformer_engine",
        **_full("uniform", 1),
    ),
    _case(
        "selective-default-core-attn-whole-layer",
        r"'core_attn'.*whole layer.*dropout",
        cuda_graph_impl="local",
        recompute_granularity="selective",
    ),
    _case(
        "moe-recompute-router-graph",
        r"'moe'.*'moe_router'",
        **MOE_NO_BIAS,
        **_graphs("transformer_engine", "moe_router"),
        **_selective("moe"),
    ),
    _case(
        "dense-moe-ffn-list-without-dense-layers",
        r"moe_ffn_hidden_size=512.*num_moe_experts",
        moe_ffn_hidden_size=512,
        moe_layer_freq=(1, 1, 1, 1),
    ),
    _case(
        "mlp-graph-list-all-moe",
        r"moe_layer_freq=\[1, 1, 1, 1\] every layer is an MoE layer",
        **MOE_NO_BIAS,
        moe_layer_freq=(1, 1, 1, 1),
        **_graphs("transformer_engine", "mlp"),
    ),
    _case(
        "mla-output-gate",
        r"attention_output_gate=True with multi_latent_attention=True",
        multi_latent_attention=True,
        attention_output_gate=True,
    ),
]


@pytest.mark.parametrize(("fields", "te_version", "message"), REJECTED)
def test_rejected_like_megatron_core(fields: dict, te_version: str | None, message: str) -> None:
    model = ModelDescription(num_layers=4, hidden_size=256, num_attention_heads=8, **fields)
    with pytest.raises(ValueError, match=message):
        check_model(model, te_version=te_version)
    assert megatron_core_error(model, te_version) is not None


ACCEPTED = [
    _case("default-dense"),
    _case("router-padding-with-fp4", **MOE, fp4="e2m1", moe_router_padding_for_quantization=True),
    # megatron-core keeps the preprocess step out of graphs for the old padding name only.
    _case(
        "preprocess-graph-with-quantization-padding",
        **MOE_NO_BIAS,
        **_fp8("e4m3", "tensorwise"),
        moe_router_padding_for_quantization=True,
        **_graphs("transformer_engine", "moe_router", "moe_preprocess"),
    ),
    _case(
        "drop-and-pad-moe-graph",
        **MOE_NO_BIAS,
        moe_expert_capacity_factor=1.0,
        moe_pad_expert_input_to_capacity=True,
        **_graphs("transformer_engine", "moe"),
    ),
    _case("moe-no-bias", **MOE, tensor_model_parallel_size=2, add_bias_linear=False),
    _case("moe-bias-etp1", **MOE, tensor_model_parallel_size=2, expert_tensor_parallel_size=1),
    _case(
        "moe-shared-overlap-fp8",
        **MOE_NO_BIAS,
        moe_shared_expert_intermediate_size=1024,
        moe_shared_expert_overlap=True,
        fp8="hybrid",
        bf16=True,
        te_version="1.7.0.dev0",
    ),
    _case("selective-with-method", recompute_granularity="selective", recompute_method="uniform"),
    _case("full-recompute", **_full("block", 2)),
    _case(
        "deprecated-full-iteration-allows-full-recompute",
        **_graphs("none", "full_iteration"),
        **_full("uniform", 1),
    ),
    _case("deprecated-inference-scope", **_graphs("local", "full_iteration_inference")),
    _case(
        "partial-graph-selective-outside",
        **MOE_NO_BIAS,
        **_graphs("local", "attn", "moe_router"),
        **_selective("mlp"),
    ),
    _case(
        "dispatch-backward-te",
        overlap_dispatch_backward_with_experts_wgrad=True,
        te_version="2.3.0",
    ),
    _case("mixed-dense-moe-ffn", moe_ffn_hidden_size=512, moe_layer_freq=2),
    _case("mixed-dense-moe-ffn-list", moe_ffn_hidden_size=512, moe_layer_freq=(0, 1, 1, 1)),
    _case(
        "mlp-graph-list-with-dense-layers",
        **MOE_NO_BIAS,
        moe_layer_freq=(0, 1, 1, 1),
        **_graphs("transformer_engine", "mlp"),
    ),
    _case(
        "mla-full-rank-queries", multi_latent_attention=True, q_lora_rank=None, window_size=(128, 0)
    ),
    _case(
        "gated-sliding-window",
        attention_output_gate=True,
        window_size=(128, 0),
        window_attn_skip_freq=2,
    ),
    _case("mtp", mtp_num_layers=2, gradient_accumulation_fusion=True),
    # megatron-core bounds the BF16 layer counts under FP8 only: NVFP4 keeps any count.
    _case(
        "bf16-layers-nvfp4", fp4="e2m1", first_last_layers_bf16=True, num_layers_at_end_in_bf16=9
    ),
    _case(
        "bf16-layers-current-scaling",
        **_fp8("hybrid", "tensorwise"),
        first_last_layers_bf16=True,
        num_layers_at_start_in_bf16=0,
        num_layers_at_end_in_bf16=4,
    ),
]


@pytest.mark.parametrize(("fields", "te_version"), ACCEPTED)
def test_accepted_like_megatron_core(fields: dict, te_version: str | None) -> None:
    model = ModelDescription(num_layers=4, hidden_size=256, num_attention_heads=8, **fields)
    check_model(model, te_version=te_version)
    assert megatron_core_error(model, te_version) is None


def test_plan_owned_model_fields_are_not_checked_here() -> None:
    # overlap_p2p_comm_warmup_flush and ep_overlap_early_attn_memory_release need overlap
    # settings that the comm-overlap plan decides (rules._pp, rules._ep), which rejects them.
    model = ModelDescription(
        overlap_p2p_comm_warmup_flush=True, ep_overlap_early_attn_memory_release=True
    )
    check_model(model)


def test_unknown_shapes_are_read_by_no_rule() -> None:
    # Shape fields None (unknown) leave megatron-core nothing to derive; check_model reads none.
    check_model(ModelDescription(num_moe_experts=4, add_bias_linear=False, ffn_hidden_size=None))


def test_bad_te_version_names_the_argument() -> None:
    with pytest.raises(ValueError, match=r"te_version='latest' is not a version"):
        check_model(ModelDescription(), te_version="latest")


def test_undescribed_defaults_are_megatron_core_defaults() -> None:
    for name, value in UNDESCRIBED_DEFAULTS.items():
        assert name not in {f.name for f in dataclasses.fields(ModelDescription)}, name
        assert TRANSFORMER_CONFIG_FIELDS[name].default == value, name


def test_description_fields_outside_transformer_config_are_the_gpt_provider_fields() -> None:
    # transformer_config_fields drops these; a new description field that TransformerConfig
    # does not declare must be added here knowingly.
    outside = {f.name for f in dataclasses.fields(ModelDescription)} - set(
        TRANSFORMER_CONFIG_FIELDS
    )
    assert outside == GPT_PROVIDER_FIELDS


def test_module_imports_without_torch() -> None:
    code = (
        "import sys, megatron.bridge.training.model_rules; "
        "print(sorted(m for m in ('torch', 'megatron.core') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------- EP overlap gate


@st.composite
def ep_overlap_models(draw) -> ModelDescription:
    """A small model whose EP-overlap gates vary: pipeline (VPP None, 1 or more), EP, experts,
    dispatcher, precision, recompute, shared-expert overlap, MTP and CUDA graph capture."""
    pp = draw(st.sampled_from([1, 2]))
    granularity = draw(st.sampled_from([None, None, "full", "selective"]))
    full = granularity == "full"
    return ModelDescription(
        **{**SMALL_MODEL, "bf16": draw(st.sampled_from([True, True, False]))},
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=draw(st.sampled_from([None, 1, 2]))
        if pp > 1
        else None,
        expert_model_parallel_size=draw(st.sampled_from([1, 2, 2])),
        num_moe_experts=draw(st.sampled_from([2, 4])),
        moe_token_dispatcher_type=draw(
            st.sampled_from(["alltoall", "alltoall", "flex", "allgather"])
        ),
        moe_flex_dispatcher_backend="deepep",
        moe_shared_expert_intermediate_size=1024,
        moe_shared_expert_overlap=draw(st.sampled_from([False, False, True])),
        recompute_granularity=granularity,
        recompute_method="uniform" if full else None,
        recompute_num_layers=1 if full else None,
        recompute_modules=draw(st.sampled_from([None, ("core_attn",), ("moe",)])),
        mtp_num_layers=draw(st.sampled_from([None, 1, 2])),
        cuda_graph_impl=draw(st.sampled_from(["none", "none", "transformer_engine"])),
        cuda_graph_modules=draw(st.sampled_from([(), ("attn",), ("moe",)])),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ep_overlap_models())
def test_ep_overlap_gate_equals_megatron_core(model) -> None:
    """The plan's EP-overlap gate (comm_overlap rules, ep.decide_ep) refuses exactly what
    megatron-core's ``TransformerConfig`` refuses, on a model megatron-core accepts without it."""
    assume(megatron_core_error(model, RECENT_TE) is None)
    assume(bridge_error(model, 8 * model.pipeline_model_parallel_size, RECENT_TE) is None)
    fields = transformer_config_fields(model) | {"overlap_moe_expert_parallel_comm": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            TransformerConfig(**fields)
            theirs = None
        except MCORE_REJECTIONS as exc:
            theirs = exc
    job = JobDescription(
        model=model,
        world_size=8 * model.pipeline_model_parallel_size,
        te_available=True,
        te_version=RECENT_TE,
    )
    request = CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True)
    try:
        plan_comm_overlap(request, job)
        ours = None
    except ValueError as exc:
        ours = exc
    assert (ours is None) == (theirs is None), f"ours: {ours!r}\nmegatron-core: {theirs!r}\n{model}"
