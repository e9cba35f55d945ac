"""runtime_config_update as a transaction: it never half-applies, and ``comm_overlap = None`` undoes.

Tests for megatron/bridge/training/resolve.py and transaction.py on real megatron-core configs. Transformer Engine
cannot be built or imported on a CPU machine, so the tests that need TP overlap to survive use
conftest's ``te_available`` fixture (it patches ``comm_overlap.HAVE_TE``); the launch-environment
test also pretends the GPU is a Hopper (no GPU exists here).
"""

from __future__ import annotations

import copy
import dataclasses
from unittest import mock

import pytest
from megatron.core.distributed import DistributedDataParallelConfig

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training import resolve
from megatron.bridge.training.comm_overlap import (
    DEFAULT_BUCKET_SIZE,
    CommOverlapConfig,
    OverlapRefusedError,
    userbuffers_bf16_h100_h6144_tp2_mbs2_seqlen2048,
)
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.training.resolve import runtime_config_update

WORLD = 16  # TP2 x PP2 -> DP 4

# The megatron-core fields comm-overlap setup writes, per config.
OVERLAP_FIELDS = {
    "model": (
        "tp_comm_overlap",
        "tp_comm_overlap_cfg",
        "tp_comm_bootstrap_backend",
        "overlap_p2p_comm",
        "batch_p2p_comm",
        "overlap_moe_expert_parallel_comm",
        "delay_wgrad_compute",
        "defer_embedding_wgrad_compute",
        "wgrad_deferral_limit",
    ),
    "ddp": (
        "overlap_grad_reduce",
        "overlap_param_gather",
        "align_param_gather",
        "bucket_size",
        "delay_wgrad_compute",
    ),
    "optimizer": ("overlap_param_gather", "overlap_param_gather_with_optimizer_step"),
}

SECTIONS = ("model", "optimizer", "ddp", "train", "mixed_precision", "comm_overlap")


def _cfg(overlap: CommOverlapConfig | None = None) -> ConfigContainer:
    """A recipe's container: TP2 + SP, interleaved PP2 x VPP2, distributed optimizer, bf16.

    The overlap request carries the published userbuffers preset for this shape.
    """
    model = GPTModelProvider(
        num_layers=8, hidden_size=6144, num_attention_heads=48, seq_length=2048, vocab_size=1000
    )
    model.tensor_model_parallel_size = 2
    model.sequence_parallel = True
    model.pipeline_model_parallel_size = 2
    model.virtual_pipeline_model_parallel_size = 2
    cfg = ConfigContainer(
        model=model,
        train=TrainingConfig(micro_batch_size=2, global_batch_size=64),
        mixed_precision="bf16_mixed",
        comm_overlap=overlap
        if overlap is not None
        else CommOverlapConfig(
            tp_comm_overlap=True,
            tp_comm_overlap_cfg=userbuffers_bf16_h100_h6144_tp2_mbs2_seqlen2048,
        ),
    )
    cfg.ddp.use_distributed_optimizer = True
    return cfg


def _overlap_values(cfg: ConfigContainer) -> dict[tuple[str, str], object]:
    return {
        (section, name): getattr(getattr(cfg, section), name)
        for section, names in OVERLAP_FIELDS.items()
        for name in names
    }


def _state(cfg: ConfigContainer) -> dict:
    """All a failed update must leave alone.

    Each section and each of its attributes (fields and the bookkeeping next to them) by
    identity; each field's value also deep-copied, to catch an edit made in place (callables
    by identity: a copied functools.partial never equals the original). The container's own
    attributes hold the derived data-parallel size, overlap plan and resolved precision.
    """
    state = {"container": dict(vars(cfg))}
    for name in SECTIONS:
        section = getattr(cfg, name)
        state[name] = section
        if dataclasses.is_dataclass(section):
            state[f"{name} attributes"] = dict(vars(section))
            state[f"{name} values"] = {
                f.name: (value if callable(value) else copy.deepcopy(value))
                for f in dataclasses.fields(section)
                for value in [getattr(section, f.name)]
            }
    return state


def _assert_unchanged(cfg: ConfigContainer, before: dict) -> None:
    after = _state(cfg)
    assert after.keys() == before.keys()
    for key, old in before.items():
        new = after[key]
        if key.endswith(" values"):
            assert new == old, key
        elif isinstance(old, dict):
            assert new.keys() == old.keys(), key
            changed = [attr for attr in old if new[attr] is not old[attr]]
            assert changed == [], f"{key}: {changed} replaced"
        else:
            assert new is old, key


# --- all or nothing ------------------------------------------------------------------------------


def _tp_does_not_divide_world(cfg: ConfigContainer) -> None:
    cfg.model.tensor_model_parallel_size = 3


def _batch_does_not_divide(cfg: ConfigContainer) -> None:
    cfg.train.global_batch_size = 62


def _p2p_contradiction(cfg: ConfigContainer) -> None:
    cfg.comm_overlap = CommOverlapConfig(
        tp_comm_overlap=False, overlap_p2p_comm=True, batch_p2p_comm=True
    )


