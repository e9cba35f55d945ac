"""Core attention at the flash-attention kernels' measured curves (``estimate/attention.py``)."""

from __future__ import annotations

import pytest

from megatron.bridge.recipes import plan_recipe
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.attention import (
    CURVES,
    HEAD_DIM_64,
    attention_seconds,
    kernel_calls,
)

H100_BF16 = 989e12


@pytest.mark.parametrize(
    ("keys", "published"),
    [(512, 315), (16384, 539)],
)
def test_the_hopper_causal_forward_passes_through_its_published_points(keys, published):
    """cuDNN's causal forward, head dim 128, on H100 (the FlashAttention-3 paper's figure)."""
    rate = CURVES[("hopper", True, "forward")].rate(keys) * 989
    assert rate == pytest.approx(published, rel=0.01)


def test_longer_calls_run_faster_and_head_dim_64_slower():
    flops = 1e12

    def seconds(keys, head_dim=128, cp=1):
        f, b = attention_seconds(
            flops, keys=keys, cp_size=cp, head_dim=head_dim, gpu_generation="hopper", peak=H100_BF16
        )
        return f + b

    assert seconds(512) > seconds(4096) > seconds(65536)
    assert seconds(8192, head_dim=64) == pytest.approx(seconds(8192) / HEAD_DIM_64["hopper"])
    # A third of the FLOPs forward; the backward's 2.5x-forward FLOPs at the backward rate.
    f, b = attention_seconds(
        flops, keys=1e9, cp_size=1, head_dim=128, gpu_generation="hopper", peak=H100_BF16
    )
    fwd, bwd = CURVES[("hopper", True, "forward")], CURVES[("hopper", True, "backward")]
    assert f == pytest.approx(flops / 3 / (H100_BF16 * fwd.long_rate), rel=1e-6)
    assert b == pytest.approx(flops * 2 / 3 * 1.25 / (H100_BF16 * bwd.long_rate), rel=1e-6)


def test_cp_runs_one_causal_step_and_the_rest_unmasked_on_half_chunks():
    assert kernel_calls(8192, 1) == ((1.0, 8192, True),)
    assert kernel_calls(8192, 4) == ((0.25, 2048, True), (0.75, 1024, False))


def _tokens_per_s(seq: int, *, window=None) -> float:
    changes = {
        "world_size": 8,
        "global_batch_size": 8,
        "micro_batch_size": 1,
        "model.tensor_model_parallel_size": 8,
        "model.pipeline_model_parallel_size": 1,
        "model.virtual_pipeline_model_parallel_size": None,
        "model.context_parallel_size": 1,
        "model.seq_length": seq,
    }
    if window is not None:
        changes["model.window_size"] = window
    plan = plan_recipe("llama3_8b", gpu="h100", precision="fp8_cs", changes=changes)
    return estimate_step(plan).prediction.tokens_per_s_per_gpu


def test_the_estimate_slows_with_sequence_length_as_attention_grows():
    assert _tokens_per_s(4096) > _tokens_per_s(32768) > _tokens_per_s(131072)


def test_a_sliding_window_runs_short_calls_at_the_curves_low_end():
    """A 128-key window does far fewer FLOPs than full attention at 32K, but each FLOP at a
    fraction of the long-call rate: the windowed step is faster, by less than its FLOPs say."""
    full, windowed = _tokens_per_s(32768), _tokens_per_s(32768, window=(127, 0))
    assert windowed > full
    rate_short = CURVES[("hopper", True, "forward")].rate(128)
    rate_long = CURVES[("hopper", True, "forward")].rate(32768)
    assert rate_short < rate_long / 3


def test_the_breakdown_names_the_attention_curve_and_its_source():
    plan = plan_recipe("llama3_8b", gpu="h100", precision="fp8_cs")
    estimate = estimate_step(plan)
    step = estimate.step
    assert step.attention_seconds > 0 and step.gemm_seconds > step.attention_seconds
    assert "FlashAttention-3" in step.attention_source
    assert "core attention" in estimate.render() and "flash-attention curve" in estimate.render()
