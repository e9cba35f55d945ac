"""Decoder layers kept out of the FP8/FP4 recipe (``first_last_layers_bf16``): which layers, what
the step estimate prices for them, and how the recipes set them."""

from __future__ import annotations

import pytest
import torch
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training import hardware
from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.compute import _seconds_per_flop
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.stage import (
    bf16_layer_indices,
    busiest_stage,
    rank_layer_indices,
)
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.pipeline_layout import stage_layers
from tests.unit_tests.conftest import layout_fields
from tests.unit_tests.jobs import dense_model


def _job(**model) -> JobDescription:
    """The generic dense model (:func:`dense_model`) of 16 layers in FP8 current scaling."""
    fields = {"num_layers": 16, "fp8": "hybrid", "fp8_recipe": "tensorwise", **model}
    return JobDescription(model=dense_model(**fields), world_size=8, gpu="h100")


def test_interleaved_ranks_hold_the_layers_of_their_virtual_stages():
    # 16 layers over PP2 x VPP2, 4 a virtual stage: megatron-core orders virtual stage v of
    # rank r as the (v x 2 + r)-th run, so rank 0 holds layers 0-3 and 8-11, rank 1 4-7 and
    # 12-15. The first layer and the last six stay in BF16: 0, 10-15.
    job = _job(
        **layout_fields(pp_size=2, vpp_size=2),
        first_last_layers_bf16=True,
        num_layers_at_start_in_bf16=1,
        num_layers_at_end_in_bf16=6,
    )
    chunks = stage_layers(job.model)
    assert chunks == [[4, 4], [4, 4]]
    assert bf16_layer_indices(job, chunks, 0) == [0, 10, 11]
    assert bf16_layer_indices(job, chunks, 1) == [12, 13, 14, 15]


@pytest.mark.parametrize(
    "model",
    [
        # Off, or nothing to keep out: 16-bit training has no FP8/FP4 recipe.
        {"first_last_layers_bf16": False},
        {"first_last_layers_bf16": True, "fp8": None},
    ],
)
def test_no_layer_is_kept_out_without_the_switch_and_a_quantized_recipe(model):
    job = _job(**model)
    assert bf16_layer_indices(job, stage_layers(job.model), 0) == []


@pytest.mark.parametrize(
    "name", ["llama3_8b", "deepseek_v3", "nemotron_3_super", "deepseek_v4_flash"]
)
def test_the_layers_linear_flops_are_the_decoder_less_core_attention_and_scans(name):
    dims = ModelCost(recipe_spec(name).job.model)
    layers = dims.model.num_layers
    linear = sum(dims.layer_gemm_flops_per_token(i) for i in range(layers))
    others = layers * (dims.core_attention_flops_per_token() + dims.scan_flops_per_token())
    assert linear == pytest.approx(dims.decoder_flops_per_token() - others)


def test_the_step_prices_the_kept_layers_linear_flops_at_the_16_bit_peak():
    # One stage; the first and the last layer kept out. Worked by hand: each Llama layer's
    # linear FLOPs per token are 6 x (h (q + 2 kv) + q h + 3 h ffn); their share of the stage's
    # FLOPs moves from the FP8 peak to the BF16 peak.
    job = recipe_spec("llama3_8b").job.replace(
        **{"model.fp8": "hybrid", "model.fp8_recipe": "tensorwise"}
    )
    kept = job.replace(**{"model.first_last_layers_bf16": True})
    dims = ModelCost(job.model)
    gpu = hardware.gpu_spec(job.gpu)
    plain = busiest_stage(job, dims, micro_batch_size=1, micro_batches=8)
    stage = busiest_stage(kept, dims, micro_batch_size=1, micro_batches=8)
    m = job.model
    h = m.hidden_size
    head_dim = h // m.num_attention_heads  # kv_channels unset: hidden / heads
    q, kv = m.num_attention_heads * head_dim, m.num_query_groups * head_dim
    per_layer = 6 * (h * (q + 2 * kv) + q * h + 3 * h * m.ffn_hidden_size)
    assert stage.bf16_layers == 2
    assert stage.bf16_gemm_flops_per_token == pytest.approx(2 * per_layer)
    share = 2 * per_layer / stage.flops_per_token
    fp8, bf16 = gpu.peak_tflops("fp8_cs") * 1e12, gpu.peak_tflops("bf16") * 1e12
    added = (
        _seconds_per_flop(kept, gpu, dims, stage).per_flop
        - _seconds_per_flop(job, gpu, dims, plain).per_flop
    )
    assert added == pytest.approx(share * (1 / bf16 - 1 / fp8))
    slower = estimate_step(_plan(kept)).prediction.step_seconds
    assert slower > estimate_step(_plan(job)).prediction.step_seconds


def _plan(job: JobDescription):
    return plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False), job)


def test_nemotron_3_super_keeps_its_last_14_layers_in_bf16_in_nvfp4_only():
    # Megatron-Bridge's nemotron_3_super_bf16_with_nvfp4_mixed, the precision of every NVFP4
    # perf run of the model.
    spec = recipe_spec("nemotron_3_super")
    assert spec.precision == "fp8_mx" and not spec.job.model.first_last_layers_bf16
    nvfp4 = spec.with_overrides(precision="nvfp4").job.model
    assert (
        nvfp4.first_last_layers_bf16,
        nvfp4.num_layers_at_start_in_bf16,
        nvfp4.num_layers_at_end_in_bf16,
    ) == (True, 0, 14)
    # A GPU without a published run of the pair still runs the model's NVFP4 precision.
    assert spec.with_overrides(gpu="b300", precision="nvfp4").job.model.first_last_layers_bf16
    back = spec.with_overrides(precision="nvfp4").with_overrides(precision="fp8_mx")
    assert not back.job.model.first_last_layers_bf16
    # A count the user gives with the precision is kept.
    mine = spec.changed(precision="nvfp4", **{"model.num_layers_at_end_in_bf16": 4})
    assert mine.job.model.num_layers_at_end_in_bf16 == 4