def _megatron_core_rejects_in_finalize(cfg: ConfigContainer) -> None:
    # A field outside the job description: only megatron-core's finalize sees it.
    cfg.model.fp8_output_proj = True


FAILING_UPDATES = [
    pytest.param(
        _tp_does_not_divide_world,
        r"World size 16 does not split into cfg.model's parallel layout",
        id="world-not-divisible",
    ),
    pytest.param(
        _batch_does_not_divide,
        r"global_batch_size=62 is not divisible by micro_batch_size \(2\) x data-parallel size \(4\)",
        id="global-batch-not-divisible",
    ),
    pytest.param(
        _p2p_contradiction,
        r"overlap_p2p_comm=True and batch_p2p_comm=True are mutually exclusive",
        id="overlap-contradiction",
    ),
    pytest.param(
        _megatron_core_rejects_in_finalize,
        r"fp8_output_proj must be used together with fp8 mode",
        id="megatron-core-finalize",
    ),
]


@pytest.mark.parametrize(("break_it", "error"), FAILING_UPDATES)
def test_failing_first_update_changes_nothing(te_available, break_it, error):
    cfg = _cfg()
    break_it(cfg)
    before = _state(cfg)
    with pytest.raises(ValueError, match=error):
        runtime_config_update(cfg, world_size=WORLD)
    _assert_unchanged(cfg, before)
    assert (cfg.data_parallel_size, cfg.overlap_plan, cfg.resolved_mixed_precision) == (
        None,
        None,
        None,
    )
    assert cfg.comm_overlap.resolved_plan is None


@pytest.mark.parametrize(("break_it", "error"), FAILING_UPDATES)
def test_failing_update_after_a_good_one_keeps_the_good_one(te_available, break_it, error):
    cfg = _cfg()
    plan = runtime_config_update(cfg, world_size=WORLD)
    resolved = _overlap_values(cfg)
    break_it(cfg)
    before = _state(cfg)
    with pytest.raises(ValueError, match=error):
        runtime_config_update(cfg, world_size=WORLD)
    _assert_unchanged(cfg, before)
    assert cfg.overlap_plan is plan and cfg.data_parallel_size == 4
    assert _overlap_values(cfg) == resolved
    assert resolved["model", "tp_comm_overlap"] is True


def test_strict_launch_environment_refusal_changes_nothing(te_available, monkeypatch):
    # The launch-environment check runs after everything else succeeded: the last moment an
    # update could half-apply. Pretend the GPU is a Hopper (there is none on this machine).
    # A launch value CUDA ignores (not an integer) is a problem on every GPU.
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "one")
    cfg = _cfg(CommOverlapConfig(tp_comm_overlap=True, strict=True))
    before = _state(cfg)
    with (
        mock.patch.object(resolve, "gpu_sm100_or_newer", return_value=False),
        pytest.raises(OverlapRefusedError, match="CUDA_DEVICE_MAX_CONNECTIONS='one' is not an"),
    ):
        runtime_config_update(cfg, world_size=WORLD)
    _assert_unchanged(cfg, before)


def test_success_writes_into_the_users_own_objects(te_available):
    cfg = _cfg()
    model, optimizer, ddp, overlap = cfg.model, cfg.optimizer, cfg.ddp, cfg.comm_overlap
    modules = ["core_attn"]
    cfg.model.recompute_modules = modules
    plan = runtime_config_update(cfg, world_size=WORLD)
    assert (cfg.model, cfg.optimizer, cfg.ddp, cfg.comm_overlap) == (model, optimizer, ddp, overlap)
    assert cfg.model is model and cfg.optimizer is optimizer and cfg.ddp is ddp
    assert cfg.comm_overlap is overlap and overlap.resolved_plan is plan
    # Written: precision, overlap, megatron-core's derivations.
    assert model.bf16 is True and optimizer.bf16 is True
    assert model.tp_comm_overlap is True and ddp.bucket_size == DEFAULT_BUCKET_SIZE
    assert model.ffn_hidden_size == 4 * 6144
    # A value the update left as it was is still the user's object, not a copy of it.
    assert model.recompute_modules is modules


def test_hooks_on_the_model_config_are_not_copied(te_available):
    # A training loop sets grad-sync hooks bound to the live model on cfg.model; copying one
    # would copy that model.
    copied = []

    class LiveModel:
        def __deepcopy__(self, memo):
            copied.append(self)
            return LiveModel()

        def no_sync(self):
            return None

    cfg = _cfg()
    hook = LiveModel().no_sync
    cfg.model.no_sync_func = hook
    runtime_config_update(cfg, world_size=WORLD)
    assert copied == []
    assert cfg.model.no_sync_func is hook


# --- comm_overlap = None undoes what the library wrote ------------------------------------------


