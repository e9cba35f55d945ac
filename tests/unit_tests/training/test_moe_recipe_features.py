"""What the published MoE recipes turn on, planned and explained with megatron-core's rules.

The DeepSeek-V3 layouts are upstream Megatron-Bridge's perf recipes (``perf_recipes/deepseek/
gb200/deepseek_v3.py`` ``deepseek_v3_pretrain_256gpu_gb200_bf16_config``: TP1 x PP4 x VPP4 x EP64
on 256 GPUs, ``recompute_modules=["mla_up_proj"]``, Transformer Engine CUDA graphs of ``attn``,
``moe_router`` and ``moe_preprocess``, ``overlap_param_gather_with_optimizer_step``; and
``perf_recipes/deepseek/common.py`` ``_apply_deepseek_v3_64gpu_gb300_fsdp_configs``: Megatron-FSDP
with ``optim_grads_params`` on 64 GPUs at EP64, published for GB300 and planned here on GB200,
the nearest GPU of the catalogue).
"""

from __future__ import annotations

import pytest

from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.model_rules import check_model
from tests.unit_tests.conftest import layout_fields, make_configs

#: DeepSeek-V3's MoE and attention fields as upstream's recipes set them (the shape is not read).
_DEEPSEEK = dict(
    bf16=True,
    num_moe_experts=256,
    moe_router_topk=8,
    moe_grouped_gemm=True,
    moe_token_dispatcher_type="flex",
    moe_flex_dispatcher_backend="hybridep",
    moe_shared_expert_intermediate_size=2048,
    multi_latent_attention=True,
    add_bias_linear=False,
    recompute_granularity="selective",
    recompute_modules=("mla_up_proj",),
)
_GRAPHS = ("attn", "moe_router", "moe_preprocess")


def _deepseek_gb200(**model) -> JobDescription:
    fields = {
        **_DEEPSEEK,
        **layout_fields(pp_size=4, vpp_size=4, ep_size=64),
        "expert_tensor_parallel_size": 1,
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_modules": _GRAPHS,
        **model,
    }
    return JobDescription(
        model=ModelDescription(**fields),
        world_size=256,
        gpu="gb200",
        micro_batch_size=1,
        use_distributed_optimizer=True,
        te_version="2.12",
    )


def _deepseek_fsdp(**job) -> JobDescription:
    model = ModelDescription(
        **{**_DEEPSEEK, "recompute_modules": ("layernorm", "mla_up_proj", "moe_act")},
        expert_model_parallel_size=64,
        expert_tensor_parallel_size=1,
        gradient_accumulation_fusion=True,
    )
    fields = dict(
        world_size=64,
        gpu="gb200",
        use_distributed_optimizer=True,
        use_megatron_fsdp=True,
        te_version="2.12",
    )
    return JobDescription(model=model, **{**fields, **job})


def _describe(configs, world_size: int) -> JobDescription:
    # megatron-core is imported by the tests that read real configs, and only by them.
    from megatron.bridge.training.comm_overlap.megatron_io import describe_configs

    return describe_configs(
        configs.model, configs.optimizer, configs.ddp, world_size=world_size, micro_batch_size=1
    )


def _plan(job: JobDescription, **request):
    return plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False, **request), job)


# --- overlap_param_gather_with_optimizer_step ------------------------------------------------


def test_deepseek_gb200_runs_the_optimizer_step_gather_as_published():
    plan = _plan(
        _deepseek_gb200(), overlap_grad_reduce=True, overlap_param_gather_with_optimizer_step=True
    )
    step = plan.decision("overlap_param_gather_with_optimizer_step")
    assert (step.value, step.source) == (True, "user")
    assert "ChainedOptimizer._step" in step.reason
    assert plan.value("overlap_param_gather") is True
    assert plan.value("align_param_gather") is True  # interleaved: the schedule dispatches
    # Nothing refused; the one warning is the checkpointing caution of the setting itself.
    assert not plan.refused
    assert len(plan.warnings) == 1 and "checkpointing" in plan.warnings[0]


def test_the_optimizer_step_gather_set_on_both_configs_as_upstream_does_is_not_reported():
    configs = make_configs(pp=4, vpp=4)
    # upstream's _enable_overlap_param_gather_with_optimizer_step writes both places.
    configs.optimizer.overlap_param_gather_with_optimizer_step = True
    job = _describe(configs, 32)
    plan = _plan(job, overlap_param_gather_with_optimizer_step=True)
    assert plan.value("overlap_param_gather_with_optimizer_step") is True
    assert not [w for w in plan.warnings if "is replaced" in w]


# --- CUDA graphs with each overlap ----------------------------------------------------------


