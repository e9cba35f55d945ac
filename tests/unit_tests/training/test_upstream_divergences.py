"""The eleven kinds of layout on which the plan differs from upstream Megatron-Bridge, one test each.

Upstream is Megatron-Bridge's ``src/megatron/bridge/training/comm_overlap.py`` at 067f987; each
test states upstream's result with the line it comes from (upstream's code is not run here) and
asserts ours, as the migration section of ``docs/training/communication-overlap.md`` documents
it. megatron-core is the judge: where the plan refused what megatron-core runs (cases 4 and 8),
the test shows megatron-core's own validation accepting the planned configs.

Real megatron-core configs throughout; Transformer Engine's availability is patched where TP
overlap is planned (TE cannot exist on a CPU machine).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.pipeline_parallel.schedules import (
    forward_backward_pipelining_with_interleaving,
    get_forward_backward_func,
)
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.comm_overlap import (
    CommOverlapConfig,
    OverlapRefusedError,
    plan_comm_overlap,
    userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192,
)
from megatron.bridge.training.job import JobDescription, ModelDescription
from tests.unit_tests.conftest import make_configs, size_fields
from tests.unit_tests.training.test_comm_overlap_validation import (
    interleaved_optimizer_step_gather,
)
from tests.unit_tests.training.test_migration_section import UPSTREAM_FIELDS
from tests.unit_tests.training.test_overlap_refusals_megatron_core import schedule_refusal


def _setup(co: CommOverlapConfig, cfgs, *, dp: int, mbs: int | None = None):
    return co.setup(
        cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=dp, micro_batch_size=mbs
    )


def _request(**knobs) -> CommOverlapConfig:
    return CommOverlapConfig(tp_comm_overlap=False, **knobs)


def _job(*, pp: int = 1, vpp: int | None = None, dp: int = 8, tp: int = 1, **job) -> JobDescription:
    model = ModelDescription(
        bf16=True,
        tensor_model_parallel_size=tp,
        sequence_parallel=tp > 1,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
    )
    job.setdefault("use_distributed_optimizer", True)
    return JobDescription(model=model, world_size=tp * pp * dp, **job)


# ---------------------------------------------------------------------------- case 1


def test_case1_param_gather_is_not_derived_without_grad_reduce_overlap():
    # Upstream: overlap_param_gather=True on DDP and optimizer at DP 2 with the distributed
    # optimizer, whatever overlap_grad_reduce is (comm_overlap.py:576-579, 642-643).
    cfgs = make_configs(distributed_optimizer=True)
    plan = _setup(_request(overlap_grad_reduce=False), cfgs, dp=2)
    assert (cfgs.ddp.overlap_param_gather, cfgs.optimizer.overlap_param_gather) == (False, False)
    assert plan.decision("overlap_param_gather").source == "derived"
    assert "overlap_grad_reduce" in plan.decision("overlap_param_gather").reason


def test_case1_upstreams_value_is_one_request_away():
    cfgs = make_configs(distributed_optimizer=True)
    plan = _setup(_request(overlap_grad_reduce=False, overlap_param_gather=True), cfgs, dp=2)
    assert (cfgs.ddp.overlap_grad_reduce, cfgs.ddp.overlap_param_gather) == (False, True)
    assert any("one bucket" in w for w in plan.warnings)


# ---------------------------------------------------------------------------- case 2


def test_case2_interleaved_pp4_without_p2p_overlap_batches():
    # Upstream: batch_p2p_comm=False whenever VPP > 1 (comm_overlap.py:455-457); Megatron-LM
    # sets batch_p2p_comm = not overlap_p2p_comm (megatron/training/argument_utils.py:307).
    cfgs = make_configs(pp=4, vpp=2)
    plan = _setup(_request(overlap_p2p_comm=False), cfgs, dp=1)
    assert (cfgs.model.overlap_p2p_comm, cfgs.model.batch_p2p_comm) == (False, True)
    assert plan.decision("batch_p2p_comm").source == "derived"


def test_case2_interleaved_pp2_stays_unbatched():
    cfgs = make_configs(pp=2, vpp=2)
    _setup(_request(overlap_p2p_comm=False), cfgs, dp=1)
    assert cfgs.model.batch_p2p_comm is False


# ---------------------------------------------------------------------------- case 3


def test_case3_param_gather_at_world_1_brings_grad_reduce():
    # Upstream: overlap_grad_reduce=False below DP 2 (comm_overlap.py:571, 576); the
    # overlap_param_gather=True request passes through (594-600).
    cfgs = make_configs(distributed_optimizer=True)
    plan = _setup(_request(overlap_param_gather=True), cfgs, dp=1)
    assert (cfgs.ddp.overlap_grad_reduce, cfgs.ddp.overlap_param_gather) == (True, True)
    assert plan.decision("overlap_grad_reduce").source == "derived"
    assert any("no effect with DP=1" in n for n in plan.notes)
    assert not plan.warnings


def test_case3_upstreams_value_is_kept_when_asked():
    cfgs = make_configs(distributed_optimizer=True)
    plan = _setup(_request(overlap_param_gather=True, overlap_grad_reduce=False), cfgs, dp=1)
    assert (cfgs.ddp.overlap_grad_reduce, cfgs.ddp.overlap_param_gather) == (False, True)
    assert not plan.warnings


# ---------------------------------------------------------------------------- case 4


@pytest.mark.parametrize(
    "request_knobs",
    [
        {"overlap_p2p_comm": False, "batch_p2p_comm": True},
        {"batch_p2p_comm": True},
    ],
    ids=["overlap-off-batch-on", "batch-on"],
)
def test_case4_batched_p2p_on_interleaved_pp2_is_planned_with_a_warning(request_knobs):
    # Upstream: writes batch_p2p_comm=True as asked (comm_overlap.py:594-600); with batch alone
    # it also derives overlap_p2p_comm=True (456), a pair megatron-core's interleaved schedule
    # refuses. megatron-core accepts overlap False with batch True: its configs and schedule.
    cfgs = make_configs(pp=2, vpp=2)
    plan = _setup(_request(**request_knobs), cfgs, dp=1)
    assert (cfgs.model.overlap_p2p_comm, cfgs.model.batch_p2p_comm) == (False, True)
    assert any("one neighbour" in w for w in plan.warnings)
    TransformerConfig.__post_init__(cfgs.model)
    assert schedule_refusal(cfgs.model) is None


def test_case4_upstreams_batch_alone_is_refused_by_megatron_cores_schedule():
    # What upstream writes for batch_p2p_comm=True alone on PP2 VPP2 (comm_overlap.py:456, 600).
    cfgs = make_configs(pp=2, vpp=2, overlap_p2p_comm=True, batch_p2p_comm=True)
    assert "Can not use both" in str(schedule_refusal(cfgs.model))


def test_case4_strict_turns_the_warning_into_an_error():
    co = CommOverlapConfig(
        tp_comm_overlap=False, overlap_p2p_comm=False, batch_p2p_comm=True, strict=True
    )
    with pytest.raises(OverlapRefusedError, match="one neighbour"):
        plan_comm_overlap(co, _job(pp=2, vpp=2, dp=1))


def test_case4_no_warning_where_each_neighbour_gets_one_direction():
    for pp, vpp in ((4, 2), (2, 1), (2, None)):
        plan = plan_comm_overlap(_request(batch_p2p_comm=True), _job(pp=pp, vpp=vpp, dp=1))
        assert plan.value("batch_p2p_comm") is True
        assert not any("one neighbour" in w for w in plan.warnings), (pp, vpp)


# ---------------------------------------------------------------------------- case 5


def test_case5_align_param_gather_is_derived_at_dp1_on_an_interleaved_pipeline():
    # Upstream: align_param_gather=False below DP 2 (comm_overlap.py:574, 576, 580-583).
    cfgs = make_configs(pp=4, vpp=2)
    plan = _setup(_request(overlap_param_gather=True), cfgs, dp=1)
    assert cfgs.ddp.align_param_gather is True
    assert plan.decision("align_param_gather").source == "derived"


def test_case5_upstreams_value_when_asked():
    cfgs = make_configs(pp=4, vpp=2)
    _setup(_request(overlap_param_gather=True, align_param_gather=False), cfgs, dp=1)
    assert cfgs.ddp.align_param_gather is False


# ---------------------------------------------------------------------------- case 6


def test_case6_a_bf16_preset_on_an_fp8_model_keeps_bf16_pipeline_buffers(te_available):
    # Upstream: PipelineOverlapCfg.fp8_buf defaults to the tuple (False,) (comm_overlap.py:52),
    # and this preset's proj_fprop and fc2_fprop are PipelineOverlapCfg without fp8_buf
    # (107-108); TE's initialize_ub keeps a truthy fp8_buf for a pipelined GEMM and gives it a
    # uint8 buffer under FP8. Ours writes False: those GEMMs keep bf16 buffers.
    preset = userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192
    cfgs = make_configs(tp=4, sequence_parallel=True, hidden_size=8192, fp8="hybrid")
    co = CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg=preset)
    _setup(co, cfgs, dp=1, mbs=1)
    written = cfgs.model.tp_comm_overlap_cfg
    pipelined = {name for name, gemm in written.items() if gemm["method"] == "pipeline"}
    assert pipelined == {"proj_fprop", "fc2_fprop"}
    assert all(written[name]["fp8_buf"] is False for name in pipelined)


def test_case6_upstreams_fp8_buffers_are_one_replace_away(te_available):
    preset = userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192
    fp8_bufs = dataclasses.replace(
        preset,
        proj_fprop=dataclasses.replace(preset.proj_fprop, fp8_buf=True),
        fc2_fprop=dataclasses.replace(preset.fc2_fprop, fp8_buf=True),
    )
    cfgs = make_configs(tp=4, sequence_parallel=True, hidden_size=8192, fp8="hybrid")
    _setup(CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg=fp8_bufs), cfgs, dp=1, mbs=1)
    assert cfgs.model.tp_comm_overlap_cfg["fc2_fprop"]["fp8_buf"] is True


# ---------------------------------------------------------------------------- case 7


def test_case7_optimizer_step_gather_without_distributed_optimizer_is_refused():
    # Upstream: no DP knob is written without the distributed optimizer, so the request is
    # dropped silently (comm_overlap.py:635-643). megatron-core's ChainedOptimizer._step reads
    # optimizer.model_chunks, which only the distributed optimizer has.
    cfgs = make_configs(distributed_optimizer=False)
    with pytest.raises(ValueError, match="needs the distributed optimizer"):
        _setup(_request(overlap_param_gather_with_optimizer_step=True), cfgs, dp=8)


def test_case7_optimizer_step_gather_without_interleaving_is_written_with_a_note():
    # Upstream writes it too (comm_overlap.py:594-600, 642).
    cfgs = make_configs(pp=1)
    plan = _setup(_request(overlap_param_gather_with_optimizer_step=True), cfgs, dp=8)
    assert cfgs.optimizer.overlap_param_gather_with_optimizer_step is True
    assert any("first model chunk is the whole model" in n for n in plan.notes)
    assert any("checkpointing" in w for w in plan.warnings)


def test_case7_optimizer_step_gather_without_param_gather_says_it_does_nothing():
    knobs = {"overlap_param_gather_with_optimizer_step": True, "overlap_param_gather": False}
    plan = interleaved_optimizer_step_gather(_request(**knobs))
    assert any("has no effect with overlap_param_gather=False" in w for w in plan.warnings)


# ---------------------------------------------------------------------------- case 8


def _moe_configs(**layout):
    return make_configs(
        num_moe_experts=2,
        moe_token_dispatcher_type="alltoall",
        add_bias_linear=False,
        **layout,
    )


def test_case8_ep_overlap_on_pp2_vpp1_is_planned_as_megatron_core_accepts_it():
    # Upstream checks virtual_pipeline_model_parallel_size is not None (comm_overlap.py:494-498),
    # as megatron-core's TransformerConfig.__post_init__ does: VPP=1 passes both.
    cfgs = _moe_configs(pp=2, vpp=1, ep=2)
    plan = _setup(_request(overlap_moe_expert_parallel_comm=True), cfgs, dp=2)
    assert cfgs.model.overlap_moe_expert_parallel_comm is True
    assert any("one model chunk per rank" in n for n in plan.notes)
    TransformerConfig.__post_init__(cfgs.model)
    DistributedDataParallelConfig.__post_init__(cfgs.ddp)
    # The schedule megatron-core runs there is the interleaved one, whose combined-1F1B path
    # carries the EP overlap.
    assert get_forward_backward_func(pp_size=2, vp_size=1) is (
        forward_backward_pipelining_with_interleaving
    )


def test_case8_without_any_vpp_megatron_core_refuses_and_so_do_we():
    cfgs = _moe_configs(pp=2, vpp=None, ep=2)
    with pytest.raises(ValueError, match="virtual_pipeline_model_parallel_size set when PP > 1"):
        _setup(_request(overlap_moe_expert_parallel_comm=True), cfgs, dp=2)
    cfgs.model.overlap_moe_expert_parallel_comm = True
    with pytest.raises(AssertionError, match="virtual_pipeline_model_parallel_size"):
        TransformerConfig.__post_init__(cfgs.model)


def test_p2p_overlap_on_pp2_vpp1_is_kept_as_megatron_cores_schedule_runs_it():
    # The interleaved schedule runs at VPP=1 (get_forward_backward_func), and accepts p2p overlap.
    cfgs = make_configs(pp=2, vpp=1)
    _setup(_request(overlap_p2p_comm=True), cfgs, dp=1)
    assert (cfgs.model.overlap_p2p_comm, cfgs.model.batch_p2p_comm) == (True, False)
    assert schedule_refusal(cfgs.model) is None


# ---------------------------------------------------------------------------- case 9


def test_case9_preset_written_on_the_model_config_is_kept(te_available):
    # Upstream overwrites cfg.model.tp_comm_overlap_cfg with CommOverlapConfig's (None: TE's
    # defaults) (comm_overlap.py:435, 618, 625). The field is the GPT provider's (a plain
    # TransformerConfig has none).
    preset = userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192
    cfgs = make_configs()
    model = GPTModelProvider(
        **size_fields(layers=16, hidden=8192, heads=16, seq=8192),
        bf16=True,
        pipeline_dtype=torch.bfloat16,
        tp_comm_overlap_cfg=preset.to_ub_cfgs(),
    )
    model.tensor_model_parallel_size = 4
    model.sequence_parallel = True
    plan = CommOverlapConfig(tp_comm_overlap=True).setup(
        model, cfgs.optimizer, cfgs.ddp, data_parallel_size=1, micro_batch_size=1
    )
    assert model.tp_comm_overlap is True
    assert model.tp_comm_overlap_cfg == preset.to_ub_cfgs()
    assert plan.decision("tp_comm_overlap_cfg").reason.startswith(
        "set on cfg.model.tp_comm_overlap_cfg"
    )


# ---------------------------------------------------------------------------- case 10


@pytest.mark.parametrize(("tp", "sp", "expected"), [(4, True, True), (1, False, False)])
def test_case10_auto_is_written_as_a_bool(te_available, tp, sp, expected):
    # Upstream's gate tests `is True` (comm_overlap.py:442) and the override copies 'auto'
    # through (594-600) onto cfg.model.tp_comm_overlap (618).
    cfgs = make_configs(tp=tp, sequence_parallel=sp)
    plan = _setup(CommOverlapConfig(tp_comm_overlap="auto"), cfgs, dp=1, mbs=1)
    assert cfgs.model.tp_comm_overlap is expected
    assert plan.decision("tp_comm_overlap").source == "derived"
    assert not plan.warnings


# ---------------------------------------------------------------------------- case 11


def test_case11_project_only_fields_are_strict_and_preset_chosen_by():
    # Upstream's fields: comm_overlap.py:384-398 (UPSTREAM_FIELDS).
    ours = {f.name for f in dataclasses.fields(CommOverlapConfig)}
    assert ours - UPSTREAM_FIELDS == {"strict", "preset_chosen_by"}


def test_case11_project_only_fields_at_their_defaults_change_nothing():
    # The same layout with the fields left at their defaults and set explicitly to them.
    job = _job(pp=4, vpp=2, dp=2)
    plain = plan_comm_overlap(_request(), job)
    spelled = plan_comm_overlap(_request(strict=False, preset_chosen_by=None), job)
    assert plain.decisions == spelled.decisions


# ---------------------------------------------------------------------------- kept from before


@pytest.mark.parametrize(("gather", "says"), [(True, "no prefetch"), (False, "no effect")])
def test_align_param_gather_without_interleaving_is_kept_and_explained(gather, says):
    # megatron-core reads align_param_gather only in DDP's forward pre-hook; only the
    # interleaved schedule dispatches the aligned all-gathers.
    plan = plan_comm_overlap(
        _request(align_param_gather=True, overlap_param_gather=gather), _job(pp=4)
    )
    assert plan.value("align_param_gather") is True
    assert plan.decision("align_param_gather").source == "user"
    assert any(says in m for m in plan.warnings + plan.notes)


def test_align_param_gather_at_vpp1_says_nothing():
    # VPP=1 runs megatron-core's interleaved schedule, which dispatches the aligned gathers.
    plan = plan_comm_overlap(_request(align_param_gather=True), _job(pp=4, vpp=1))
    assert plan.value("align_param_gather") is True
    assert not any("align_param_gather" in m for m in plan.warnings + plan.notes)


def test_p2p_flags_at_pp1_are_kept_with_a_note():
    # megatron-core's forward_backward_no_pipelining reads neither flag.
    plan = plan_comm_overlap(_request(overlap_p2p_comm=True, batch_p2p_comm=True), _job(pp=1))
    assert (plan.value("overlap_p2p_comm"), plan.value("batch_p2p_comm")) == (True, True)
    assert any("no effect without pipeline parallelism" in n for n in plan.notes)
