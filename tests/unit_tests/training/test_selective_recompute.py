"""Selective recompute in the step estimate: what each megatron-core recompute module runs again.

ModelCost.recompute_flops_per_token / recompute_elementwise_bytes_per_token per module, hand
computed on two small models, and the stage that sums them (estimate/stage.py busiest_stage).
Each hand computation spells the forward of the recomputed piece: FLOPs as 2 x weights per
token (the forward third of 6 x weights), bytes as 2 bytes an element of forward traffic.
"""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.training.estimate.attention import attention_seconds
from megatron.bridge.training.estimate.comm import ep_transfers, tp_transfers
from megatron.bridge.training.estimate.compute import stage_compute
from megatron.bridge.training.estimate.efficiency import achievable_fraction
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.stage import Stage, busiest_stage
from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules.recompute import RECOMPUTE_MODULES
from tests.unit_tests.conftest import h100_job
from tests.unit_tests.jobs import dense_model
from tests.unit_tests.small_models import DENSE, MLA, MOE

# Forward FLOPs per token of the mean layer (2 layers), by module.
MOE_FLOPS = {
    # Core attention: 2 x query width 64 x seq 32 per layer (the causal half of QK^T and AV).
    "core_attn": 2 * 64 * 32,
    # The dense layer's SwiGLU MLP: 2 x 64 x 128 x 3, over 2 layers.
    "mlp": 2 * 64 * 128 * 3 / 2,
    # The MoE layer: top-2 of width 32 and the shared 64, SwiGLU, over 2 layers.
    "moe": 2 * 64 * (2 * 32 + 64) * 3 / 2,
    "shared_experts": 2 * 64 * 64 * 3 / 2,
    "layernorm": 0,
    "moe_act": 0,
    "gdn_norm_out": 0,
}
MLA_FLOPS = {
    # The up-projections: q 24 x (4 heads x (8 + 4) + 1 norm), kv 16 x (4 x (8 + 8) + 1).
    "mla_up_proj": 2 * (24 * (4 * 12 + 1) + 16 * (4 * 16 + 1)),
    # Core attention: 2 x (seq 32 x 4 heads x 12 / 2 + 32 x 4 x 8 / 2).
    "core_attn": 2 * (32 * 4 * 12 / 2 + 32 * 4 * 8 / 2),
    # The plain MLP: 2 x 64 x 128 x 2 on each of the 2 dense layers.
    "mlp": 2 * 64 * 128 * 2,
}

# Forward bytes per token of the mean layer on one GPU (TP 1), 2 bytes an element.
MOE_BYTES = {
    # The attention kernel reads Q, K, V and writes O, 64 wide each, on both layers.
    "core_attn": 2 * 4 * 64,
    # The MoE layer's separate pre-MLP norm (reads and writes 64) on 1 of 2 layers; the
    # attention norm is fused into linear_qkv.
    "layernorm": 2 * (2 * 64) / 2,
    # The routed experts' SwiGLU: top-2 copies x (2 x 32 read + 32 written), 1 of 2 layers.
    "moe_act": 2 * (2 * 3 * 32) / 2,
    # The dense MLP: its fused norm (2 x 64) and SwiGLU (3 x 128), 1 of 2 layers.
    "mlp": 2 * (2 * 64 + 3 * 128) / 2,
    # The MoE layer: router scores 4 x 8 experts, permute (1 + 2) x 64, unpermute (2 + 1) x 64,
    # routed SwiGLU 2 x 3 x 32, shared SwiGLU 3 x 64; 1 of 2 layers.
    "moe": 2 * (4 * 8 + 3 * 64 + 3 * 64 + 2 * 3 * 32 + 3 * 64) / 2,
    "shared_experts": 2 * (3 * 64) / 2,
    "mla_up_proj": 0,
    "gdn_norm_out": 0,
}
MLA_BYTES = {
    # Latent norms 2 x (24 + 16) and the rotary step writing Q and K (4 x 12 each) read and
    # written: 2 x (48 + 48).
    "mla_up_proj": 2 * (2 * (24 + 16) + 2 * (48 + 48)),
    # MLA's input norm is its own module on every layer; no MoE layer.
    "layernorm": 2 * (2 * 64),
    # Q and K 4 x 12, V and O 4 x 8.
    "core_attn": 2 * (48 + 48 + 32 + 32),
}