def test_comm_overlap_none_restores_megatron_core_defaults(te_available):
    cfg = _cfg()
    defaults = _overlap_values(cfg)
    fresh = ConfigContainer(
        model=GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4)
    )
    assert defaults == _overlap_values(fresh)

    runtime_config_update(cfg, world_size=WORLD)
    written = _overlap_values(cfg)
    assert {key for key in written if written[key] != defaults[key]} >= {
        ("model", "tp_comm_overlap"),
        ("model", "tp_comm_overlap_cfg"),
        ("model", "overlap_p2p_comm"),
        ("model", "batch_p2p_comm"),
        ("model", "wgrad_deferral_limit"),
        ("ddp", "overlap_grad_reduce"),
        ("ddp", "overlap_param_gather"),
        ("ddp", "align_param_gather"),
        ("ddp", "bucket_size"),
        ("optimizer", "overlap_param_gather"),
    }

    cfg.comm_overlap = None
    assert runtime_config_update(cfg, world_size=WORLD) is None
    assert cfg.overlap_plan is None
    assert _overlap_values(cfg) == defaults
    assert (cfg.model.tp_comm_overlap, cfg.model.batch_p2p_comm, cfg.ddp.bucket_size) == (
        False,
        True,
        None,
    )
    # Precision and megatron-core's derivations are not overlap writes: they stay.
    assert cfg.model.bf16 is True and cfg.model.ffn_hidden_size == 4 * 6144


def test_comm_overlap_none_restores_the_users_own_settings(te_available):
    cfg = _cfg()
    cfg.ddp.bucket_size = 1000
    cfg.ddp.overlap_grad_reduce = True
    cfg.model.tp_comm_bootstrap_backend = "mpi"
    cfg.model.wgrad_deferral_limit = 3
    users = _overlap_values(cfg)

    runtime_config_update(cfg, world_size=WORLD)
    # The plan replaced two of them (the others it honoured).
    assert (cfg.model.tp_comm_bootstrap_backend, cfg.model.wgrad_deferral_limit) == ("nccl", -1)
    assert (cfg.ddp.bucket_size, cfg.ddp.overlap_grad_reduce) == (1000, True)

    cfg.comm_overlap = None
    runtime_config_update(cfg, world_size=WORLD)
    assert _overlap_values(cfg) == users
    assert cfg.overlap_plan is None


def test_a_user_edit_after_an_update_is_kept(te_available):
    cfg = _cfg()
    runtime_config_update(cfg, world_size=WORLD)
    assert cfg.ddp.bucket_size == DEFAULT_BUCKET_SIZE
    cfg.ddp.bucket_size = 5000

    plan = runtime_config_update(cfg, world_size=WORLD)
    assert cfg.ddp.bucket_size == 5000
    assert plan.decision("bucket_size").value == 5000
    assert plan.decision("bucket_size").source == "user"

    cfg.comm_overlap = None
    runtime_config_update(cfg, world_size=WORLD)
    assert cfg.ddp.bucket_size == 5000
    assert cfg.model.tp_comm_overlap is False


def test_an_in_place_edit_of_a_written_value_is_the_users(te_available):
    cfg = _cfg()
    runtime_config_update(cfg, world_size=WORLD)
    ub_cfgs = cfg.model.tp_comm_overlap_cfg
    assert ub_cfgs["qkv_fprop"]["num_sm"] != 7
    ub_cfgs["qkv_fprop"]["num_sm"] = 7

    cfg.comm_overlap = None
    runtime_config_update(cfg, world_size=WORLD)
    assert cfg.model.tp_comm_overlap_cfg is ub_cfgs
    assert cfg.model.tp_comm_overlap is False


def test_comm_overlap_back_on_gives_the_first_plan_again(te_available):
    cfg = _cfg()
    request = cfg.comm_overlap
    first = runtime_config_update(cfg, world_size=WORLD)
    resolved = _overlap_values(cfg)

    cfg.comm_overlap = None
    runtime_config_update(cfg, world_size=WORLD)
    cfg.comm_overlap = request
    again = runtime_config_update(cfg, world_size=WORLD)

    assert again.to_dict() == first.to_dict()
    assert again.warnings == ()
    assert _overlap_values(cfg) == resolved


def test_a_swapped_in_ddp_config_is_all_the_users(te_available):
    cfg = _cfg()
    runtime_config_update(cfg, world_size=WORLD)
    assert (cfg.ddp.overlap_grad_reduce, cfg.ddp.bucket_size) == (True, DEFAULT_BUCKET_SIZE)
    # The same values the library wrote on the old object, but set by the user on a new one.
    cfg.ddp = DistributedDataParallelConfig(
        use_distributed_optimizer=True, overlap_grad_reduce=True, bucket_size=DEFAULT_BUCKET_SIZE
    )
    cfg.comm_overlap = None
    runtime_config_update(cfg, world_size=WORLD)
    assert (cfg.ddp.overlap_grad_reduce, cfg.ddp.bucket_size) == (True, DEFAULT_BUCKET_SIZE)
    assert cfg.model.tp_comm_overlap is False
