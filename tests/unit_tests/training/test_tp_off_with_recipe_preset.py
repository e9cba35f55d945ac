"""``tp_comm_overlap=False`` on a request whose preset a recipe chose automatically: a note, not a
warning, so ``strict=True`` accepts it; a preset the user gave is still warned about (rules/tp)."""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.recipes import gpt3_175b
from megatron.bridge.training.comm_overlap import (
    OverlapRefusedError,
    plan_comm_overlap,
    userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
)


def _recipe_request_and_job():
    spec = gpt3_175b.spec()
    request = spec.request()
    assert request.preset_chosen_by is not None  # the recipe chose its preset itself
    return request, spec.job_on()


def _tp_overlap_off(**changes):
    """The recipe's request with tp_comm_overlap=False and ``changes``, finalized, and its job."""
    request, job = _recipe_request_and_job()
    off = dataclasses.replace(request, tp_comm_overlap=False, **changes)
    off.finalize()
    return off, job


@pytest.mark.parametrize("strict", [False, True])
def test_turning_off_tp_overlap_on_a_recipe_is_accepted_with_a_note(strict):
    off, job = _tp_overlap_off(strict=strict)
    plan = plan_comm_overlap(off, job)
    assert plan.value("tp_comm_overlap") is False
    assert not [w for w in plan.warnings if "preset" in w]
    assert any("goes unused (it was chosen automatically" in note for note in plan.notes)


def test_a_preset_the_user_gave_with_tp_overlap_off_is_still_a_mistake_under_strict():
    users, job = _tp_overlap_off(
        tp_comm_overlap_cfg=userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
        preset_chosen_by=None,
        strict=True,
    )
    with pytest.raises(OverlapRefusedError, match="preset is ignored"):
        plan_comm_overlap(users, job)
