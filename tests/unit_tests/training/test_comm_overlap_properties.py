"""Invariants of comm-overlap resolution over every parallel layout (hypothesis).

Profiles (tests/unit_tests/conftest.py): "ci" by default, HYPOTHESIS_PROFILE=dev for a long run.
The last property builds real megatron-core configs and runs megatron-core's own validation on
the resolved values; only Transformer Engine's availability is patched (TE cannot exist on a
CPU-only machine).
"""

from __future__ import annotations

import dataclasses
import json
from unittest import mock

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.training import comm_overlap
from megatron.bridge.training.comm_overlap import (
    PUBLISHED_PRESETS,
    CommOverlapConfig,
    OverlapPlan,
    plan_comm_overlap,
)
from megatron.bridge.training.job import JobDescription, ModelDescription
from tests.unit_tests.conftest import layout_fields, size_fields
from tests.unit_tests.jobs import OPTIONAL_BOOL_KNOBS, bool_knob_requests

sizes = st.sampled_from([1, 2, 4, 8])


@st.composite
def layouts(draw) -> JobDescription:
    tp, pp, cp, ep, dp = draw(sizes), draw(sizes), draw(sizes), draw(sizes), draw(sizes)
    vpp = draw(st.sampled_from([None, 2, 3])) if pp > 1 else None
    experts = draw(st.sampled_from([None, 1, 8])) if ep > 1 or draw(st.booleans()) else None
    model = ModelDescription(
        **layout_fields(tp_size=tp, pp_size=pp, vpp_size=vpp, cp_size=cp, ep_size=ep),
        sequence_parallel=tp > 1 and draw(st.booleans()),
        hidden_size=draw(st.sampled_from([4096, 8192, 12288])),
        seq_length=draw(st.sampled_from([None, 2048, 4096, 2050])),
        add_bias_linear=False,
        bf16=draw(st.booleans()),
        num_moe_experts=experts,
        moe_token_dispatcher_type=draw(st.sampled_from(["allgather", "alltoall", "flex"])),
        gradient_accumulation_fusion=draw(st.booleans()),
    )
    return JobDescription(
        model=model,
        world_size=tp * cp * pp * dp,
        te_available=draw(st.booleans()),
        te_reason="not importable",
        te_version=draw(st.sampled_from([None, "2.5.0", "2.9.1"])),
        use_distributed_optimizer=draw(st.booleans()),
        micro_batch_size=draw(st.sampled_from([None, 1, 2, 3])),
    )


@st.composite
def requests(draw) -> CommOverlapConfig:
    return CommOverlapConfig(
        tp_comm_overlap=draw(st.booleans()),
        tp_comm_overlap_cfg=draw(
            st.sampled_from([None, *sorted(set(PUBLISHED_PRESETS.values()), key=id)[:4]])
        ),
        tp_comm_bootstrap_backend=draw(st.sampled_from(["nccl", "mpi", "gloo"])),
        bucket_size=draw(st.sampled_from([None, 1, 40_000_000])),
        wgrad_deferral_limit=draw(st.sampled_from([None, -1, 0, 4])),
        **draw(bool_knob_requests),
    )


def _user_set(co: CommOverlapConfig) -> dict[str, object]:
    return {
        k: getattr(co, k)
        for k in (*OPTIONAL_BOOL_KNOBS, "bucket_size")
        if getattr(co, k) is not None
    }


@given(co=requests(), job=layouts())
def test_resolution_invariants(co, job):
    before = dataclasses.asdict(co)
    try:
        plan = plan_comm_overlap(co, job)
    except (ValueError, TypeError) as exc:
        # Only a request can be refused with an error, and the error names what was requested.
        named = [k for k, v in _user_set(co).items() if k in str(exc)]
        assert named or (co.tp_comm_overlap and "tp_comm_overlap" in str(exc)), str(exc)
        assert dataclasses.asdict(co) == before
        return
    v = plan.value
    # Exclusive wherever a pipeline schedule reads them; without one both may stay as asked.
    assert not (v("overlap_p2p_comm") and v("batch_p2p_comm")) or job.pp_size == 1
    if v("overlap_param_gather"):
        assert job.use_distributed_optimizer
        # Derived param-gather overlap comes with grad-reduce overlap; only a request of the
        # user's pairs it with overlap_grad_reduce=False (kept, with a warning at DP > 1).
        assert v("overlap_grad_reduce") or plan.decision("overlap_grad_reduce").source == "user"
    if v("tp_comm_overlap"):
        assert job.tp_size >= 2 and job.sequence_parallel and job.te_available
    elif co.tp_comm_overlap:
        assert plan.decision("tp_comm_overlap").source == "refused" and plan.warnings
    if v("overlap_p2p_comm") and job.pp_size > 1:
        assert job.interleaved_schedule
    if v("align_param_gather") and plan.decision("align_param_gather").source != "user":
        assert job.interleaved
    for knob, wanted in _user_set(co).items():
        assert v(knob) == wanted, knob  # honoured, since no error was raised
        assert plan.decision(knob).source == "user"
    if job.dp_size == 1 and co.bucket_size is None:
        assert v("bucket_size") is None
    assert dataclasses.asdict(co) == before
    assert OverlapPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert plan_comm_overlap(co, job) == plan  # deterministic


