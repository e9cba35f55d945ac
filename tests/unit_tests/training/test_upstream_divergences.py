"""Where the plan differs from upstream Megatron-Bridge's ``CommOverlapConfig``, one test each.

Each case is a layout on which upstream and this library resolve differently (or on which this
library refused what megatron-core runs). megatron-core is the judge: a refusal only where its
code (or TE, or the runtime) fails, otherwise the setting is kept and a note or a warning says
what it does. The docs' migration section lists each case with its reason.
"""

from __future__ import annotations

import pytest

from megatron.bridge.training.comm_overlap import (
    CommOverlapConfig,
    plan_comm_overlap,
    userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192,
)
from megatron.bridge.training.job import JobDescription, ModelDescription


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


def _plan(job: JobDescription, **request):
    return plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False, **request), job)


@pytest.mark.parametrize(("gather", "says"), [(True, "no prefetch"), (False, "no effect")])
def test_align_param_gather_without_interleaving_is_kept_and_explained(gather, says):
    # megatron-core reads align_param_gather only in DDP's forward pre-hook; only the
    # interleaved schedule dispatches the aligned all-gathers.
    plan = _plan(_job(pp=4), align_param_gather=True, overlap_param_gather=gather)
    assert plan.value("align_param_gather") is True
    assert plan.decision("align_param_gather").source == "user"
    assert any(says in m for m in plan.warnings + plan.notes)


def test_param_gather_at_dp1_without_grad_reduce_is_a_note():
    plan = _plan(_job(dp=1), overlap_param_gather=True, overlap_grad_reduce=False)
    assert (plan.value("overlap_param_gather"), plan.value("overlap_grad_reduce")) == (True, False)
    assert not plan.warnings
    assert any("overlap_param_gather=True" in n and "DP=1" in n for n in plan.notes)


def test_param_gather_is_not_derived_without_grad_reduce_overlap():
    # Upstream derives overlap_param_gather=True here; megatron-core would keep every parameter
    # in one bucket (nothing to prefetch) and Megatron-LM's argument check refuses the pair.
    plan = _plan(_job(dp=8), overlap_grad_reduce=False)
    assert plan.value("overlap_param_gather") is False
    assert plan.decision("overlap_param_gather").source == "derived"


@pytest.mark.parametrize(("pp", "batch"), [(2, False), (4, True)])
def test_interleaved_pipeline_without_p2p_overlap_batches_except_at_pp2(pp, batch):
    # Upstream leaves batch_p2p_comm=False whenever VPP > 1. At PP=2 both directions go to one
    # neighbour, which only megatron-core's unbatched p2p keeps apart.
    plan = _plan(_job(pp=pp, vpp=2), overlap_p2p_comm=False)
    assert plan.value("batch_p2p_comm") is batch


def test_batched_p2p_on_an_interleaved_two_rank_pipeline_is_refused():
    with pytest.raises(ValueError, match=r"same neighbour.*batch_p2p_comm=False"):
        _plan(_job(pp=2, vpp=2), overlap_p2p_comm=False, batch_p2p_comm=True)


def test_param_gather_with_optimizer_step_without_distributed_optimizer_is_refused():
    # Upstream leaves it off silently; megatron-core's ChainedOptimizer._step reads
    # optimizer.model_chunks, which only the distributed optimizer has.
    with pytest.raises(ValueError, match="needs the distributed optimizer"):
        _plan(_job(use_distributed_optimizer=False), overlap_param_gather_with_optimizer_step=True)


def test_param_gather_with_optimizer_step_at_pp1_is_written_as_upstream_does():
    plan = _plan(_job(pp=1), overlap_param_gather_with_optimizer_step=True)
    assert plan.value("overlap_param_gather_with_optimizer_step") is True
    assert any("first model chunk is the whole model" in n for n in plan.notes)
    assert any("checkpointing" in w for w in plan.warnings)


def test_param_gather_with_optimizer_step_without_param_gather_says_it_does_nothing():
    plan = _plan(
        _job(pp=4, vpp=2), overlap_param_gather_with_optimizer_step=True, overlap_param_gather=False
    )
    assert plan.value("overlap_param_gather_with_optimizer_step") is True
    assert any("has no effect with overlap_param_gather=False" in w for w in plan.warnings)


def test_preset_written_on_the_model_config_is_kept():
    # Upstream overwrites cfg.model.tp_comm_overlap_cfg with CommOverlapConfig's (None: TE's
    # defaults); a preset written there is the user's (Megatron-LM users put their YAML there).
    preset = userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192
    job = _job(
        tp=4,
        te_available=True,
        direct_settings=(("model", "tp_comm_overlap_cfg", preset.to_ub_cfgs()),),
    )
    plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=True), job)
    assert plan.value("tp_comm_overlap_cfg") == preset.to_ub_cfgs()
    assert plan.decision("tp_comm_overlap_cfg").reason.startswith(
        "set on cfg.model.tp_comm_overlap_cfg"
    )