def test_the_published_graph_scopes_run_with_ep_overlap_and_delayed_wgrad():
    job = _deepseek_gb200(gradient_accumulation_fusion=True)
    check_model(job.model, te_version=job.te_version)
    plan = _plan(job, overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True)
    assert plan.value("overlap_moe_expert_parallel_comm") and plan.value("delay_wgrad_compute")
    said = " ".join(plan.notes)
    assert "EP-overlap schedule's order" in said and "graphs of their own" in said
    assert "NCCL_GRAPH_REGISTER=0" in said


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        # megatron-core: no moe or mlp scope with EP overlap under TE graphs.
        ({"cuda_graph_modules": ("attn", "moe")}, "no moe in cuda_graph_modules"),
        # TE >= 2.12 to capture a delayed wgrad in an attention graph.
        ({"gradient_accumulation_fusion": True, "te": "2.11"}, r"Transformer Engine >= 2\.12"),
        # A captured delayed wgrad accumulates into main_grad at fixed addresses only when fused.
        ({"gradient_accumulation_fusion": False}, "gradient_accumulation_fusion=True"),
        # The EP overlap reads recompute_modules: no 'moe'.
        ({"recompute_modules": ("moe",), "cuda_graph_modules": ("attn",)}, "'moe' not in"),
    ],
)
def test_graph_and_overlap_combinations_megatron_core_refuses_are_refused(change, refusal):
    te = change.pop("te", "2.12")
    job = _deepseek_gb200(**change).replace(te_version=te)
    with pytest.raises(ValueError, match=refusal):
        _plan(job, overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True)


def test_recomputing_moe_under_a_router_graph_is_megatron_cores_refusal():
    model = _deepseek_gb200(recompute_modules=("moe",)).model
    with pytest.raises(ValueError, match="'moe' and cuda_graph_modules 'moe_router'"):
        check_model(model, te_version="2.12")


def test_param_gather_overlap_under_te_graphs_names_the_manual_hooks():
    plan = _plan(_deepseek_gb200())
    assert plan.value("overlap_param_gather") is True
    assert any("cuda_graph_set_manual_hooks" in n for n in plan.notes)
    # Without graphs nothing about them is said.
    bare = _plan(_deepseek_gb200(cuda_graph_impl="none", cuda_graph_modules=()))
    assert not [n for n in bare.notes if "CUDA graph" in n]


def test_the_deprecated_cuda_graph_scope_reaches_the_description():
    configs = make_configs()
    # Recipes assign the deprecated name after construction, before megatron-core migrates it.
    configs.model.cuda_graph_impl = "transformer_engine"
    configs.model.cuda_graph_scope = ["attn"]
    job = _describe(configs, 8)
    assert job.model.cuda_graph_modules == ("attn",)


# --- Megatron-FSDP ----------------------------------------------------------------------------


def test_use_megatron_fsdp_is_read_from_the_ddp_config():
    configs = make_configs()
    assert _describe(configs, 8).use_megatron_fsdp is False
    configs.ddp.use_megatron_fsdp = True
    assert _describe(configs, 8).use_megatron_fsdp is True


def test_the_published_fsdp_recipe_plans_with_notes_only():
    plan = _plan(_deepseek_fsdp(), overlap_grad_reduce=True)
    assert not plan.warnings
    assert plan.value("overlap_param_gather") is True
    align = plan.decision("align_param_gather")
    assert align.value is False and "Megatron-FSDP does not read it" in align.reason
    assert any("optim_grads_params" in n and "num_buckets are not read" in n for n in plan.notes)


def test_param_gather_without_the_distributed_optimizer_is_not_refused_under_fsdp():
    # The refusal without FSDP is megatron-core's DDP bucket path, which FSDP does not take.
    plan = _plan(_deepseek_fsdp(use_distributed_optimizer=False), overlap_param_gather=True)
    assert plan.value("overlap_param_gather") is True
    assert any("without the distributed optimizer" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("request_", "job", "said"),
    [
        ({"overlap_grad_reduce": False}, {}, "Megatron-FSDP sets overlap_grad_reduce=True"),
        ({"overlap_param_gather": False}, {}, "Megatron-FSDP sets overlap_param_gather=True"),
        ({"align_param_gather": True}, {}, "align_param_gather=True has no effect"),
        ({}, {"num_buckets": 4}, "num_buckets=4 has no effect"),
        (
            {"overlap_param_gather_with_optimizer_step": True},
            {},
            "overlap_param_gather_with_optimizer_step=True has no effect under Megatron-FSDP",
        ),
    ],
)
def test_fsdp_says_which_dp_settings_it_replaces_or_ignores(request_, job, said):
    plan = _plan(_deepseek_fsdp(**job), **request_)
    assert any(said in n for n in plan.notes)
    # A no-op is a note, and the DDP-only warnings are not given under FSDP.
    assert not [w for w in plan.warnings if "prefetch" in w or "whole model" in w]


def test_fsdp_with_ep_overlap_refuses_per_layer_graphs_only():
    job = _deepseek_fsdp().replace(
        **{"model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_modules": ("attn",)}
    )
    with pytest.raises(ValueError, match="FullyShardedDataParallel refuses the pair"):
        _plan(job, overlap_moe_expert_parallel_comm=True)
    whole = job.replace(
        **{"model.cuda_graph_impl": "full_iteration", "model.cuda_graph_modules": ()}
    )
    assert _plan(whole, overlap_moe_expert_parallel_comm=True).a2a_overlap


@pytest.mark.parametrize(("te", "refused"), [("2.9", True), ("2.10", False)])
def test_fsdp_with_gradient_accumulation_fusion_needs_te_2_10(te, refused):
    job = _deepseek_fsdp(te_version=te)
    if refused:
        with pytest.raises(ValueError, match=r"Transformer Engine >= 2\.10"):
            _plan(job)
    else:
        assert _plan(job).value("overlap_grad_reduce") is True