def test_every_megatron_core_module_is_priced_here():
    priced = set(MOE_FLOPS) | set(MOE_BYTES) | set(MLA_FLOPS) | set(MLA_BYTES)
    assert priced == set(RECOMPUTE_MODULES)


@pytest.mark.parametrize(
    ("model", "module", "flops"),
    [(MOE, m, f) for m, f in MOE_FLOPS.items()] + [(MLA, m, f) for m, f in MLA_FLOPS.items()],
)
def test_recomputed_flops_per_module(model, module, flops):
    assert ModelCost(model).recompute_flops_per_token(module) == pytest.approx(flops)


@pytest.mark.parametrize(
    ("model", "module", "nbytes"),
    [(MOE, m, b) for m, b in MOE_BYTES.items()] + [(MLA, m, b) for m, b in MLA_BYTES.items()],
)
def test_recomputed_bytes_per_module(model, module, nbytes):
    cost = ModelCost(model)
    assert cost.recompute_elementwise_bytes_per_token(module) == pytest.approx(nbytes)


def test_recomputed_bytes_split_over_tp_as_the_layer_bytes_are():
    cost = ModelCost(MOE)
    # The dense MLP: the norm (128 elements, hidden-wide) and SwiGLU (384, FFN-wide), 1 of 2
    # layers. TP 2 splits the SwiGLU; the norm only with sequence parallelism.
    with_sp = cost.recompute_elementwise_bytes_per_token("mlp", tp_size=2, sequence_parallel=True)
    without = cost.recompute_elementwise_bytes_per_token("mlp", tp_size=2, sequence_parallel=False)
    assert with_sp == pytest.approx(2 * (128 / 2 + 384 / 2) / 2)
    assert without == pytest.approx(2 * (128 + 384 / 2) / 2)


def test_a_module_recomputed_is_the_forward_third_of_its_training_flops():
    cost = ModelCost(MOE)
    # The MoE layer, recomputed, runs again a third of what the model FLOPs count for it.
    assert cost.recompute_flops_per_token("moe") == pytest.approx(
        cost.moe_mlp_flops_per_token() / 3 / MOE.num_layers
    )


def _stage(model: ModelDescription, **recompute):
    job = h100_job(dataclasses.replace(model, **recompute))
    return busiest_stage(job, ModelCost(job.model), micro_batch_size=1, micro_batches=8)


def test_the_stage_sums_the_recomputed_modules():
    stage = _stage(
        MOE,
        recompute_granularity="selective",
        recompute_modules=("layernorm", "moe_act", "shared_experts"),
    )
    assert stage.recompute_modules == ("layernorm", "moe_act", "shared_experts")
    layers = MOE.num_layers
    assert stage.recompute_flops_per_token == pytest.approx(layers * MOE_FLOPS["shared_experts"])
    assert stage.recompute_elementwise_bytes_per_token == pytest.approx(
        layers * (MOE_BYTES["layernorm"] + MOE_BYTES["moe_act"] + MOE_BYTES["shared_experts"])
    )
    assert stage.recompute_core_attn == 0.0


@pytest.mark.parametrize(
    ("modules", "expected"),
    [
        # megatron-core: None is ["core_attn"]; an empty list stays empty.
        (None, ("core_attn",)),
        ((), ()),
    ],
)
def test_none_is_core_attention_and_empty_is_nothing(modules, expected):
    stage = _stage(MLA, recompute_granularity="selective", recompute_modules=modules)
    assert stage.recompute_modules == expected
    flops = MLA.num_layers * sum(MLA_FLOPS[m] for m in expected)
    assert stage.recompute_flops_per_token == pytest.approx(flops)


def test_full_recompute_adds_no_selective_module():
    stage = _stage(
        MLA, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1
    )
    assert stage.recompute_modules == ()
    assert stage.recompute_flops_per_token == pytest.approx(
        stage.layers * ModelCost(MLA).layer_flops_per_token() / 3
    )


