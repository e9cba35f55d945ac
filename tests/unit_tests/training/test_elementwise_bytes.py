"""The memory-bound term of the step estimate: ModelCost.elementwise_bytes_per_token and the
HBM seconds estimate_step adds to the compute.

Each hand computation below spells the forward elements per token of one block, term by term,
then takes 2 bytes an element and forward + backward = 3 forwards.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.job import ModelDescription
from tests.unit_tests.conftest import h100_job
from tests.unit_tests.jobs import dense_model
from tests.unit_tests.small_models import DENSE, HYBRID, MLA, MOE

BYTES_FWD_BWD = 2 * 3
"""2 bytes an element; the backward moves twice the forward's bytes."""


def test_dense_layer_bytes_match_the_hand_count():
    # Attention block: norm reads + writes 64 (128); rotary reads + writes Q 64 and K 32 (192);
    # core attention reads Q 64, K 32, V 32, writes O 64 (192); residual reads 2 x 64, writes
    # 64 (192).
    attention = 128 + 192 + 192 + 192
    # MLP block: norm 128; SwiGLU reads 2 x 128, writes 128 (384); residual 192.
    mlp = 128 + 384 + 192
    assert (attention, mlp) == (704, 704)
    assert ModelCost(DENSE).elementwise_bytes_per_token() == (attention + mlp) * BYTES_FWD_BWD


def test_moe_layer_bytes_match_the_hand_count():
    # Attention: norm 128; no rotary (learned positions); Q, K, V, O 64 each (256); residual 192.
    attention = 128 + 256 + 192
    # MoE block: norm 128; router scores 8 experts in fp32 read + written (4 x 8 = 32);
    # permute reads the token (64) and writes 2 copies (128); 2 experts' SwiGLU over 32
    # (2 x 96 = 192); unpermute reads 2 copies, writes 1 (192); shared expert SwiGLU over 64
    # (192); residual 192.
    moe = 128 + 32 + 192 + 192 + 192 + 192 + 192
    # Dense MLP: norm 128, SwiGLU over 128 (384), residual 192.
    dense = 128 + 384 + 192
    assert (attention, moe, dense) == (576, 1120, 704)
    mean_layer = attention + (moe + dense) / 2
    # The grouped experts' fc2 bias, added expert by expert (TEGroupedMLP._apply_bias): 6
    # hidden-wide elements forward and 8 backward per routed copy, counted forward and backward
    # together, 2 copies of 64, on one layer of two.
    bias = (6 + 8) * 2 * 64 * 2 / 2
    assert ModelCost(MOE).elementwise_bytes_per_token() == mean_layer * BYTES_FWD_BWD + bias
    unbiased = dataclasses.replace(MOE, add_bias_linear=False)
    assert ModelCost(unbiased).elementwise_bytes_per_token() == mean_layer * BYTES_FWD_BWD


def test_latent_moe_dispatches_latent_wide_tokens():
    # moe_latent_size 16: permute reads 16 and writes 2 x 16 (48), unpermute the same (48),
    # where the 64-wide tokens moved 192 + 192; everything else as in the MoE count.
    latent = dataclasses.replace(MOE, moe_latent_size=16)
    saved_elements = (192 - 48) + (192 - 48)
    difference = (
        ModelCost(MOE).elementwise_bytes_per_token()
        - ModelCost(latent).elementwise_bytes_per_token()
    )
    assert difference == saved_elements / 2 * BYTES_FWD_BWD  # one MoE layer of two


def test_mla_layer_bytes_match_the_hand_count():
    # Attention: norm 128; latent norms read + write 24 and 16 (80); rotary reads + writes the
    # whole Q and K, 4 heads x (8 + 4) = 48 each (192); core attention reads Q 48, K 48,
    # V 4 x 8 = 32, writes O 32 (160); residual 192.
    attention = 128 + 80 + 192 + 160 + 192
    # Plain MLP: norm 128; activation reads + writes 128 (256); residual 192.
    mlp = 128 + 256 + 192
    assert (attention, mlp) == (752, 576)
    assert ModelCost(MLA).elementwise_bytes_per_token() == (attention + mlp) * BYTES_FWD_BWD


