"""The busiest pipeline stage of a step estimate: MTP layers, hybrid layers, custom layouts."""

from __future__ import annotations

import pytest

from megatron.bridge.recipes import plan_recipe, recipe_spec
from megatron.bridge.training import hardware
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.stage import busiest_stage
from megatron.bridge.training.pipeline_layout import stage_layers


def _stage(job):
    return busiest_stage(job, ModelCost(job.model), micro_batch_size=1, micro_batches=8)


def test_mtp_layers_count_on_the_last_stage():
    job = recipe_spec("llama3_70b").job.replace(**{"model.pipeline_model_parallel_size": 1})
    job = job.replace(**{"model.virtual_pipeline_model_parallel_size": None})
    with_mtp = job.replace(**{"model.mtp_num_layers": 1})
    dims = ModelCost(with_mtp.model)
    added = _stage(with_mtp).flops_per_token - _stage(job).flops_per_token
    assert dims.mtp_flops_per_token(job.tp_size) > 0
    assert added == pytest.approx(dims.mtp_flops_per_token(job.tp_size))


def test_a_single_stage_holds_the_whole_model_flops():
    # One stage: every decoder layer, the MTP layers and the logits (ModelCost.flops_per_token).
    for name in ("nemotron_3_5_lightning", "qwen3_30b_a3b", "llama3_8b"):
        job = recipe_spec(name).job
        assert job.pp_size == 1
        dims = ModelCost(job.model)
        assert _stage(job).flops_per_token == pytest.approx(dims.flops_per_token(job.tp_size))


def test_hybrid_layers_cost_the_patterns_mean_layer():
    job = recipe_spec("nemotron_3_nano").job
    dims = ModelCost(job.model)
    stage = _stage(job)
    assert stage.flops_per_token == pytest.approx(
        stage.layers * dims.layer_flops_per_token() + dims.logit_flops_per_token(job.tp_size)
    )


def test_custom_layout_gives_each_rank_its_layers_and_the_mtp_stage():
    job = recipe_spec("deepseek_v3", gpu="gb200", precision="fp8_mx").job
    assert job.model.pipeline_model_parallel_layout is not None and job.pp_size > 1
    stage = _stage(job)
    per_rank = [sum(chunks) for chunks in stage_layers(job.model)]
    assert stage.layers == per_rank[stage.rank]
    dims = ModelCost(job.model)
    # The layout puts the MTP layer ("m") in the last stage: the last rank carries it.
    last = stage.last and stage.flops_per_token - stage.layers * dims.layer_flops_per_token()
    assert stage.last
    assert last == pytest.approx(
        dims.logit_flops_per_token(job.tp_size) + dims.mtp_flops_per_token(job.tp_size)
    )


def test_gpus_per_node_defaults_to_the_catalogue():
    # H100 has no NVLink domain of its own: one node is the domain.
    spec = recipe_spec("llama3_70b", gpu="h100", precision="fp8_cs")
    plan = spec.plan()
    assert plan.job.tp_size * plan.job.cp_size * 2 > 4  # a DP pair crosses 4 GPUs
    default = estimate_step(plan)
    catalogue = hardware.gpu_spec("h100").gpus_per_node
    assert default == estimate_step(spec.changed(gpus_per_node=catalogue).plan())
    assert default != estimate_step(spec.changed(gpus_per_node=4).plan())


def test_the_estimate_describes_the_stage_that_takes_longest_not_the_one_with_most_flops():
    # Kimi-K2 in MXFP8 on 16 stages, 4 layers on the first and 1 on the last: a middle stage (4
    # layers) has the most FLOPs; the last one has fewer (one layer and the logits over a
    # 163840-token vocabulary), but its output layer runs at the BF16 peak, half the MXFP8 one.
    # Without the experts' cost outside the fused grouped MLP the last stage takes longest; with
    # it, each MoE layer costs its routed elements and a middle stage does. The estimate lays out
    # the one that takes longest either way.
    plan = plan_recipe(
        "kimi_k2",
        gpu="gb300",
        precision="fp8_mx",
        changes={
            "model.pipeline_model_parallel_size": 16,
            "model.virtual_pipeline_model_parallel_size": None,
            "model.pipeline_model_parallel_layout": None,
            "model.num_layers_in_first_pipeline_stage": 4,
            "model.num_layers_in_last_pipeline_stage": 1,
            "model.expert_model_parallel_size": 16,
            "micro_batch_size": 1,
        },
    )
    job = plan.job
    assert not job.model.use_transformer_engine_op_fuser
    by_flops = busiest_stage(
        job, ModelCost(job.model), micro_batch_size=1, micro_batches=job.micro_batches
    )
    assert by_flops.rank == 14 and by_flops.layers == 4
    assert estimate_step(plan, unfused_bytes=0.0).pipeline_rank == 15
    assert estimate_step(plan).pipeline_rank == 14


def test_an_embedding_only_stage_is_never_the_busiest():
    # Megatron-core's layout may give the first stage the embedding alone: it computes nothing
    # priced, and the estimate lays out another stage.
    plan = plan_recipe(
        "llama3_8b",
        changes={
            "model.pipeline_model_parallel_size": 4,
            "model.pipeline_model_parallel_layout": "E|t*11|t*11|t*10L",
            "world_size": 8,
            "global_batch_size": 16,
        },
    )
    assert estimate_step(plan).pipeline_rank in (1, 2, 3)
