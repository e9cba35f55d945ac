"""The step model against measurements: the fitted achievable fraction and upstream's EP A/B."""

from __future__ import annotations

import jsonschema
import pytest

from megatron.bridge import schema
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.estimate import efficiency, estimate_step
from megatron.bridge.training.job import JobDescription, ModelDescription

#: Qwen3-30B-A3B (Hugging Face Qwen/Qwen3-30B-A3B config, as Megatron-Bridge's Qwen3MoeBridge
#: maps it: RMSNorm, SwiGLU, no linear bias, QK layernorm, 128 experts top-8, alltoall).
QWEN3_30B_A3B = ModelDescription(
    num_layers=48,
    hidden_size=2048,
    num_attention_heads=32,
    num_query_groups=4,
    kv_channels=128,
    ffn_hidden_size=6144,
    vocab_size=151936,
    seq_length=4096,
    gated_linear_unit=True,
    add_bias_linear=False,
    normalization="RMSNorm",
    position_embedding_type="rope",
    share_embeddings_and_output_weights=False,
    bf16=True,
    num_moe_experts=128,
    moe_router_topk=8,
    moe_ffn_hidden_size=768,
    moe_grouped_gemm=True,
    moe_token_dispatcher_type="alltoall",
    expert_model_parallel_size=16,
    expert_tensor_parallel_size=1,
)

#: Upstream's measured A/B (Megatron-Bridge PR 3862, docs/training/communication-overlap.md):
#: 16 x H100, BF16, TP1 PP1 CP1 EP16, alltoall, MBS 1, GBS 1024, seq 4096; steady step 41.25 s
#: without EP overlap, 31.31 s with it.
MEASURED_RATIO = 41.25 / 31.31


def _qwen_step(ep_overlap: bool) -> float:
    job = JobDescription(
        model=QWEN3_30B_A3B,
        world_size=16,
        gpu="h100",
        micro_batch_size=1,
        global_batch_size=1024,
        use_distributed_optimizer=True,
    )
    request = CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=ep_overlap)
    return estimate_step(plan_comm_overlap(request, job)).prediction.step_seconds


def test_ep_overlap_speeds_the_qwen3_step_up():
    assert _qwen_step(True) < _qwen_step(False)


@pytest.mark.xfail(
    strict=True,
    reason="the model predicts about 1.76x (29.5 s / 16.7 s) against the measured 1.32x: it hides "
    "more of the all-to-all than the measured run did",
)
def test_ep_overlap_ratio_is_within_15_percent_of_upstreams_measurement():
    ratio = _qwen_step(False) / _qwen_step(True)
    assert ratio == pytest.approx(MEASURED_RATIO, rel=0.15)


@pytest.mark.parametrize("key", sorted(efficiency.FIT_ROWS))
def test_each_fraction_reproduces_the_row_it_was_fitted_on(key):
    row = efficiency.FIT_ROWS[key]
    spec = recipe_spec(row.model).changed(precision=row.precision, **row.layout)
    prediction = estimate_step(spec.plan(world_size=row.world_size)).prediction
    assert prediction.achievable_fraction == efficiency.ACHIEVABLE[key].fraction
    assert prediction.tokens_per_s_per_gpu == pytest.approx(row.tokens_per_s_per_gpu, rel=0.01)


def test_unfitted_gpus_say_where_their_fraction_comes_from():
    fitted = efficiency.achievable_fraction("h100", "fp8")
    other = efficiency.achievable_fraction("b200", "fp8")
    assert other.fraction == fitted.fraction and "no fitted row for b200" in other.source


def test_estimate_json_validates_against_the_schema():
    defs = schema.explain_schema()["$defs"]
    validator = jsonschema.Draft202012Validator({"$defs": defs, "$ref": "#/$defs/estimate"})
    estimate = estimate_step(recipe_spec("llama3_70b").plan())
    validator.validate(estimate.to_dict())
    prediction = estimate.to_dict()["prediction"]
    assert prediction["step_seconds"] == pytest.approx(
        prediction["compute_seconds"] + prediction["bubble_seconds"] + prediction["exposed_seconds"]
    )
