"""Hyper-connections in the memory-bound term: the bytes megatron-core's fused mHC kernels move
around every block (ModelCost.elementwise_bytes_per_token).

Each hand count spells one block's elements per token, kernel by kernel, forward then backward,
from the loads and stores of megatron-core's ``fusions/fused_mhc_kernels.py``, less the plain
residual add the block already counts (3 forward, 6 backward hidden-wide), then takes 2 bytes
an element. DENSE (small_models) has 2 layers of hidden 64, an attention and an MLP block each.
"""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.training.estimate.model_cost import ModelCost
from tests.unit_tests.small_models import DENSE, HYBRID, MOE

BYTES = 2
"""2 bytes an element (bf16 activations)."""


def _with_streams(model, streams):
    return dataclasses.replace(model, enable_hyper_connections=True, num_residual_streams=streams)


# One block, hidden C = 64, n = 4 streams (nC = 256).
# Forward: proj_rms reads the streams (256); h_aggregate reads them (256) and writes the block
# input (64); h_post_bda reads the residual streams (256) and the block output (64) and writes
# the streams (256): 1152.
FORWARD_4 = 256 + 256 + 64 + 256 + 64 + 256
# Backward: h_aggregate reads the input gradient (64) and the streams (256), writes their
# gradient (256); h_post_bda reads the output gradient (256), the residual (256) and the block
# output (64), writes the residual's (256) and the block output's (64) gradients; proj_rms
# reads the streams (256) and writes their gradient (256); two adds sum the three stream
# gradients, each reading 2 x 256 and writing 256 (1536): 3520.
BACKWARD_4 = (64 + 256 + 256) + (256 + 256 + 64 + 256 + 64) + (256 + 256) + 2 * 768
# The plain residual add it replaces: 2 reads and a write of 64, backward twice that: 576.
RESIDUAL_ADD = 3 * 3 * 64
PER_BLOCK_4 = FORWARD_4 + BACKWARD_4 - RESIDUAL_ADD


def test_four_streams_add_the_fused_kernels_bytes_to_every_block():
    assert (FORWARD_4, BACKWARD_4, PER_BLOCK_4) == (1152, 3520, 4096)
    # Two blocks a layer (attention, MLP); the method returns the mean layer.
    plain = ModelCost(DENSE).elementwise_bytes_per_token()
    hyper = ModelCost(_with_streams(DENSE, 4)).elementwise_bytes_per_token()
    assert hyper - plain == 2 * PER_BLOCK_4 * BYTES


def test_two_streams_count_the_same_kernels_over_narrower_streams():
    # n = 2, nC = 128: forward 4 x 128 + 2 x 64 = 640; backward 13 x 128 + 3 x 64 = 1856.
    forward = 128 + 128 + 64 + 128 + 64 + 128
    backward = (64 + 128 + 128) + (128 + 128 + 64 + 128 + 64) + (128 + 128) + 2 * 384
    assert (forward, backward) == (640, 1856)
    plain = ModelCost(DENSE).elementwise_bytes_per_token()
    two = ModelCost(_with_streams(DENSE, 2)).elementwise_bytes_per_token()
    assert two - plain == 2 * (forward + backward - RESIDUAL_ADD) * BYTES


def test_streams_are_hidden_wide_tensors_that_only_sequence_parallelism_splits():
    # The streams hold whole tokens: TP 2 without sequence parallelism leaves the added bytes
    # whole on every rank; with it each rank moves half of them.
    plain, hyper = ModelCost(DENSE), ModelCost(_with_streams(DENSE, 4))
    added = 2 * PER_BLOCK_4 * BYTES

    def extra(sequence_parallel):
        kwargs = {"tp_size": 2, "sequence_parallel": sequence_parallel}
        return hyper.elementwise_bytes_per_token(**kwargs) - plain.elementwise_bytes_per_token(
            **kwargs
        )

    assert extra(False) == added
    assert extra(True) == added / 2


def test_moe_blocks_carry_the_streams_too():
    # MOE: 2 layers, each an attention block and an MLP or MoE block: 4 blocks over 2 layers.
    plain = ModelCost(MOE).elementwise_bytes_per_token()
    hyper = ModelCost(_with_streams(MOE, 4)).elementwise_bytes_per_token()
    assert hyper - plain == 4 * PER_BLOCK_4 * BYTES / 2


def test_a_hybrid_pattern_with_hyper_connections_is_refused_naming_the_field():
    # megatron-core builds hyper-connections only in its transformer layers.
    with pytest.raises(ValueError, match="enable_hyper_connections"):
        ModelCost(_with_streams(HYBRID, 4)).elementwise_bytes_per_token()


def test_without_hyper_connections_the_stream_count_changes_nothing():
    # num_residual_streams alone does not build hyper-connections.
    streams_only = dataclasses.replace(DENSE, num_residual_streams=4)
    assert (
        ModelCost(streams_only).elementwise_bytes_per_token()
        == ModelCost(DENSE).elementwise_bytes_per_token()
    )