def test_nemotron_3_super_nvfp4_estimate_names_the_kept_layers():
    spec = recipe_spec("nemotron_3_super").with_overrides(precision="nvfp4")
    estimate = estimate_step(spec.plan())
    (line,) = [a for a in estimate.assumptions if "first_last_layers_bf16" in a]
    assert line.endswith(
        "in linear layers at the BF16 peak: 14 decoder layer(s) kept out of the NVFP4 recipe "
        "(first_last_layers_bf16)"
    )
    dsv4 = estimate_step(recipe_spec("deepseek_v4_flash").plan())
    (line,) = [a for a in dsv4.assumptions if "in linear layers at the BF16 peak:" in a]
    assert "DeepSeek-V4's grouped output, compressor and indexer-weight projections" in line


def test_a_built_recipe_keeps_the_layers_its_job_keeps():
    # The mixed-precision config writes the three fields onto the model config; the FP8
    # current-scaling preset alone would keep the first and last layer in BF16, which the
    # published FP8-CS runs turn off (Megatron-Bridge perf_recipes/_common.py _perf_precision).
    spec = recipe_spec("llama3_8b").with_overrides(precision="fp8_cs")
    assert not spec.job.model.first_last_layers_bf16
    cfg = spec.build()
    assert cfg.mixed_precision.first_last_layers_bf16 is False
    kept = spec.changed(
        **{"model.first_last_layers_bf16": True, "model.num_layers_at_end_in_bf16": 2}
    ).build()
    assert kept.mixed_precision.first_last_layers_bf16 is True
    assert kept.mixed_precision.num_layers_at_end_in_bf16 == 2


def test_deepseek_v4_runs_its_grouped_output_and_compressor_projections_in_16_bits():
    # megatron-core's DeepSeek-V4 attention runs the grouped output projection's first half as a
    # torch.einsum over a plain parameter, and the compressors' and the indexer's head-weight
    # projections under get_fp8_disabled_context. Worked by hand for DeepSeek-V4 Flash (64 heads
    # of v_head_dim 512, o_lora_rank 1024, hidden 4096, indexer 64 heads of 128), forward
    # multiply-adds per token: every layer 64 x 512 x 1024; ratio 128 adds the compressor
    # 2 x 4096 x 512; ratio 4 adds it at 2 x 4096 x (2 x 512), the indexer's compressor
    # 2 x 4096 x (2 x 128) and its head weights 4096 x 64. Training FLOPs are 6 x those; one
    # stage holds every decoder and MTP layer.
    spec = recipe_spec("deepseek_v4_flash")
    job = spec.job
    assert job.pp_size == 1 and job.model.fp8 is not None
    ratios = job.model.csa_compress_ratios
    weights = {
        0: 64 * 512 * 1024,
        128: 64 * 512 * 1024 + 2 * 4096 * 512,
        4: 64 * 512 * 1024 + 2 * 4096 * 2 * 512 + 2 * 4096 * 2 * 128 + 4096 * 64,
    }
    expected = 6 * sum(weights[r] for r in ratios)
    stage = busiest_stage(job, ModelCost(job.model), micro_batch_size=1, micro_batches=16)
    assert stage.bf16_layers == 0
    assert stage.bf16_gemm_flops_per_token == pytest.approx(expected)
    # In BF16 training every GEMM runs at the 16-bit peak: nothing is priced apart.
    bf16 = spec.changed(precision="bf16").job
    plain = busiest_stage(bf16, ModelCost(bf16.model), micro_batch_size=1, micro_batches=16)
    assert plain.bf16_gemm_flops_per_token == 0.0


@pytest.mark.parametrize(
    "split",
    [
        {
            "num_layers": 16,
            "pipeline_model_parallel_size": 2,
            "virtual_pipeline_model_parallel_size": 2,
        },
        {
            "num_layers": 24,
            "pipeline_model_parallel_size": 4,
            "virtual_pipeline_model_parallel_size": 3,
        },
        {"num_layers": 12, "pipeline_model_parallel_size": 4},
        {
            "num_layers": 14,
            "pipeline_model_parallel_size": 4,
            "num_layers_in_first_pipeline_stage": 2,
            "num_layers_in_last_pipeline_stage": 4,
        },
        {
            "num_layers": 20,
            "pipeline_model_parallel_size": 4,
            "virtual_pipeline_model_parallel_size": 2,
            "num_layers_in_first_pipeline_stage": 2,
            "num_layers_in_last_pipeline_stage": 2,
        },
    ],
)
def test_each_ranks_layers_start_where_megatron_core_offsets_them(split):
    # The global index of each model chunk's first layer is megatron-core's
    # get_transformer_layer_offset for that pipeline rank and virtual stage.
    config = TransformerConfig(
        hidden_size=64, num_attention_heads=4, pipeline_dtype=torch.bfloat16, **split
    )
    chunks = stage_layers(_job(**split).model)
    for rank, rank_chunks in enumerate(chunks):
        indices = rank_layer_indices(chunks, rank)
        starts = [indices[sum(rank_chunks[:v])] for v in range(len(rank_chunks))]
        vp = split.get("virtual_pipeline_model_parallel_size")
        expected = [
            get_transformer_layer_offset(config, vp_stage=v if vp else None, pp_rank=rank)
            for v in range(len(rank_chunks))
        ]
        assert starts == expected
