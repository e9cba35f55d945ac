"""Two memory-bound kernels of the routed experts the estimate counts kernel by kernel: the clamp
of a clamped gated activation outside the fused grouped MLP (GPT-OSS), and the all-to-all
dispatcher's sort of the received tokens by local expert.

The hand counts are over the small MoE model: one MoE layer of two, top-2, expert width 32,
hidden 64, 16-bit elements.
"""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.recipes import plan_recipe
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.model_cost import ModelCost
from tests.unit_tests.small_models import MOE

CLAMPED = dataclasses.replace(
    MOE, activation_func="quick_gelu", glu_linear_offset=1.0, activation_func_clamp_value=7.0
)
"""The small MoE model with GPT-OSS's clamped quick-GeGLU."""

COPIES = 2 * 32
"""Expert-width elements of the routed copies of one token (top-2 x width 32)."""


def _bytes(model, **kwargs) -> float:
    return ModelCost(model).elementwise_bytes_per_token(**kwargs)


def _recompute(model, module, **kwargs) -> float:
    return ModelCost(model).recompute_elementwise_bytes_per_token(module, **kwargs)


def _unclamped(model):
    return dataclasses.replace(model, activation_func_clamp_value=None)


def test_the_fused_bias_activation_path_clamps_and_concatenates():
    model = dataclasses.replace(CLAMPED, bias_activation_fusion=True)
    # Forward: two clamps (4W) and the concatenation (4W); backward: the clamps' gradients (6W)
    # and chunk's (4W); 2 bytes, one MoE layer of two.
    assert _bytes(model) - _bytes(_unclamped(model)) == pytest.approx((8 + 10) * COPIES * 2 / 2)


def test_the_eager_activation_clamps_without_concatenating():
    model = dataclasses.replace(CLAMPED, bias_activation_fusion=False)
    assert _bytes(model) - _bytes(_unclamped(model)) == pytest.approx((4 + 10) * COPIES * 2 / 2)


def test_the_fused_grouped_mlp_clamps_inside_its_activation():
    model = dataclasses.replace(CLAMPED, use_transformer_engine_op_fuser=True)
    assert _bytes(model) == _bytes(_unclamped(model))


def test_an_unclamped_or_ungated_activation_has_no_clamp_traffic():
    ungated = dataclasses.replace(CLAMPED, gated_linear_unit=False)
    assert _bytes(ungated) == _bytes(_unclamped(ungated))
    assert _bytes(MOE) == _bytes(dataclasses.replace(MOE, activation_func_clamp_value=None))


def test_recomputing_the_activation_runs_its_clamp_forward_again():
    model = dataclasses.replace(CLAMPED, bias_activation_fusion=True)
    for module in ("moe_act", "moe"):
        extra = _recompute(model, module) - _recompute(_unclamped(model), module)
        assert extra == pytest.approx(8 * COPIES * 2 / 2), module


def _dispatched(dispatcher: str):
    return dataclasses.replace(MOE, moe_token_dispatcher_type=dispatcher)


def test_the_alltoall_dispatcher_sorts_by_local_expert_both_ways():
    # EP 2: 4 local experts. Sort and unsort each read and write the top-2 copies of the
    # 64-wide token (4 x 2 x 64 forward), their gradients as much again; one MoE layer of two.
    extra = _bytes(_dispatched("alltoall"), ep_size=2) - _bytes(_dispatched("allgather"), ep_size=2)
    assert extra == pytest.approx(2 * 4 * 2 * 64 * 2 / 2)
    recomputed = _recompute(_dispatched("alltoall"), "moe", ep_size=2) - _recompute(
        _dispatched("allgather"), "moe", ep_size=2
    )
    assert recomputed == pytest.approx(4 * 2 * 64 * 2 / 2)


@pytest.mark.parametrize(("dispatcher", "ep_size"), [("alltoall", 8), ("flex", 2)])
def test_no_sort_with_one_local_expert_or_another_dispatcher(dispatcher, ep_size):
    assert _bytes(_dispatched(dispatcher), ep_size=ep_size) == _bytes(
        _dispatched("allgather"), ep_size=ep_size
    )


def _sort_seconds(ep_size: int) -> float:
    """HBM seconds the all-to-all dispatcher adds to the flex one for GPT-OSS on 128 GPUs."""
    layout = {
        "world_size": 128,
        "global_batch_size": 1536,
        "model.expert_model_parallel_size": ep_size,
    }
    alltoall = plan_recipe(
        "gpt_oss_120b", changes={**layout, "model.moe_token_dispatcher_type": "alltoall"}
    )
    flex = plan_recipe("gpt_oss_120b", changes=layout)
    assert (alltoall.job.ep_size, flex.job.ep_size) == (ep_size, ep_size)
    assert flex.job.model.moe_token_dispatcher_type == "flex"
    return (
        estimate_step(alltoall).step.memory_seconds_at_peak
        - estimate_step(flex).step.memory_seconds_at_peak
    )


def test_the_estimate_sorts_by_the_layouts_local_experts():
    # GPT-OSS's 128 experts: 8 per rank at EP16, where the all-to-all dispatcher sorts; one per
    # rank at EP128, where it does not, so the stage must pass its EP size.
    assert _sort_seconds(16) > 0
    assert _sort_seconds(128) == 0
