"""Hyper-connections in the memory-bound term: the bytes megatron-core's fused mHC kernels move
around every block (ModelCost.elementwise_bytes_per_token).

Each hand count spells one block's forward elements per token, kernel by kernel, then takes 2
bytes an element and forward + backward = 3 forwards. DENSE (small_models) has 2 layers of
hidden 64, an attention and an MLP block each.
"""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.training.estimate.model_cost import ModelCost
from tests.unit_tests.small_models import DENSE, HYBRID, MOE

BYTES_FWD_BWD = 2 * 3
"""2 bytes an element; the backward moves twice the forward's bytes."""


def _with_streams(model, streams):
    return dataclasses.replace(model, enable_hyper_connections=True, num_residual_streams=streams)


def test_four_streams_add_the_fused_kernels_bytes_to_every_block():
    # Per block, hidden C = 64, n = 4 streams: proj_rms reads the streams (4 x 64 = 256);
    # h_aggregate reads them (256) and writes the block input (64); h_post_bda reads the
    # n-stream residual (256) and the block output (64) and writes the streams (256). 1152
    # in all, in place of the plain residual add's 2 reads and 1 write of 64 (192): 960 more.
    per_block = (256 + 256 + 64 + 256 + 64 + 256) - 192
    assert per_block == 960
    # Two blocks a layer (attention, MLP); the mean layer is what the method returns.
    added = 2 * per_block * BYTES_FWD_BWD
    plain = ModelCost(DENSE).elementwise_bytes_per_token()
    assert ModelCost(_with_streams(DENSE, 4)).elementwise_bytes_per_token() == plain + added


def test_two_streams_move_half_the_stream_traffic():
    # n = 2: the streams are 128 wide: 128 + 128 + 64 + 128 + 64 + 128 = 640, less 192: 448.
    per_block = (128 + 128 + 64 + 128 + 64 + 128) - 192
    plain = ModelCost(DENSE).elementwise_bytes_per_token()
    two = ModelCost(_with_streams(DENSE, 2)).elementwise_bytes_per_token()
    assert two - plain == 2 * per_block * BYTES_FWD_BWD


def test_streams_are_hidden_wide_tensors_that_only_sequence_parallelism_splits():
    # The streams hold whole tokens: TP 2 without sequence parallelism leaves the added bytes
    # whole on every rank; with it each rank moves half of them.
    plain, hyper = ModelCost(DENSE), ModelCost(_with_streams(DENSE, 4))
    added = 2 * 960 * BYTES_FWD_BWD

    def extra(sequence_parallel):
        kwargs = {"tp_size": 2, "sequence_parallel": sequence_parallel}
        return hyper.elementwise_bytes_per_token(**kwargs) - plain.elementwise_bytes_per_token(
            **kwargs
        )

    assert extra(False) == added
    assert extra(True) == added / 2


def test_moe_blocks_carry_the_streams_too():
    # MOE: 2 layers, each an attention block and an MLP or MoE block: 4 blocks over 2 layers.
    moe_added = 4 * 960 * BYTES_FWD_BWD / 2
    moe_plain = ModelCost(MOE).elementwise_bytes_per_token()
    assert ModelCost(_with_streams(MOE, 4)).elementwise_bytes_per_token() == moe_plain + moe_added


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