def test_hybrid_layer_bytes_match_the_hand_count():
    # Mamba: norm 128; conv1d reads + writes x (128) and B, C (2 x 2 groups x 8 = 32): 320;
    # scan reads x 128, B + C 32, dt 8 heads, writes y 128 (296); gated norm reads y and z,
    # writes 128 (384); residual 192.
    mamba = 128 + 320 + 296 + 384 + 192
    # Attention: norm 128, Q, K, V, O 64 each (256), residual 192.
    attention = 128 + 256 + 192
    # MLP: norm 128, activation over 96 (192), residual 192.
    mlp = 128 + 192 + 192
    # MoE: norm 128; router 4 x 4 = 16; permute 64 + 64; one expert's activation over 32 (64);
    # unpermute 64 + 64; no shared expert; residual 192.
    moe = 128 + 16 + 128 + 64 + 128 + 192
    assert (mamba, attention, mlp, moe) == (1320, 576, 512, 656)
    mean_layer = (mamba + attention + mlp + moe) / 4
    assert ModelCost(HYBRID).elementwise_bytes_per_token() == mean_layer * BYTES_FWD_BWD


def _scaled(model: ModelDescription, factor: int) -> ModelDescription:
    widths = {
        "hidden_size": model.hidden_size * factor,
        "ffn_hidden_size": model.ffn_hidden_size * factor,
    }
    if model.kv_channels is not None:
        widths["kv_channels"] = model.kv_channels * factor
    if model.multi_latent_attention:
        widths |= {
            name: getattr(model, name) * factor
            for name in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim")
        } | {"v_head_dim": model.v_head_dim * factor}
    return dataclasses.replace(model, **widths)


@pytest.mark.parametrize("model", [DENSE, MLA], ids=["dense", "mla"])
@pytest.mark.parametrize("factor", [2, 3, 16])
def test_bytes_scale_linearly_in_hidden_at_fixed_ratios(model, factor):
    base = ModelCost(model).elementwise_bytes_per_token()
    assert ModelCost(_scaled(model, factor)).elementwise_bytes_per_token() == factor * base


def test_flops_grow_faster_than_bytes_with_hidden():
    small, large = ModelCost(DENSE), ModelCost(_scaled(DENSE, 16))
    bytes_ratio = large.elementwise_bytes_per_token() / small.elementwise_bytes_per_token()
    flops_ratio = large.layer_flops_per_token() / small.layer_flops_per_token()
    assert bytes_ratio == 16
    assert flops_ratio > 100  # the projections grow with hidden^2 (16^2 = 256)


LLAMA3_8B = dense_model(vocab_size=32000)
"""Llama-3 8B at sequence 4096: hidden 4096, 32 heads of 128 in 8 groups, SwiGLU 14336, RoPE."""


def test_llama3_8b_step_adds_its_bytes_at_the_hbm_peak_without_the_fraction():
    # One layer: attention norm 8192 + rotary 2 x (4096 + 1024) + core I/O 4096 + 1024 + 1024 +
    # 4096 + residual 12288 = 40960; MLP norm 8192 + SwiGLU 3 x 14336 + residual 12288 = 63488.
    layer_bytes = (40960 + 63488) * BYTES_FWD_BWD
    assert layer_bytes == 626_688
    job = h100_job(LLAMA3_8B, global_batch_size=4)
    estimate = estimate_step(plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=True), job))
    tokens = 4 * 4096  # one GPU: no DP, TP, CP or PP
    assert estimate.step.memory_seconds_at_peak == pytest.approx(
        tokens * 32 * layer_bytes / 3350e9, rel=1e-12
    )
    p = estimate.prediction
    assert p.bubble_seconds == 0
    # The loss over the 32000-word vocabulary (a multiple of 128, so unpadded) moves 58 bytes per
    # logit at the HBM peak, outside the memory-bound layer kernels.
    loss_seconds = tokens * 58 * 32000 / 3350e9
    # The GEMMs at the fraction and core attention at its kernel's curve, then the bytes.
    assert p.compute_seconds == pytest.approx(
        estimate.step.gemm_seconds
        + estimate.step.attention_seconds
        + estimate.step.memory_seconds_at_peak
        + loss_seconds,
        rel=1e-9,
    )
    assert "memory-bound at HBM peak" in estimate.render()
    assert estimate.to_dict()["step"]["memory_seconds_at_peak"] == (
        estimate.step.memory_seconds_at_peak
    )


def test_full_recompute_adds_the_forward_third_of_the_bytes():
    plain = h100_job(LLAMA3_8B, global_batch_size=4)
    full = h100_job(
        dataclasses.replace(LLAMA3_8B, recompute_granularity="full", recompute_method="uniform"),
        global_batch_size=4,
    )
    seconds = [
        estimate_step(
            plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=True), job)
        ).step.memory_seconds_at_peak
        for job in (plain, full)
    ]
    assert seconds[1] == pytest.approx(seconds[0] * 4 / 3, rel=1e-12)


