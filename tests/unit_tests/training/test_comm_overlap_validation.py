"""Edge cases of comm_overlap resolution beyond the 26-case contract: validations megatron-core
does not do, preset shape checks, TE probing, DDP-config intent, the plan's JSON form.

Real megatron-core configs throughout; only TE availability is patched (TE cannot be imported on
a CPU-only machine).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from unittest import mock

import pytest

from megatron.bridge.training import comm_overlap
from megatron.bridge.training.comm_overlap import (
    CommOverlapConfig,
    OverlapPlan,
    OverlapRefusedError,
    TransformerLayerTPOverlapCfg,
    plan_comm_overlap,
    userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192,
    userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
    userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192,
)
from megatron.bridge.training.comm_overlap import te as te_module
from megatron.bridge.training.job import JobDescription, ModelDescription
from tests.unit_tests.conftest import make_configs, modules_loaded_by

LOGGER = "megatron.bridge.training.comm_overlap"

#: Short layout names the tests use, and the model field each one sets.
_LAYOUT = {
    "tp_size": "tensor_model_parallel_size",
    "pp_size": "pipeline_model_parallel_size",
    "cp_size": "context_parallel_size",
    "ep_size": "expert_model_parallel_size",
}
_MODEL_FIELDS = {f.name for f in dataclasses.fields(ModelDescription)}


def _job(*, dp_size: int = 1, **fields) -> JobDescription:
    """A job from model fields (the layout by its short names) and job fields.

    The world size is TP x CP x PP x ``dp_size``.
    """
    fields = {_LAYOUT.get(k, k): v for k, v in fields.items()}
    model = ModelDescription(**{k: v for k, v in fields.items() if k in _MODEL_FIELDS})
    world = (
        model.tensor_model_parallel_size
        * model.context_parallel_size
        * model.pipeline_model_parallel_size
        * dp_size
    )
    job = {k: v for k, v in fields.items() if k not in _MODEL_FIELDS}
    return JobDescription(model=model, world_size=world, **job)


def _setup(co, cfgs, dp=1, mbs=None):
    return co.setup(
        cfgs.model, cfgs.optimizer, cfgs.ddp, data_parallel_size=dp, micro_batch_size=mbs
    )


def test_param_gather_without_distributed_optimizer_is_an_error():
    cfgs = make_configs(distributed_optimizer=False)
    with pytest.raises(
        ValueError, match="overlap_param_gather=True needs the distributed optimizer"
    ):
        _setup(CommOverlapConfig(tp_comm_overlap=False, overlap_param_gather=True), cfgs, dp=8)


def test_param_gather_set_on_ddp_config_without_distributed_optimizer_is_an_error():
    cfgs = make_configs(distributed_optimizer=False)
    cfgs.ddp.overlap_param_gather = True  # written straight on cfg.ddp, as recipes usually do
    with pytest.raises(ValueError, match="needs the distributed optimizer"):
        _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)


def test_param_gather_without_grad_reduce_overlap_is_kept_with_a_warning():
    # megatron-core runs the pair (one DDP bucket, nothing to prefetch): a warning, not a refusal.
    cfgs = make_configs()
    co = CommOverlapConfig(
        tp_comm_overlap=False, overlap_grad_reduce=False, overlap_param_gather=True
    )
    plan = _setup(co, cfgs, dp=8)
    assert (cfgs.ddp.overlap_grad_reduce, cfgs.ddp.overlap_param_gather) == (False, True)
    assert any("hides nothing" in w and "one bucket" in w for w in plan.warnings)


def test_conflict_between_comm_overlap_and_ddp_config_says_choose_one():
    cfgs = make_configs()
    cfgs.ddp.overlap_grad_reduce = True
    with pytest.raises(ValueError, match="choose one"):
        _setup(CommOverlapConfig(tp_comm_overlap=False, overlap_grad_reduce=False), cfgs, dp=8)


def test_grad_reduce_off_turns_param_gather_off_with_a_reason():
    cfgs = make_configs()
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False, overlap_grad_reduce=False), cfgs, dp=8)
    assert cfgs.ddp.overlap_param_gather is False
    assert "overlap_grad_reduce" in plan.decision("overlap_param_gather").reason


def test_overlap_p2p_without_interleaving_is_rejected():
    with pytest.raises(ValueError, match="needs an interleaved pipeline"):
        _setup(CommOverlapConfig(tp_comm_overlap=False, overlap_p2p_comm=True), make_configs(pp=4))


def test_align_param_gather_without_interleaving_is_kept_with_a_warning():
    cfgs = make_configs(pp=4)
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False, align_param_gather=True), cfgs, dp=8)
    assert cfgs.ddp.align_param_gather is True
    assert any("non-interleaved pipeline" in w for w in plan.warnings)


def test_param_gather_with_optimizer_step_needs_the_distributed_optimizer():
    co = CommOverlapConfig(tp_comm_overlap=False, overlap_param_gather_with_optimizer_step=True)
    with pytest.raises(ValueError, match="needs the distributed optimizer"):
        _setup(co, make_configs(distributed_optimizer=False), dp=8)


def interleaved_optimizer_step_gather(co: CommOverlapConfig):
    """The plan of ``co``, which asks for overlap_param_gather_with_optimizer_step, on PP4 x VPP2
    at DP8, once the optimizer config is seen to keep the setting."""
    cfgs = make_configs(pp=4, vpp=2)
    plan = _setup(co, cfgs, dp=8)
    assert cfgs.optimizer.overlap_param_gather_with_optimizer_step is True
    return plan


def test_param_gather_with_optimizer_step_honoured_with_a_checkpoint_warning():
    knobs = {"tp_comm_overlap": False, "overlap_param_gather_with_optimizer_step": True}
    plan = interleaved_optimizer_step_gather(CommOverlapConfig(**knobs))
    assert any("checkpointing" in w for w in plan.warnings)
    # A caution about a knowingly chosen setting: strict mode keeps it a warning.
    strict = interleaved_optimizer_step_gather(CommOverlapConfig(**knobs, strict=True))
    assert any("checkpointing" in w for w in strict.warnings)


def test_user_overlap_p2p_false_falls_back_to_batched_p2p():
    cfgs = make_configs(pp=4, vpp=2)
    _setup(CommOverlapConfig(tp_comm_overlap=False, overlap_p2p_comm=False), cfgs)
    assert (cfgs.model.overlap_p2p_comm, cfgs.model.batch_p2p_comm) == (False, True)


@pytest.mark.parametrize(
    ("seq", "mbs", "cp", "tp"), [(2047, 1, 1, 4), (4096, 1, 2, 8), (2048, 3, 4, 4)]
)
def test_tp_overlap_token_divisibility(te_available, seq, mbs, cp, tp):
    job = _job(tp_size=tp, cp_size=cp, sequence_parallel=True, seq_length=seq, micro_batch_size=mbs)
    tokens = seq * mbs
    divisible = tokens % cp == 0 and (tokens // cp) % tp == 0
    co = CommOverlapConfig(tp_comm_overlap=True)
    if divisible:
        assert plan_comm_overlap(co, job).value("tp_comm_overlap") is True
    else:
        with pytest.raises(ValueError, match="divisible by tensor_model_parallel_size"):
            plan_comm_overlap(co, job)


def test_every_failed_tp_condition_is_named_at_once(te_missing):
    cfgs = make_configs(tp=1)
    plan = _setup(CommOverlapConfig(tp_comm_overlap=True), cfgs)
    reason = plan.decision("tp_comm_overlap").reason
    for condition in (
        "tensor_model_parallel_size is 1",
        "sequence_parallel is False",
        "Transformer Engine",
    ):
        assert condition in reason


def test_preset_for_another_shape_warns(te_available, caplog):
    cfgs = make_configs(tp=4, sequence_parallel=True, hidden_size=4096)
    co = CommOverlapConfig(
        tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _setup(co, cfgs)
    assert "tuned for hidden 12288 TP4" in caplog.text
    assert "hidden 4096 TP4" in caplog.text
    with pytest.raises(OverlapRefusedError):
        _setup(
            CommOverlapConfig(
                tp_comm_overlap=True, strict=True, tp_comm_overlap_cfg=co.tp_comm_overlap_cfg
            ),
            cfgs,
        )


def test_shared_preset_object_matches_any_of_its_published_shapes(te_available):
    # The FP8 H100 h8192 TP4 and FP8 B200 h8192 TP2 presets are one object.
    assert (
        userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192
        is comm_overlap.userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192
    )
    # An FP8 model: an FP8 preset on a bf16 run is a warning (the preset's precision differs).
    cfgs = make_configs(tp=2, sequence_parallel=True, hidden_size=8192, fp8="hybrid")
    plan = _setup(
        CommOverlapConfig(
            tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192
        ),
        cfgs,
    )
    assert plan.warnings == ()
    assert set(plan.preset_names) == {
        "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192",
        "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192",
    }


def test_preset_ignored_when_tp_overlap_off_is_said():
    plan = _setup(
        CommOverlapConfig(
            tp_comm_overlap=False,
            tp_comm_overlap_cfg=userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192,
        ),
        make_configs(),
    )
    assert any("preset is ignored" in w for w in plan.warnings)


def test_preset_name_string_is_a_type_error_with_a_hint():
    with pytest.raises(TypeError, match="import the preset object"):
        CommOverlapConfig(
            tp_comm_overlap=True,
            tp_comm_overlap_cfg="userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192",
        ).finalize()


def test_editing_the_model_copy_never_edits_the_preset(te_available):
    cfgs = make_configs(tp=4, sequence_parallel=True, hidden_size=12288)
    _setup(
        CommOverlapConfig(
            tp_comm_overlap=True,
            tp_comm_overlap_cfg=userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
        ),
        cfgs,
    )
    cfgs.model.tp_comm_overlap_cfg["qkv_dgrad"]["num_sm"] = 99
    assert userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048.to_ub_cfgs()["qkv_dgrad"]["num_sm"] == 4
    with pytest.raises(AttributeError):
        userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048.qkv_dgrad = None  # frozen


def test_custom_preset_is_accepted_without_shape_warning(te_available):
    custom = TransformerLayerTPOverlapCfg(qkv_dgrad=comm_overlap.BulkOverlapCfg(num_sm=4))
    plan = _setup(
        CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg=custom),
        make_configs(tp=2, sequence_parallel=True),
    )
    assert plan.value("tp_comm_overlap_cfg") == {"qkv_dgrad": {"method": "bulk", "num_sm": 4}}
    assert plan.warnings == ()


def test_data_parallel_size_must_be_known_and_consistent():
    with pytest.raises(ValueError, match="data-parallel size is unknown"):
        CommOverlapConfig(tp_comm_overlap=False).setup(*_triple(make_configs()))
    with pytest.raises(ValueError, match="contradicts"):
        CommOverlapConfig(tp_comm_overlap=False, data_parallel_size=4).setup(
            *_triple(make_configs()), data_parallel_size=8
        )


def _triple(cfgs):
    return cfgs.model, cfgs.optimizer, cfgs.ddp


def test_distributed_optimizer_flags_are_reconciled():
    cfgs = make_configs()
    cfgs.optimizer.use_distributed_optimizer = False
    plan = _setup(CommOverlapConfig(tp_comm_overlap=False), cfgs, dp=8)
    assert cfgs.optimizer.use_distributed_optimizer is True
    assert any("cfg.optimizer.use_distributed_optimizer is set to True" in n for n in plan.notes)


def test_non_megatron_ddp_config_is_left_alone_with_a_note():
    cfgs = make_configs()
    plan = CommOverlapConfig(tp_comm_overlap=False).setup(
        cfgs.model, cfgs.optimizer, None, data_parallel_size=8
    )
    assert any("not megatron-core's DistributedDataParallelConfig" in n for n in plan.notes)


def test_delayed_wgrad_with_grad_reduce_needs_recent_te():
    job = _job(
        ep_size=4,
        num_moe_experts=8,
        moe_token_dispatcher_type="alltoall",
        bf16=True,
        dp_size=8,
        use_distributed_optimizer=True,
        te_available=True,
        te_version="2.5.0",
    )
    co = CommOverlapConfig(
        tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True
    )
    with pytest.raises(ValueError, match=r"Transformer Engine >= 2\.7"):
        plan_comm_overlap(co, job)
    ok = plan_comm_overlap(co, job.replace(te_version="2.8.0"))
    assert ok.value("delay_wgrad_compute") is True


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"recompute_granularity": "full"}, "no full activation recompute"),
        ({"moe_shared_expert_overlap": True}, "moe_shared_expert_overlap=False"),
        ({"mtp_num_layers": 2}, "mtp_num_layers"),
        ({"pp_size": 2}, "virtual_pipeline_model_parallel_size set when PP > 1"),
        ({"bf16": False}, "bf16 or fp16"),
        ({"recompute_modules": ("moe",)}, "'moe' not in recompute_modules"),
    ],
)
def test_ep_overlap_each_requirement(change, needle):
    base = {"ep_size": 4, "num_moe_experts": 8, "moe_token_dispatcher_type": "flex", "bf16": True}
    co = CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True)
    assert plan_comm_overlap(co, _job(**base)).value("overlap_moe_expert_parallel_comm") is True
    with pytest.raises(ValueError, match=needle):
        plan_comm_overlap(co, _job(**{**base, **change}))


def test_embedding_wgrad_deferral_rules():
    co = CommOverlapConfig(tp_comm_overlap=False, defer_embedding_wgrad_compute=True)
    with pytest.raises(ValueError, match="needs pipeline parallelism"):
        plan_comm_overlap(co, _job())
    with pytest.raises(ValueError, match="gradient_accumulation_fusion"):
        plan_comm_overlap(co, _job(pp_size=2))
    plan = plan_comm_overlap(co, _job(pp_size=2, gradient_accumulation_fusion=True))
    assert (plan.value("defer_embedding_wgrad_compute"), plan.value("wgrad_deferral_limit")) == (
        True,
        0,
    )


def test_plan_round_trips_through_json(te_available):
    cfgs = make_configs(tp=4, pp=4, vpp=2, sequence_parallel=True, hidden_size=12288)
    plan = _setup(
        CommOverlapConfig(
            tp_comm_overlap=True,
            tp_comm_overlap_cfg=userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
        ),
        cfgs,
        dp=8,
        mbs=1,
    )
    assert OverlapPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_broken_transformer_engine_counts_as_unavailable_with_its_reason():
    # A TE install on a CPU-only machine raises RuntimeError at import; simulate that import.
    def broken(name, *args, **kwargs):
        if name == "transformer_engine.pytorch":
            raise RuntimeError("CUDA driver not found")
        return real_import(name, *args, **kwargs)

    real_import = te_module.importlib.import_module
    with mock.patch.object(te_module.importlib, "import_module", broken):
        status = comm_overlap.probe_transformer_engine(refresh=True)
    comm_overlap.probe_transformer_engine(refresh=True)
    assert status.available is False
    assert "RuntimeError: CUDA driver not found" in status.reason


def test_importing_comm_overlap_loads_no_torch_megatron_core_or_te():
    code = "import megatron.bridge.training.comm_overlap"
    assert modules_loaded_by(code, ("torch", "megatron.core", "transformer_engine")) == []
