"""Tests for megatron/bridge/training/setup.py: real megatron-core GPTModels built on the CPU.

megatron-core builds a GPTModel on the CPU with ``use_cpu_initialization=True``, the local layer
spec and a 1-rank gloo process group; its DistributedDataParallel wrapper needs CUDA, so here
build_model returns the bare chunks.
"""

from __future__ import annotations

import logging
from unittest import mock

import pytest
import torch
from megatron.core.models.gpt.gpt_model import GPTModel

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.training.initialize import reset_tp_communicators
from megatron.bridge.training.setup import build_model
from tests.unit_tests.conftest import TINY_MODEL_FIELDS, stub_transformer_engine

HIDDEN, LAYERS, SEQ = (TINY_MODEL_FIELDS[k] for k in ("hidden_size", "num_layers", "seq_length"))


@pytest.fixture
def cpu_only():
    # The CPU path of build_model is what these tests check; make it the path taken even when
    # the suite happens to run on a GPU machine.
    with mock.patch("torch.cuda.is_available", return_value=False):
        yield


def _tiny_cfg() -> ConfigContainer:
    return ConfigContainer(
        model=GPTModelProvider(**TINY_MODEL_FIELDS, use_cpu_initialization=True),
        train=TrainingConfig(micro_batch_size=2, global_batch_size=8),
        mixed_precision="bf16_mixed",
        comm_overlap=CommOverlapConfig(tp_comm_overlap=True),
    )


def _expected_parameters(padded_vocab: int) -> int:
    h = HIDDEN
    per_layer = (
        2 * h  # input layernorm
        + 3 * h * h
        + 3 * h  # fused QKV
        + h * h
        + h  # attention output projection
        + 2 * h  # pre-MLP layernorm
        + h * 4 * h
        + 4 * h  # fc1
        + 4 * h * h
        + h  # fc2
    )
    # Word + learned position embeddings, layers, final layernorm; output layer tied to the embedding.
    return padded_vocab * h + SEQ * h + LAYERS * per_layer + 2 * h


def test_build_model_on_cpu_from_resolved_config(one_rank_group, cpu_only, caplog):
    cfg = _tiny_cfg()
    with caplog.at_level(logging.INFO, logger="megatron.bridge.training.setup"):
        chunks = build_model(cfg)

    (model,) = chunks
    assert isinstance(model, GPTModel)
    assert "CUDA is not available" in caplog.text
    # World size came from the initialized torch.distributed group.
    assert cfg.data_parallel_size == 1
    # The model's config is the resolved provider, with the resolved overlap flags.
    assert model.config is cfg.model
    plan = cfg.overlap_plan
    assert plan.decision("tp_comm_overlap").source == "refused"
    assert model.config.tp_comm_overlap is False
    # PP == 1: no p2p at all (megatron-core's own default for batch_p2p_comm is True).
    assert (model.config.overlap_p2p_comm, model.config.batch_p2p_comm) == (False, False)
    assert model.config.wgrad_deferral_limit == -1
    assert (cfg.ddp.overlap_grad_reduce, cfg.ddp.overlap_param_gather, cfg.ddp.bucket_size) == (
        False,
        False,
        None,
    )
    # Mixed precision reached the parameters megatron-core creates with params_dtype: every
    # parallel linear layer and the vocab embedding. (The torch LayerNorm / position embedding
    # fallbacks stay fp32 until build_model's Float16Module casts them on a GPU.)
    named = dict(model.named_parameters())
    megatron_params = {n: p for n, p in named.items() if ".linear_" in n or "word_embeddings" in n}
    assert len(megatron_params) == 1 + LAYERS * 8
    assert {p.dtype for p in megatron_params.values()} == {torch.bfloat16}
    assert sum(p.numel() for p in named.values()) == _expected_parameters(padded_vocab=1024)
    assert model.embedding.word_embeddings.weight.shape == (1024, HIDDEN)
    assert model.pre_process and model.post_process and model.share_embeddings_and_output_weights


def test_provide_builds_the_stage_asked_for(one_rank_group):
    cfg = _tiny_cfg()
    cfg.model.params_dtype = torch.float32
    cfg.model.share_embeddings_and_output_weights = False
    model = cfg.model.provide(pre_process=False, post_process=True)
    assert not hasattr(model, "embedding")
    assert model.output_layer.weight.shape == (1024, HIDDEN)


def test_build_model_initializes_userbuffers_when_tp_overlap_survives(monkeypatch, cpu_only):
    # A TP-2 model cannot be built in a 1-rank CPU process group, and Transformer Engine cannot
    # exist on a CPU machine: TE is a recording stand-in in sys.modules, and the model build is
    # replaced by a recorder that checks the userbuffers were initialized before it ran.
    calls: list[dict] = []

    def initialize_ub(shape, tp_size, use_fp8=False, ub_cfgs=None, bootstrap_backend=None):
        calls.append({"shape": shape, "tp_size": tp_size, "use_fp8": use_fp8})

    stub_transformer_engine(monkeypatch, initialize_ub)

    built = []

    def provide(self, pre_process=None, post_process=None, vp_stage=None):
        built.append((vp_stage, len(calls)))
        return torch.nn.Linear(1, 1)

    monkeypatch.setattr(GPTModelProvider, "provide", provide)
    cfg = _tiny_cfg()
    cfg.model.tensor_model_parallel_size = 2
    cfg.model.sequence_parallel = True
    cfg.model.pipeline_model_parallel_size = 2
    cfg.model.virtual_pipeline_model_parallel_size = 2
    # Two layers per pipeline rank, one per virtual stage: a layout megatron-core can build.
    cfg.model.num_layers = 4
    cfg.train.global_batch_size = None
    reset_tp_communicators()
    try:
        with mock.patch("megatron.bridge.training.comm_overlap.HAVE_TE", True):
            chunks = build_model(cfg, world_size=8)
    finally:
        reset_tp_communicators()
    assert cfg.model.tp_comm_overlap is True
    assert calls == [{"shape": [SEQ * 2, HIDDEN], "tp_size": 2, "use_fp8": False}]
    # One chunk per virtual stage, each built after the userbuffers existed.
    assert built == [(0, 1), (1, 1)] and len(chunks) == 2
