"""Communication at achieved bandwidth: each kind at its measured share of link peak."""

from __future__ import annotations

import pytest

from megatron.bridge.training.estimate import collectives, efficiency
from tests.unit_tests.training.test_step_model import _qwen_estimate

HYBRIDEP = {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}


def _ep(estimate):
    (entry,) = [c for c in estimate.communication if c.mode == "ep"]
    return entry


def test_the_network_share_reproduces_the_capture_it_was_fitted_on():
    """PR 5094's shape, knob off: the EP all-to-all at achieved bandwidth plus the DP traffic is
    the communication kernel time its Nsight capture measured (8.254 s)."""
    estimate = _qwen_estimate(False, **HYBRIDEP)
    ep = _ep(estimate)
    assert ep.link == "network"
    assert ep.seconds_at_achieved_bandwidth == pytest.approx(
        efficiency.EP_OVERLAP.comm_seconds, rel=0.03
    )


def test_every_collective_runs_below_link_peak_at_its_own_measured_share():
    """EP all-to-alls at DeepEP's / PR 5094's share; the ring collectives and p2p sends at
    NCCL's bus shares plus their latency per call (:mod:`.collectives`)."""
    estimate = _qwen_estimate(True)
    for c in estimate.communication:
        ratio = c.seconds_at_link_peak / c.seconds_at_achieved_bandwidth
        if c.mode == "ep":
            assert ratio == pytest.approx(efficiency.ALLTOALL_ACHIEVED.network, rel=0.05)
        else:
            share = collectives.NVLINK_RING if c.link == "nvlink" else collectives.NETWORK_RING
            assert ratio < share.share


def test_shares_are_fractions_of_peak_with_their_source():
    share = efficiency.ALLTOALL_ACHIEVED
    assert 0 < share.network < share.nvlink <= 1
    assert share.of("nvlink") == share.nvlink and share.of("network") == share.network
    assert "DeepEP" in share.source and "PR 5094" in share.source


def test_json_and_text_carry_both_times():
    estimate = _qwen_estimate(True)
    entry = _ep(estimate).to_dict()
    assert entry["seconds_at_achieved_bandwidth"] > entry["seconds_at_link_peak"]
    assert "ms achieved" in estimate.render()
