"""Upstream Megatron-Bridge's communication-overlap snippets run here as written.

The snippets are in ``data/upstream_snippets.yaml``, copied from upstream's docs and skills (the
file names each one's source); the first three are the seed skill's code. Each is run with
``exec`` on a ``cfg`` (or ``config``) whose model shape, and where a snippet assumes one its
expert-parallel layout, is filled in, and then resolved the way a job resolves it
(``runtime_config_update``, planning for a cluster with Transformer Engine: ``te="assume"``).
The assertions are what the snippet says it does.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.config import ConfigContainer, runtime_config_update
from tests.unit_tests.conftest import size_fields

SNIPPETS = yaml.safe_load((Path(__file__).parent / "data" / "upstream_snippets.yaml").read_text())[
    "snippets"
]

#: The one line of a snippet that stands for the rest of a config, and what fills it in.
_PLACEHOLDER = "    # ... other config parameters\n"


def _run(snippet: str, **names) -> dict:
    namespace = dict(names)
    exec(compile(SNIPPETS[snippet]["code"], f"upstream:{snippet}", "exec"), namespace)
    return namespace


def _gpt3_175b() -> GPTModelProvider:
    # The GPT-3 175B shape (megatron/bridge/recipes/models.json, gpt3_175b): the one the seed's
    # preset userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048 is published for.
    return GPTModelProvider(
        **size_fields(layers=96, hidden=12288, heads=96, ffn=49152, vocab=51200, seq=2048)
    )


def _qwen3_30b_a3b(**layout) -> GPTModelProvider:
    # The Qwen3-30B-A3B shape (megatron/bridge/recipes/models.json, qwen3_30b_a3b), with the
    # all-to-all token dispatch upstream's H100 recipe sets (recipes/qwen/h100/qwen3_moe.py;
    # the snippets' prerequisite).
    return GPTModelProvider(
        moe_token_dispatcher_type="alltoall",
        **size_fields(layers=48, hidden=2048, heads=32, groups=4, ffn=6144, vocab=151936, seq=4096),
        kv_channels=128,
        num_moe_experts=128,
        moe_router_topk=8,
        moe_ffn_hidden_size=768,
        **layout,
    )


def _recipe_cfg(model: GPTModelProvider) -> ConfigContainer:
    """A recipe's container around ``model``: bf16 mixed precision and a comm-overlap request,
    as every upstream recipe the snippets edit has."""
    return ConfigContainer(
        model=model,
        mixed_precision="bf16_mixed",
        comm_overlap=CommOverlapConfig(tp_comm_overlap=False),
    )


def test_the_seed_tp_dp_pp_snippets():
    cfg = ConfigContainer(model=_gpt3_175b(), mixed_precision="bf16_mixed")
    for snippet in ("tp_dp_enable", "tp_dp_preset", "tp_dp_precision"):
        _run(snippet, cfg=cfg)
    plan = runtime_config_update(cfg, world_size=128, te="assume")
    # TP overlap runs (TP 4 >= 2, sequence parallel, TE on the cluster), with the named preset.
    assert plan.value("tp_comm_overlap") is True and cfg.model.tp_comm_overlap is True
    assert plan.value("tp_comm_overlap_cfg") is not None
    assert "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048" in str(plan.to_dict())
    # PP 4 with VPP 2: interleaved P2P overlap, not batched.
    assert (plan.value("overlap_p2p_comm"), plan.value("batch_p2p_comm")) == (True, False)
    assert (cfg.model.overlap_p2p_comm, cfg.model.batch_p2p_comm) == (True, False)
    # DP = 128 // (4 * 4) = 8 > 1: DP overlap with 128 Mi-parameter buckets, aligned over VPP.
    assert cfg.data_parallel_size == 8
    assert cfg.ddp.overlap_grad_reduce and cfg.ddp.overlap_param_gather
    assert cfg.ddp.bucket_size == 128 * 1024 * 1024
    assert cfg.ddp.align_param_gather is True
    # The precision knobs went through mixed precision into DDP.
    assert cfg.ddp.grad_reduce_in_fp32 is False and cfg.ddp.fp8_param_gather is False


def test_the_seed_snippets_without_te_say_why_tp_overlap_is_off(caplog):
    # On this machine (no Transformer Engine) the same code plans TP overlap off, and says so
    # (the pitfall "TP overlap silently disables itself" does not hold here).
    cfg = ConfigContainer(model=_gpt3_175b(), mixed_precision="bf16_mixed")
    for snippet in ("tp_dp_enable", "tp_dp_preset", "tp_dp_precision"):
        _run(snippet, cfg=cfg)
    with caplog.at_level(logging.WARNING):
        plan = runtime_config_update(cfg, world_size=128, te="detect")
    assert plan.value("tp_comm_overlap") is False
    assert "transformer" in plan.decision("tp_comm_overlap").reason.lower()
    assert any(
        "TP comm overlap turned OFF: Transformer Engine is not available" in r.getMessage()
        for r in caplog.records
    )
    assert plan.value("overlap_p2p_comm") is True and cfg.ddp.overlap_param_gather


@pytest.mark.parametrize(
    ("snippet", "ep", "world"),
    [("ep_alltoall", 8, 64), ("ep_minimal", 4, 32)],
)
def test_ep_overlap_with_the_alltoall_dispatcher(snippet, ep, world):
    cfg = _recipe_cfg(_qwen3_30b_a3b())
    _run(snippet, cfg=cfg)
    plan = runtime_config_update(cfg, world_size=world, te="assume")
    assert plan.value("overlap_moe_expert_parallel_comm") is True
    assert plan.value("delay_wgrad_compute") is False
    assert cfg.model.overlap_moe_expert_parallel_comm is True
    assert (cfg.model.expert_model_parallel_size, cfg.model.num_moe_experts) == (ep, 64)
    assert cfg.model.moe_token_dispatcher_type == "alltoall"


@pytest.mark.parametrize("backend", ["deepep", "hybridep"])
def test_ep_overlap_with_the_flex_dispatcher(backend):
    cfg = _recipe_cfg(_qwen3_30b_a3b(expert_model_parallel_size=8, moe_shared_expert_overlap=True))
    code = SNIPPETS["ep_flex"]["code"]
    if backend == "hybridep":  # the snippet's "# or:" line in place of the line above it
        code = code.replace(
            'apply_flex_dispatcher_backend(cfg.model, moe_flex_dispatcher_backend="deepep")\n# or: ',
            "",
        )
        assert code.count("apply_flex_dispatcher_backend(cfg.model") == 1
    exec(compile(code, "upstream:ep_flex", "exec"), {"cfg": cfg})
    assert cfg.model.moe_token_dispatcher_type == "flex"
    assert cfg.model.moe_flex_dispatcher_backend == backend
    assert cfg.model.moe_shared_expert_overlap is False
    plan = runtime_config_update(cfg, world_size=64, te="assume")
    assert plan.value("overlap_moe_expert_parallel_comm") is True
    assert plan.job.model.flex_backend == backend


def test_moe_overlap_with_delayed_wgrad():
    cfg = _recipe_cfg(_qwen3_30b_a3b(expert_model_parallel_size=8))
    _run("moe_enable", cfg=cfg)
    plan = runtime_config_update(cfg, world_size=64, te="assume")
    assert plan.value("overlap_moe_expert_parallel_comm") is True
    assert plan.value("delay_wgrad_compute") is True
    assert cfg.model.delay_wgrad_compute is True


def test_the_config_container_yaml_snippets(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = _recipe_cfg(_gpt3_175b())
    saved = config.to_dict()
    config = _run("yaml_round_trip", config=config, ConfigContainer=ConfigContainer)["config"]
    assert config.to_dict() == saved
    _run("yaml_export", config=config)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == saved == yaml.safe_load((tmp_path / "config.yaml").read_text())
    config = _run("yaml_load", ConfigContainer=ConfigContainer)["config"]
    assert isinstance(config, ConfigContainer) and config.to_dict() == saved


def test_the_distributed_optimizer_snippet():
    code = SNIPPETS["distributed_optimizer"]["code"]
    assert code.count(_PLACEHOLDER) == 1
    code = code.replace(_PLACEHOLDER, "    model=model,  # the model shape, filled in\n")
    namespace = {"model": _gpt3_175b()}
    exec(compile(code, "upstream:distributed_optimizer", "exec"), namespace)
    config = namespace["config"]
    runtime_config_update(config, world_size=32, te="assume")
    assert config.optimizer.use_distributed_optimizer and config.ddp.use_distributed_optimizer
    assert config.data_parallel_size == 32
