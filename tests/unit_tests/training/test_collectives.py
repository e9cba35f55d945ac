"""Ring collectives and p2p sends by message size and span (``estimate/collectives.py``)."""

from __future__ import annotations

import pytest

from megatron.bridge.recipes import plan_recipe
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.collectives import (
    LATENCY,
    NETWORK_RING,
    NVLINK_RING,
    ring_seconds,
)
from megatron.bridge.training.hardware import gpu_spec

NVLINK, NIC = 450e9, 50e9


def _ring(nbytes, calls, *, members=8, per_domain=8, steps=7, at_peak=False):
    return ring_seconds(
        nbytes,
        calls=calls,
        steps=steps,
        members=members,
        per_domain=per_domain,
        nvlink_bytes_per_s=NVLINK,
        network_bytes_per_s=NIC,
        at_peak=at_peak,
    )


def test_a_large_message_reaches_the_measured_bus_share_and_a_small_one_pays_latency():
    big = _ring(16 * 2**30, 1)
    assert 16 * 2**30 / NVLINK / big == pytest.approx(NVLINK_RING.share, rel=1e-3)
    small = _ring(64 * 1024, 1)
    latency = LATENCY.base + 7 * LATENCY.nvlink_hop
    assert small == pytest.approx(64 * 1024 / NVLINK / NVLINK_RING.share + latency)
    # The same bytes in a thousand calls take a thousand latencies more.
    assert _ring(2**30, 1000) - _ring(2**30, 1) == pytest.approx(999 * latency)


def test_a_group_spread_over_domains_moves_its_network_traffic_through_each_members_nic():
    nbytes = 2**30
    one_per_node = _ring(nbytes, 1, members=32, per_domain=1, steps=31, at_peak=True)
    eight_per_node = _ring(nbytes, 1, members=32, per_domain=8, steps=31, at_peak=True)
    assert one_per_node == pytest.approx(nbytes / NIC)
    assert eight_per_node == pytest.approx(nbytes / (8 * NIC))
    achieved = _ring(nbytes, 1, members=32, per_domain=8, steps=31)
    assert achieved > eight_per_node / NETWORK_RING.share
    # Within one domain nothing crosses the network.
    assert _ring(nbytes, 1, at_peak=True) == pytest.approx(nbytes / NVLINK)


def test_the_estimate_prices_dp_by_the_members_each_node_holds():
    """Llama-3 8B on 64 H100: DP 64 at TP 1 keeps 8 members per node, DP 8 at TP 8 one: the
    second's gradient reduce-scatter takes longer per byte at link peak."""

    def dp_entry(tp):
        plan = plan_recipe(
            "llama3_8b",
            gpu="h100",
            changes={
                "world_size": 64,
                "global_batch_size": 512,
                "micro_batch_size": 1,
                "model.tensor_model_parallel_size": tp,
                "model.pipeline_model_parallel_size": 1,
                "model.virtual_pipeline_model_parallel_size": None,
                "model.context_parallel_size": 1,
            },
        )
        estimate = estimate_step(plan)
        (entry,) = [
            c for c in estimate.communication if c.mode == "dp" and "reduce-scatter" in c.collective
        ]
        return entry

    nic = gpu_spec("h100").network_gb_per_s * 1e9
    wide, narrow = dp_entry(1), dp_entry(8)
    assert wide.link == narrow.link == "network"
    per_byte = {e: e.seconds_at_link_peak / e.bytes_per_gpu_per_step for e in (wide, narrow)}
    assert per_byte[narrow] == pytest.approx(1 / nic)
    assert per_byte[wide] == pytest.approx(1 / (8 * nic))
