"""apply_flex_dispatcher_backend (upstream's name): flex dispatch on an MoE model config."""

from __future__ import annotations

import logging

import pytest

from megatron.bridge.training.flex_dispatcher_backend import apply_flex_dispatcher_backend
from tests.unit_tests.conftest import make_configs

LOGGER = "megatron.bridge.training.flex_dispatcher_backend"


@pytest.mark.parametrize("backend", ["deepep", "hybridep", "ncclep"])
def test_switches_the_dispatcher_and_the_backend(backend, caplog):
    model = make_configs(ep=8, num_moe_experts=64, moe_token_dispatcher_type="alltoall").model
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        apply_flex_dispatcher_backend(model, moe_flex_dispatcher_backend=backend)
    assert (model.moe_token_dispatcher_type, model.moe_flex_dispatcher_backend) == (
        "flex",
        backend,
    )
    assert not caplog.records  # shared-expert overlap was already off: nothing to say


def test_turning_shared_expert_overlap_off_is_said(caplog):
    model = make_configs(ep=8, num_moe_experts=64, moe_token_dispatcher_type="alltoall").model
    model.moe_shared_expert_overlap = True
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        apply_flex_dispatcher_backend(model, moe_flex_dispatcher_backend="hybridep")
    assert model.moe_shared_expert_overlap is False
    assert "moe_shared_expert_overlap turned OFF" in caplog.text


def test_a_dense_model_is_left_as_it_is_with_a_warning(caplog):
    model = make_configs().model
    before = (model.moe_token_dispatcher_type, model.moe_flex_dispatcher_backend)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        apply_flex_dispatcher_backend(model, moe_flex_dispatcher_backend="deepep")
    assert (model.moe_token_dispatcher_type, model.moe_flex_dispatcher_backend) == before
    assert "no experts" in caplog.text


@pytest.mark.parametrize("backend", [None, "nccl", "DeepEP"])
def test_an_unknown_backend_is_refused_listing_the_choices(backend):
    model = make_configs(ep=8, num_moe_experts=64).model
    with pytest.raises(ValueError, match=r"choose one of \['deepep', 'hybridep', 'ncclep'\]"):
        apply_flex_dispatcher_backend(model, moe_flex_dispatcher_backend=backend)
