"""Properties of the schedule-aware step model (estimate/schedule.py behind estimate_step)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.estimate import estimate_step
from tests.unit_tests.conftest import h100_job
from tests.unit_tests.jobs import dense_model

DENSE = dense_model(vocab_size=32000)
"""Llama-3 8B's model with a 32000-token vocabulary."""
MOE = dataclasses.replace(
    DENSE, num_moe_experts=16, moe_router_topk=2, moe_ffn_hidden_size=2048, moe_grouped_gemm=True
)

layouts = st.fixed_dictionaries(
    {
        "tp": st.sampled_from([1, 2, 4, 8]),
        "pp": st.sampled_from([1, 2, 4]),
        "vpp": st.sampled_from([None, 2]),
        "cp": st.sampled_from([1, 2]),
        "dp": st.sampled_from([1, 2, 8]),
        "moe": st.booleans(),
        "ep": st.sampled_from([1, 2, 4]),
        "m": st.sampled_from([1, 2, 4, 8]),
    }
)

KNOBS_OFF = {
    "tp_comm_overlap": False,
    "overlap_grad_reduce": False,
    "overlap_param_gather": False,
    "overlap_p2p_comm": False,
    "overlap_moe_expert_parallel_comm": False,
}


def _job(layout, *, gpu: str = "h100", micro_batches: int | None = None):
    tp, pp, cp, dp = layout["tp"], layout["pp"], layout["cp"], layout["dp"]
    vpp = layout["vpp"] if pp > 1 else None
    moe = layout["moe"]
    ep = layout["ep"] if moe and dp * cp * tp % layout["ep"] == 0 else 1
    m = micro_batches or max(layout["m"], pp)
    if vpp:
        m = max(pp, m - m % pp)
    facts = {
        "tp_size": tp,
        "pp_size": pp,
        "vpp_size": vpp,
        "cp_size": cp,
        "sequence_parallel": tp > 1,
        "use_distributed_optimizer": True,
        "global_batch_size": m * dp,
        "gpu": gpu,
    }
    if moe:
        facts |= {"ep_size": ep, "moe_token_dispatcher_type": "alltoall"}
    return h100_job(MOE if moe else DENSE, dp_size=dp, **facts)


def _estimate(job, **request):
    request = {"tp_comm_overlap": True} | request
    return estimate_step(plan_comm_overlap(CommOverlapConfig(**request), job))


@settings(max_examples=40, deadline=None)
@given(layout=layouts, overlap=st.booleans())
def test_hidden_fits_its_window_and_exposed_is_never_negative(layout, overlap):
    e = _estimate(_job(layout), **({} if overlap else KNOBS_OFF))
    for c in e.communication:
        assert c.exposed_seconds >= 0 and c.hidden_seconds >= 0
        assert c.hidden_seconds <= c.window_seconds * (1 + 1e-9) + 1e-12
        # The schedule runs each stream for its time at achieved bandwidth, so what it hides plus
        # what it leaves exposed is bounded by that time: the same invariant as before, stated
        # on the time the schedule places. Link peak is a lower bound of it, never above.
        assert c.seconds_at_link_peak <= c.seconds_at_achieved_bandwidth * (1 + 1e-9)
        assert (
            c.hidden_seconds + c.exposed_seconds
            <= c.seconds_at_achieved_bandwidth * (1 + 1e-9) + 1e-12
        )
    p = e.prediction
    assert p.exposed_seconds >= 0
    assert p.step_seconds >= p.compute_seconds + p.bubble_seconds - 1e-12


@settings(max_examples=30, deadline=None)
@given(layout=layouts, extra=st.sampled_from([1, 2, 4]))
def test_more_micro_batches_never_increase_the_bubble_fraction(layout, extra):
    job = _job(layout)
    m = job.global_batch_size // job.dp_size
    more = job.replace(global_batch_size=job.global_batch_size * (1 + extra))
    few, many = _estimate(job).prediction, _estimate(more).prediction
    assert more.global_batch_size // more.dp_size > m
    assert many.bubble_seconds / many.step_seconds <= few.bubble_seconds / few.step_seconds + 1e-9
    assert (
        many.bubble_seconds / many.compute_seconds
        <= few.bubble_seconds / few.compute_seconds + 1e-12
    )


@settings(max_examples=40, deadline=None)
@given(layout=layouts, knob=st.sampled_from(sorted(KNOBS_OFF)))
def test_turning_an_overlap_off_never_shortens_the_step(layout, knob):
    job = _job(layout)
    on = _estimate(job).prediction.step_seconds
    off = _estimate(job, **{knob: False}).prediction.step_seconds
    assert off >= on * (1 - 1e-9)
    # Every knob off at once is the estimate's own without-overlap prediction.
    e = _estimate(job)
    assert e.without_overlap.step_seconds >= e.prediction.step_seconds * (1 - 1e-9)


@settings(max_examples=30, deadline=None)
@given(
    layout=layouts, pair=st.sampled_from([("a100", "h100"), ("h100", "b200"), ("b200", "gb200")])
)
def test_a_faster_gpu_never_predicts_a_slower_step(layout, pair):
    slow, fast = pair
    slow_step = _estimate(_job(layout, gpu=slow), tp_comm_overlap=False).prediction.step_seconds
    fast_step = _estimate(_job(layout, gpu=fast), tp_comm_overlap=False).prediction.step_seconds
    assert fast_step <= slow_step * (1 + 1e-9)