@st.composite
def valid_model_layouts(draw):
    tp, pp, cp = (
        draw(st.sampled_from([1, 2, 4])),
        draw(st.sampled_from([1, 2, 4])),
        draw(st.sampled_from([1, 2])),
    )
    ep = draw(st.sampled_from([1, 2]))
    vpp = draw(st.sampled_from([None, 2])) if pp > 1 else None
    sp = tp > 1 and (ep > 1 or draw(st.booleans()))  # megatron-core: EP with TP needs SP
    parallel = {"tp_size": tp, "pp_size": pp, "cp_size": cp, "ep_size": ep, "vpp_size": vpp}
    return {"parallel": parallel, "sp": sp, "dp": draw(sizes), "dist_opt": draw(st.booleans())}


def _real_configs(layout):
    model = TransformerConfig(
        **size_fields(layers=8, hidden=256, heads=8),
        bf16=True,
        pipeline_dtype=torch.bfloat16,
        num_moe_experts=4 if layout["parallel"]["ep_size"] > 1 else None,
        moe_token_dispatcher_type="alltoall",
        expert_tensor_parallel_size=1,  # megatron-core: biased MoE layers need ETP 1
        **layout_fields(**layout["parallel"]),
        sequence_parallel=layout["sp"],
    )
    opt = OptimizerConfig(use_distributed_optimizer=layout["dist_opt"], bf16=True)
    ddp = DistributedDataParallelConfig(use_distributed_optimizer=layout["dist_opt"])
    return model, opt, ddp


@given(
    layout=valid_model_layouts(), tp_overlap=st.booleans(), ep_overlap=st.sampled_from([None, True])
)
def test_setup_on_real_configs_is_idempotent_and_accepted_by_megatron_core(
    layout, tp_overlap, ep_overlap
):
    model, opt, ddp = _real_configs(layout)
    co = CommOverlapConfig(tp_comm_overlap=tp_overlap, overlap_moe_expert_parallel_comm=ep_overlap)
    before = dataclasses.asdict(co)
    with mock.patch.object(comm_overlap, "HAVE_TE", True):
        try:
            first = co.setup(model, opt, ddp, data_parallel_size=layout["dp"], micro_batch_size=1)
        except ValueError as exc:
            assert ep_overlap and "overlap_moe_expert_parallel_comm" in str(exc)
            assume(False)
        written = (
            dataclasses.asdict(ddp),
            dataclasses.asdict(opt),
            model.tp_comm_overlap,
            model.overlap_p2p_comm,
            model.batch_p2p_comm,
        )
        second = co.setup(model, opt, ddp, data_parallel_size=layout["dp"], micro_batch_size=1)
    assert first == second
    assert written == (
        dataclasses.asdict(ddp),
        dataclasses.asdict(opt),
        model.tp_comm_overlap,
        model.overlap_p2p_comm,
        model.batch_p2p_comm,
    )
    assert dataclasses.asdict(co) == before
    # megatron-core's own validation of the resolved values (what finalize runs).
    TransformerConfig.__post_init__(model)
    DistributedDataParallelConfig.__post_init__(ddp)


# --- bad input sweep ------------------------------------------------------------------------

BAD_VALUES = {
    **{name: ["yes", 1, 0, 1.5, [], object()] for name in OPTIONAL_BOOL_KNOBS},
    "tp_comm_overlap": ["yes", 1, None, []],
    "strict": ["no", 1, None],
    "preset_chosen_by": [1, True, ["auto"]],
    "tp_comm_overlap_cfg": [
        # A mapping is a userbuffers config now; one naming an unknown GEMM is still refused.
        {"qkv_fprpo": {}},
        "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048",
        3,
    ],
    "tp_comm_bootstrap_backend": ["ucc", 1, None, ""],
    "bucket_size": [True, False, 0, -5, 1.0, "128"],
    "data_parallel_size": [0, -1, True, 2.0, "8"],
    "wgrad_deferral_limit": [-2, 1.5, True, "0"],
}


def test_bad_input_sweep_covers_every_field():
    assert set(BAD_VALUES) == {f.name for f in dataclasses.fields(CommOverlapConfig)}


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, vs in BAD_VALUES.items() for v in vs])
def test_bad_input_is_a_clear_error_naming_the_field(name, value):
    kwargs = {"tp_comm_overlap": False, name: value}
    co = CommOverlapConfig(**kwargs)
    layout = ModelDescription(
        tensor_model_parallel_size=4,
        pipeline_model_parallel_size=4,
        virtual_pipeline_model_parallel_size=2,
        sequence_parallel=True,
    )
    with pytest.raises((TypeError, ValueError)) as err:
        plan_comm_overlap(co, JobDescription(model=layout, world_size=4 * 4 * 8))
    assert name in str(err.value)
