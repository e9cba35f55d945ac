"""Model-config rules (megatron/bridge/training/model_rules.py), against megatron-core itself.

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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from megatron.core import utils as mcore_utils
from megatron.core.transformer.enums import CudaGraphModule
from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
from packaging.version import Version

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules import UNDESCRIBED_DEFAULTS, check_model
from megatron.bridge.training.parallel_layout import check_parallel_layout

# The description's GPT-provider fields, which TransformerConfig does not declare.
GPT_PROVIDER_FIELDS = {
    "seq_length",
    "vocab_size",
    "make_vocab_size_divisible_by",
    "position_embedding_type",
    "share_embeddings_and_output_weights",
    # MLATransformerConfig's dimensions and HybridModel's layer pattern.
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "hybrid_layer_pattern",
}
TRANSFORMER_CONFIG_FIELDS = {f.name: f for f in dataclasses.fields(TransformerConfig)}
# The dimensions an MLA model's config (MLATransformerConfig) adds.
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")

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
    recompute_modules = draw(
        st.one_of(
            st.none(),
            st.lists(
                mostly(RECOMPUTE_MODULES, [*UNSUPPORTED_RECOMPUTE_MODULES, "bogus"], 8),
                max_size=3,
                unique=True,
            ).map(tuple),
        )
    )
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
        num_layers=4,
        hidden_size=512,
        num_attention_heads=8,
        add_bias_linear=False,
        bf16=True,
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
def recompute_models(draw) -> tuple[ModelDescription, str | None]:
    """A valid small model whose recompute, FP8 and shared-expert fields vary, and a TE version.

    The selective-recompute rules combine the module names with FP8, its recipe, the
    Transformer Engine version and the shared-expert overlap; here nothing else fails.
    """
    moe = draw(st.booleans())
    model = ModelDescription(
        num_layers=4,
        hidden_size=512,
        num_attention_heads=8,
        add_bias_linear=False,
        bf16=True,
        fp8=draw(st.sampled_from([None, "e4m3", "hybrid"])),
        fp8_recipe=draw(st.sampled_from(["delayed", "tensorwise", "mxfp8", "blockwise"])),
        num_moe_experts=8 if moe else None,
        moe_token_dispatcher_type="alltoall",
        moe_shared_expert_intermediate_size=draw(st.sampled_from([None, 1024])),
        moe_shared_expert_overlap=draw(st.booleans()),
        recompute_granularity=draw(mostly([None, "full", "selective"], ["bogus"], 6)),
        recompute_method=draw(mostly([None, "uniform", "block"], ["bogus"], 6)),
        recompute_num_layers=draw(st.sampled_from([None, 1])),
        recompute_modules=draw(
            st.one_of(
                st.none(),
                st.lists(
                    mostly(RECOMPUTE_MODULES, [*UNSUPPORTED_RECOMPUTE_MODULES, "bogus"], 4),
                    max_size=3,
                    unique=True,
                ).map(tuple),
            )
        ),
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
@given(recompute_models())
def test_recompute_rules_equal_megatron_core(model_and_te) -> None:
    model, te_version = model_and_te
    world_size = 1
    assert_same_verdict((model, world_size, te_version))


# ---------------------------------------------------------------------------- named cases

MOE = {"num_moe_experts": 8, "moe_token_dispatcher_type": "alltoall"}

REJECTED = [
    pytest.param(
        {**MOE, "tensor_model_parallel_size": 2},
        None,
        r"add_bias_linear=True.*expert_tensor_parallel_size=1, got 2",
        id="moe-bias-etp-defaults-to-tp",
    ),
    pytest.param(
        {**MOE, "expert_tensor_parallel_size": 2},
        None,
        r"add_bias_linear.*expert_tensor_parallel_size",
        id="moe-bias-explicit-etp",
    ),
    pytest.param({"bf16": True, "fp16": True}, None, r"fp16=True and bf16=True", id="fp16-bf16"),
    pytest.param(
        {"fp8": "hybrid", "fp8_recipe": "custom"}, None, r"fp8_quantizer_factory", id="fp8-custom"
    ),
    pytest.param(
        {**MOE, "add_bias_linear": False, "fp8": "hybrid"},
        "1.6.0",
        r"num_moe_experts=8 with fp8='hybrid' needs Transformer Engine >= 1\.7",
        id="moe-fp8-old-te",
    ),
    pytest.param(
        {"moe_ffn_hidden_size": 512},
        None,
        r"moe_ffn_hidden_size=512.*num_moe_experts",
        id="dense-moe-ffn",
    ),
    pytest.param({"moe_router_topk": 1}, None, r"moe_router_topk=1.*pre_softmax", id="top1"),
    pytest.param(
        {"moe_flex_dispatcher_backend": "ncclep"},
        None,
        r"moe_flex_dispatcher_backend='ncclep'.*moe_token_dispatcher_type='flex'",
        id="ncclep-not-flex",
    ),
    pytest.param(
        {"moe_shared_expert_intermediate_size": 0},
        None,
        r"moe_shared_expert_intermediate_size=0",
        id="shared-expert-size-0",
    ),
    pytest.param(
        {"moe_shared_expert_intermediate_size": 1024, "moe_shared_expert_overlap": True},
        None,
        r"moe_shared_expert_overlap=True.*moe_token_dispatcher_type",
        id="shared-overlap-allgather",
    ),
    pytest.param(
        {"overlap_dispatch_backward_with_experts_wgrad": True},
        "2.2.0",
        r"overlap_dispatch_backward_with_experts_wgrad=True needs Transformer Engine >= 2\.3",
        id="dispatch-backward-old-te",
    ),
    pytest.param(
        {"recompute_granularity": "partial"},
        None,
        r"recompute_granularity='partial'",
        id="granularity",
    ),
    pytest.param(
        {"recompute_granularity": "full", "recompute_num_layers": 1},
        None,
        r"recompute_granularity='full' needs recompute_method",
        id="full-no-method",
    ),
    pytest.param(
        {"recompute_granularity": "full", "recompute_method": "uniform"},
        None,
        r"needs recompute_num_layers",
        id="full-no-layers",
    ),
    pytest.param(
        {"recompute_granularity": "full", "recompute_method": "all", "recompute_num_layers": 1},
        None,
        r"recompute_method='all'",
        id="bad-method",
    ),
    pytest.param(
        {"recompute_granularity": "selective", "recompute_num_layers": 2},
        None,
        r"recompute_num_layers=None, got 2",
        id="selective-layers",
    ),
    pytest.param(
        {"recompute_granularity": "selective", "recompute_modules": ("attention",)},
        None,
        r"recompute_modules has unknown names \['attention'\]",
        id="unknown-recompute-module",
    ),
    pytest.param(
        {"recompute_granularity": "selective", "recompute_modules": ("moe_act",)},
        None,
        r"'moe_act'.*moe_grouped_gemm",
        id="moe-act-no-grouped-gemm",
    ),
    pytest.param(
        {
            **MOE,
            "recompute_granularity": "selective",
            "recompute_modules": ("shared_experts",),
            "moe_shared_expert_intermediate_size": 1024,
            "moe_shared_expert_overlap": True,
        },
        None,
        r"'shared_experts'.*moe_shared_expert_overlap",
        id="shared-experts-recompute-overlap",
    ),
    pytest.param(
        {"recompute_granularity": "selective", "recompute_modules": ("layernorm",), "fp8": "e4m3"},
        None,
        r"fp8_recipe='delayed'",
        id="fp8-delayed-layernorm-recompute",
    ),
    pytest.param(
        {
            "recompute_granularity": "selective",
            "recompute_modules": ("layernorm",),
            "fp8": "e4m3",
            "fp8_recipe": "tensorwise",
        },
        "2.5.1",
        r"Transformer Engine >= 2\.6",
        id="fp8-layernorm-recompute-old-te",
    ),
    pytest.param({"cuda_graph_impl": "cudnn"}, None, r"cuda_graph_impl='cudnn'", id="bad-impl"),
    pytest.param(
        {"cuda_graph_impl": "local", "cuda_graph_modules": ("attention",)},
        None,
        r"cuda_graph_modules has unknown names \['attention'\]",
        id="unknown-graph-module",
    ),
    pytest.param(
        {"cuda_graph_impl": "local", "cuda_graph_modules": ("full", "attn")},
        None,
        r"'full'.*cannot be combined",
        id="full-with-attn",
    ),
    pytest.param(
        {"cuda_graph_impl": "full_iteration", "cuda_graph_modules": ("attn",)},
        None,
        r"cuda_graph_modules must be empty",
        id="full-iteration-modules",
    ),
    pytest.param(
        {"cuda_graph_impl": "none", "cuda_graph_modules": ("full_iteration", "attn")},
        None,
        r"cuda_graph_modules must be empty",
        id="deprecated-full-iteration-migrates",
    ),
    pytest.param(
        {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ("full_iteration",)},
        None,
        r"deprecated 'full_iteration'.*cuda_graph_impl='transformer_engine'",
        id="deprecated-full-iteration-te",
    ),
    pytest.param(
        {"cuda_graph_modules": ("full_iteration", "full_iteration_inference")},
        None,
        r"deprecated names",
        id="two-deprecated",
    ),
    pytest.param(
        {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ("moe_router",)},
        None,
        r"num_moe_experts > 1",
        id="moe-graph-dense",
    ),
    pytest.param(
        {
            **MOE,
            "add_bias_linear": False,
            "cuda_graph_impl": "local",
            "cuda_graph_modules": ("moe", "moe_preprocess"),
        },
        None,
        r"'moe' and 'moe_router' cannot be captured together",
        id="local-preprocess-implies-router",
    ),
    pytest.param(
        {
            **MOE,
            "add_bias_linear": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_modules": ("moe_preprocess",),
        },
        None,
        r"'moe_preprocess' needs 'moe_router'",
        id="te-preprocess-without-router",
    ),
    pytest.param(
        {
            **MOE,
            "add_bias_linear": False,
            "cuda_graph_impl": "local",
            "cuda_graph_modules": ("mlp",),
        },
        None,
        r"moe_layer_freq=1",
        id="mlp-graph-all-moe",
    ),
    pytest.param(
        {
            **MOE,
            "add_bias_linear": False,
            "cuda_graph_impl": "local",
            "cuda_graph_modules": ("moe",),
        },
        None,
        r"drop-and-pad",
        id="moe-graph-dropless",
    ),
    pytest.param(
        {
            "cuda_graph_impl": "transformer_engine",
            "recompute_granularity": "full",
            "recompute_method": "uniform",
            "recompute_num_layers": 1,
        },
        None,
        r"cuda_graph_impl='full_iteration'",
        id="full-recompute-per-layer-graph",
    ),
    pytest.param(
        {"cuda_graph_impl": "local", "recompute_granularity": "selective"},
        None,
        r"'core_attn'.*whole layer.*dropout",
        id="selective-default-core-attn-whole-layer",
    ),
    pytest.param(
        {
            **MOE,
            "add_bias_linear": False,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_modules": ("moe_router",),
            "recompute_granularity": "selective",
            "recompute_modules": ("moe",),
        },
        None,
        r"'moe'.*'moe_router'",
        id="moe-recompute-router-graph",
    ),
    pytest.param(
        {"moe_ffn_hidden_size": 512, "moe_layer_freq": (1, 1, 1, 1)},
        None,
        r"moe_ffn_hidden_size=512.*num_moe_experts",
        id="dense-moe-ffn-list-without-dense-layers",
    ),
    pytest.param(
        {
            **MOE,
            "add_bias_linear": False,
            "moe_layer_freq": (1, 1, 1, 1),
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_modules": ("mlp",),
        },
        None,
        r"moe_layer_freq=\[1, 1, 1, 1\] every layer is an MoE layer",
        id="mlp-graph-list-all-moe",
    ),
    pytest.param(
        {"multi_latent_attention": True, "attention_output_gate": True},
        None,
        r"attention_output_gate=True with multi_latent_attention=True",
        id="mla-output-gate",
    ),
]


@pytest.mark.parametrize(("fields", "te_version", "message"), REJECTED)
def test_rejected_like_megatron_core(fields: dict, te_version: str | None, message: str) -> None:
    model = ModelDescription(num_layers=4, hidden_size=256, num_attention_heads=8, **fields)
    with pytest.raises(ValueError, match=message):
        check_model(model, te_version=te_version)
    assert megatron_core_error(model, te_version) is not None


ACCEPTED = [
    pytest.param({}, None, id="default-dense"),
    pytest.param(
        {**MOE, "tensor_model_parallel_size": 2, "add_bias_linear": False}, None, id="moe-no-bias"
    ),
    pytest.param(
        {**MOE, "tensor_model_parallel_size": 2, "expert_tensor_parallel_size": 1},
        None,
        id="moe-bias-etp1",
    ),
    pytest.param(
        {
            **MOE,
            "add_bias_linear": False,
            "moe_shared_expert_intermediate_size": 1024,
            "moe_shared_expert_overlap": True,
            "fp8": "hybrid",
            "bf16": True,
        },
        "1.7.0.dev0",
        id="moe-shared-overlap-fp8",
    ),
    pytest.param(
        {"recompute_granularity": "selective", "recompute_method": "uniform"},
        None,
        id="selective-with-method",
    ),
    pytest.param(
        {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 2},
        None,
        id="full-recompute",
    ),
    pytest.param(
        {
            "cuda_graph_impl": "none",
            "cuda_graph_modules": ("full_iteration",),
            "recompute_granularity": "full",
            "recompute_method": "uniform",
            "recompute_num_layers": 1,
        },
        None,
        id="deprecated-full-iteration-allows-full-recompute",
    ),
    pytest.param(
        {"cuda_graph_impl": "local", "cuda_graph_modules": ("full_iteration_inference",)},
        None,
        id="deprecated-inference-scope",
    ),
    pytest.param(
        {
            **MOE,
            "add_bias_linear": False,
            "cuda_graph_impl": "local",
            "cuda_graph_modules": ("attn", "moe_router"),
            "recompute_granularity": "selective",
            "recompute_modules": ("mlp",),
        },
        None,
        id="partial-graph-selective-outside",
    ),
    pytest.param(
        {"overlap_dispatch_backward_with_experts_wgrad": True}, "2.3.0", id="dispatch-backward-te"
    ),
    pytest.param({"moe_ffn_hidden_size": 512, "moe_layer_freq": 2}, None, id="mixed-dense-moe-ffn"),
    pytest.param(
        {"moe_ffn_hidden_size": 512, "moe_layer_freq": (0, 1, 1, 1)},
        None,
        id="mixed-dense-moe-ffn-list",
    ),
    pytest.param(
        {
            **MOE,
            "add_bias_linear": False,
            "moe_layer_freq": (0, 1, 1, 1),
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_modules": ("mlp",),
        },
        None,
        id="mlp-graph-list-with-dense-layers",
    ),
    pytest.param(
        {"multi_latent_attention": True, "q_lora_rank": None, "window_size": (128, 0)},
        None,
        id="mla-full-rank-queries",
    ),
    pytest.param(
        {"attention_output_gate": True, "window_size": (128, 0), "window_attn_skip_freq": 2},
        None,
        id="gated-sliding-window",
    ),
    pytest.param({"mtp_num_layers": 2, "gradient_accumulation_fusion": True}, None, id="mtp"),
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