def test_split_over_tp_and_cp():
    one = h100_job(LLAMA3_8B, global_batch_size=4)
    split = h100_job(LLAMA3_8B, tp_size=2, cp_size=2, sequence_parallel=True, global_batch_size=4)
    seconds = [
        estimate_step(
            plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=True), job)
        ).step.memory_seconds_at_peak
        for job in (one, split)
    ]
    assert seconds[1] == pytest.approx(seconds[0] / 4, rel=1e-12)


def test_without_sequence_parallelism_every_tp_rank_runs_the_hidden_wide_kernels_whole():
    # One layer: the norms and residual adds are hidden-wide, 2 x (8192 + 12288) = 40960
    # elements; rotary 10240, core I/O 10240 and SwiGLU 43008 (63488) are head- and FFN-wide,
    # halved over TP 2.
    job = h100_job(LLAMA3_8B, tp_size=2, sequence_parallel=False, global_batch_size=4)
    estimate = estimate_step(plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False), job))
    tokens = 4 * 4096
    assert estimate.step.memory_seconds_at_peak == pytest.approx(
        tokens * 32 * (40960 + 63488 / 2) * BYTES_FWD_BWD / 3350e9, rel=1e-12
    )


@pytest.mark.parametrize("model", [DENSE, MOE, MLA, HYBRID], ids=["dense", "moe", "mla", "hybrid"])
@pytest.mark.parametrize("tp", [2, 4])
def test_tp_splits_all_bytes_with_sequence_parallelism_and_only_some_without(model, tp):
    cost = ModelCost(model)
    whole = cost.elementwise_bytes_per_token()
    with_sp = cost.elementwise_bytes_per_token(tp_size=tp, sequence_parallel=True)
    without_sp = cost.elementwise_bytes_per_token(tp_size=tp, sequence_parallel=False)
    assert with_sp == pytest.approx(whole / tp, rel=1e-12)
    assert whole / tp < without_sp < whole


def test_h200_has_more_hbm_bandwidth_and_capacity_than_h100_and_nothing_else_faster():
    h100, h200 = gpu_spec("h100"), gpu_spec("h200")
    assert h200.hbm_gb_per_s > h100.hbm_gb_per_s
    assert h200.memory_gb > h100.memory_gb
    same_hbm = dataclasses.replace(
        h200, name="h100", hbm_gb_per_s=h100.hbm_gb_per_s, memory_gb=h100.memory_gb
    )
    assert same_hbm == h100


@settings(max_examples=30, deadline=None)
@given(
    hidden=st.sampled_from([1024, 2048, 4096]),
    layers=st.sampled_from([4, 8, 16]),
    moe=st.booleans(),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    micro_batches=st.sampled_from([2, 4, 8]),
    recompute=st.booleans(),
    overlap=st.booleans(),
)
def test_more_hbm_bandwidth_never_predicts_a_slower_step(
    hidden, layers, moe, tp, pp, micro_batches, recompute, overlap
):
    model = dataclasses.replace(
        LLAMA3_8B,
        num_layers=layers,
        hidden_size=hidden,
        ffn_hidden_size=hidden * 3,
        kv_channels=hidden // 32,
        recompute_granularity="full" if recompute else None,
        recompute_method="uniform" if recompute else None,
        **(
            {"num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": hidden}
            if moe
            else {}
        ),
    )
    request = CommOverlapConfig(
        tp_comm_overlap=overlap, overlap_grad_reduce=overlap, overlap_param_gather=overlap
    )
    steps = {}
    for gpu in ("h100", "h200"):
        job = h100_job(
            model,
            gpu=gpu,
            tp_size=tp,
            pp_size=pp,
            sequence_parallel=tp > 1,
            use_distributed_optimizer=True,
            global_batch_size=micro_batches * 2,
            dp_size=2,
            **({"ep_size": 2, "moe_token_dispatcher_type": "alltoall"} if moe else {}),
        )
        steps[gpu] = estimate_step(plan_comm_overlap(request, job))
    slow, fast = steps["h100"], steps["h200"]
    assert fast.step.memory_seconds_at_peak == pytest.approx(
        slow.step.memory_seconds_at_peak * 3350 / 4800, rel=1e-12
    )
    assert fast.prediction.step_seconds <= slow.prediction.step_seconds * (1 + 1e-12)
    assert fast.prediction.compute_seconds < slow.prediction.compute_seconds