@pytest.mark.parametrize(
    ("recompute", "ratio"),
    [
        ({}, 1.0),
        ({"recompute_granularity": "selective", "recompute_modules": ("moe_act",)}, 1.0),
        # moe_layer.py checkpoints the whole MoE forward: its dispatch and combine run again.
        ({"recompute_granularity": "selective", "recompute_modules": ("moe",)}, 1.5),
    ],
)
def test_recomputing_the_moe_layer_sends_its_forward_all_to_alls_again(recompute, ratio):
    def ep_bytes(model: ModelDescription) -> float:
        job = h100_job(model, dp_size=2, expert_model_parallel_size=2)
        stage = busiest_stage(job, ModelCost(job.model), micro_batch_size=1, micro_batches=8)
        (transfer,) = ep_transfers(job, stage)
        return transfer.nbytes

    moe = dataclasses.replace(MOE, moe_token_dispatcher_type="alltoall")
    plain = ep_bytes(moe)
    assert plain > 0
    assert ep_bytes(dataclasses.replace(moe, **recompute)) == pytest.approx(ratio * plain)


@pytest.mark.parametrize(("sequence_parallel", "per_mlp"), [(True, 2), (False, 2)])
def test_recomputing_a_dense_mlp_runs_its_tp_collectives_again(sequence_parallel, per_mlp):
    # With SP the MLP all-gathers its input and reduce-scatters its output (2 collectives of
    # act bytes); without SP it all-reduces its output once (2 x act): 2 either way.
    def tp_bytes(model: ModelDescription) -> tuple[float, Stage]:
        job = h100_job(model, tensor_model_parallel_size=2, sequence_parallel=sequence_parallel)
        stage = busiest_stage(job, ModelCost(job.model), micro_batch_size=1, micro_batches=8)
        (transfer,) = tp_transfers(job, stage)
        return transfer.nbytes, stage

    plain, stage = tp_bytes(DENSE)
    recomputed, _ = tp_bytes(
        dataclasses.replace(DENSE, recompute_granularity="selective", recompute_modules=("mlp",))
    )
    act = 1 * DENSE.seq_length * DENSE.hidden_size * 2  # one micro-batch's activations, 16-bit
    extra = stage.micro_batches * per_mlp * stage.layers * (2 - 1) / 2 * act
    assert recomputed - plain == pytest.approx(extra)


# --- what a recomputed forward costs ------------------------------------------------------------

TOKENS = 8 * 4096
"""Tokens of the DP rank per step in these stages: 8 micro-batches of one 4096-token sequence."""


def _compute(model: ModelDescription):
    """(the stage's compute on H100 at the fitted fraction, the core-attention model FLOPs)."""
    job = h100_job(model)
    dims = ModelCost(job.model)
    stage = busiest_stage(job, dims, micro_batch_size=1, micro_batches=8)
    fraction = achievable_fraction("h100", job.compute_dtype).fraction
    compute = stage_compute(job, gpu_spec("h100"), dims, stage, tokens=TOKENS, fraction=fraction)
    return compute, TOKENS * stage.layers * dims.core_attention_flops_per_token()


def test_recomputed_core_attention_costs_one_attention_forward():
    plain, core_flops = _compute(dense_model())
    again, _ = _compute(dense_model(recompute_granularity="selective", recompute_modules=None))
    added = again.flops_backward - plain.flops_backward
    assert again.executed - plain.executed == pytest.approx(core_flops / 3)
    # All of it in core attention, and as much as its forward: the causal forward's share of one
    # call's forward and backward at the sequence's keys.
    assert again.attention - plain.attention == pytest.approx(added)
    forward, backward = attention_seconds(
        1.0, keys=4096, cp_size=1, head_dim=128, gpu_generation="hopper", peak=1.0, a2a=0.0
    )
    assert added == pytest.approx(plain.attention * forward / (forward + backward))
    # Not the forward's mean rate, which the GEMMs set.
    assert added != pytest.approx(core_flops / 3 * plain.flops_forward / (plain.model_flops / 3))


def test_recomputed_gemms_cost_the_forwards_gemm_rate():
    # Full recompute of every layer: its core attention at the attention forward's rate, the
    # rest at the forward's rate for the FLOPs other than core attention.
    plain, core_flops = _compute(dense_model())
    full, _ = _compute(
        dense_model(
            recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1
        )
    )
    core_added = full.attention - plain.attention
    attention_forward = core_added  # every layer's core attention runs its forward once more
    gemm_rate = (plain.flops_forward - attention_forward) / ((plain.model_flops - core_flops) / 3)
    other_flops = full.executed - plain.executed - core_flops / 3
    assert other_flops > 0
    assert full.flops_backward - plain.flops_backward - core_added == pytest.approx(
        other_flops * gemm_rate
    )
