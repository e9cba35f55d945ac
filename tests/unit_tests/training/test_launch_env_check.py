"""Model-build time compares the live environment with the resolved plan.

The GPU generation is patched (no GPU exists on these machines; say which one the test
pretends), and so is TE availability (TE cannot be imported on a CPU machine). The configs, the
plan and the environment rules are real.
"""

from __future__ import annotations

import logging
import os
from unittest import mock

import pytest

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training import comm_overlap, resolve
from megatron.bridge.training.comm_overlap import CommOverlapConfig, OverlapRefusedError
from megatron.bridge.training.config import ConfigContainer
from megatron.bridge.training.resolve import runtime_config_update
from tests.unit_tests.conftest import bf16_container, hybridep_container


def _cfg(strict: bool = False) -> ConfigContainer:
    model = GPTModelProvider(
        num_layers=8, hidden_size=512, num_attention_heads=8, seq_length=1024, vocab_size=1000
    )
    model.tensor_model_parallel_size = 4
    model.sequence_parallel = True
    return bf16_container(
        model, comm_overlap=CommOverlapConfig(tp_comm_overlap=True, strict=strict)
    )


@pytest.fixture
def hopper_with_te():
    with (
        mock.patch.object(resolve, "gpu_sm100_or_newer", return_value=False),
        mock.patch.object(comm_overlap, "HAVE_TE", True),
    ):
        yield


@pytest.mark.parametrize("value", [None, "8", "32"])
def test_tp_overlap_on_hopper_accepts_a_tuned_connection_count(
    hopper_with_te, monkeypatch, caplog, value
):
    # TE orders the userbuffers comm kernel before its GEMM on Hopper with a launch-completion
    # event when CUDA_DEVICE_MAX_CONNECTIONS > 1 (CommOverlapCore, CUDA 12.3+), so 1 is a
    # tuned value there, not a requirement: nothing to warn about.
    if value is None:
        monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", value)
    with caplog.at_level(logging.WARNING, logger="megatron.bridge.training.resolve"):
        runtime_config_update(_cfg(strict=True), world_size=16)
    assert "launch environment" not in caplog.text


def test_correct_environment_is_quiet(hopper_with_te, monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    cfg = _cfg()
    runtime_config_update(cfg, world_size=16)
    assert resolve.check_launch_environment(cfg, resolve.resolve_config(cfg, world_size=16)) == []


@pytest.mark.parametrize("strict", [True, False])
def test_a_hybridep_domain_that_does_not_divide_ep_is_refused(hopper_with_te, monkeypatch, strict):
    # HybridEPBuffer asserts it when the first MoE layer builds its buffer: the job would fail,
    # so the update refuses it, strict or not, and exports nothing.
    monkeypatch.setenv("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", "3")
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    cfg = hybridep_container(strict=strict)
    with pytest.raises(
        ValueError, match=r"fails when it starts with it: .*=3 does not divide EP=4"
    ):
        runtime_config_update(cfg, world_size=8)
    assert cfg.applied_env_vars is None and "CUDA_DEVICE_MAX_CONNECTIONS" not in os.environ


def test_a_connection_count_that_only_slows_the_job_warns_unless_strict(
    hopper_with_te, monkeypatch, caplog
):
    # One CUDA queue under EP all-to-all overlap runs, without the overlap: a warning, or the
    # strict request's refusal.
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")

    def with_ep_overlap(strict: bool):
        cfg = hybridep_container(strict=strict)
        cfg.comm_overlap.overlap_moe_expert_parallel_comm = True
        return cfg

    with caplog.at_level(logging.WARNING, logger="megatron.bridge.training.resolve"):
        runtime_config_update(with_ep_overlap(False), world_size=8)
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1 gives CUDA one hardware queue" in caplog.text
    with pytest.raises(OverlapRefusedError, match="one hardware queue"):
        runtime_config_update(with_ep_overlap(True), world_size=8)


def test_a_dividing_hybridep_domain_is_quiet(hopper_with_te, monkeypatch):
    monkeypatch.setenv("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", "2")
    cfg = hybridep_container(strict=True)
    runtime_config_update(cfg, world_size=8)
    assert resolve.check_launch_environment(cfg, resolve.resolve_config(cfg, world_size=8)) == []


def test_unknown_gpu_skips_generation_rules(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    with (
        mock.patch.object(resolve, "gpu_sm100_or_newer", return_value=None),
        mock.patch.object(comm_overlap, "HAVE_TE", True),
    ):
        cfg = _cfg()
        runtime_config_update(cfg, world_size=16)
        assert (
            resolve.check_launch_environment(cfg, resolve.resolve_config(cfg, world_size=16)) == []
        )
