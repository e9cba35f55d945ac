"""The overlap a search tries on each layout (``megatron/bridge/search/overlap.py``): EP
all-to-all overlap where megatron-core's gate allows it, TP overlap on and off, the modes that
fix either, and the launch environment each row's overlap needs."""

from __future__ import annotations

import functools
import json

import pytest

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, main
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.search import search
from megatron.bridge.search.candidate import knob_on
from megatron.bridge.search.report import layout_label

EP = "overlap_moe_expert_parallel_comm"
TP = "tp_comm_overlap"


def _moe():
    """Qwen3-30B-A3B at 4 MoE layers."""
    return recipe_spec("qwen3_30b_a3b").changed(
        **{"model.num_layers": 4, "model.moe_layer_freq": 1}
    )


def _dense(gpu: str = "gb300"):
    """Llama-3 8B at 4 layers."""
    spec = recipe_spec("llama3_8b")
    if gpu != spec.job.gpu:
        spec = spec.with_overrides(gpu=gpu, precision="bf16")
    return spec.changed(**{"model.num_layers": 4})


@functools.cache
def _moe_search(ep_overlap: str):
    return search(_moe(), world_sizes=[8], global_batch_size=16, top=1000, ep_overlap=ep_overlap)


@functools.cache
def _dense_search(tp_overlap: str, gpu: str = "gb300"):
    return search(
        _dense(gpu), world_sizes=[8], global_batch_size=16, top=1000, tp_overlap=tp_overlap
    )


def _variants(result, knob):
    """The layouts costed both with ``knob`` on and off (their plans' jobs)."""
    by_job: dict = {}
    for c in result.ranked:
        by_job.setdefault(c.plan.job, set()).add(knob_on(c.plan, knob))
    return [job for job, seen in by_job.items() if seen == {True, False}]


def test_ep_overlap_is_searched_where_the_gate_allows_it():
    result = _moe_search("auto")
    on = [c for c in result.ranked if knob_on(c.plan, EP)]
    assert on, "no layout was costed with EP overlap"
    # Each costed with it passed megatron-core's gate (mirrored by the overlap rules) and has
    # an EP group; the gate refuses some of those tried (PP > 1 without VPP, full recompute).
    assert all(c.spec.job.ep_size > 1 for c in on)
    assert result.counts["overlap_refused"] > 0
    assert _variants(result, EP), "no layout was costed both with and without EP overlap"
    # Where the overlap hides all-to-all time, the layout with it predicts more.
    for c in on:
        twin = next(
            (
                o
                for o in result.ranked
                if o.plan.job == c.plan.job
                and knob_on(o.plan, TP) == knob_on(c.plan, TP)
                and not knob_on(o.plan, EP)
            ),
            None,
        )
        if twin is not None:
            assert c.tokens_per_s_per_gpu >= twin.tokens_per_s_per_gpu * (1 - 1e-9)


def test_ep_overlap_off_and_on_fix_it():
    off = _moe_search("off")
    assert off.ranked and not any(knob_on(c.plan, EP) for c in off.ranked)
    on = _moe_search("on")
    # Requested on every layout: those the gate refuses (EP 1 among them) are refused by it.
    assert on.ranked and all(knob_on(c.plan, EP) for c in on.ranked)
    assert on.counts["rejected"] > 0 and on.counts["overlap_refused"] == 0
    assert any("overlap_moe_expert_parallel_comm=True needs" in m for m, _n in on.refusals)


def test_tp_overlap_is_searched_on_and_off():
    result = _dense_search("auto", "h100")
    assert any(knob_on(c.plan, TP) for c in result.ranked)
    assert _variants(result, TP), "no layout was costed both with and without TP overlap"
    off = _dense_search("off", "h100")
    assert off.ranked and not any(knob_on(c.plan, TP) for c in off.ranked)
    # On: requested everywhere, run where the layout can (TP >= 2 with sequence parallelism).
    on = _dense_search("on", "h100")
    assert all(knob_on(c.plan, TP) == (c.spec.job.tp_size > 1) for c in on.ranked)


def test_each_row_shows_the_launch_environment_its_overlap_needs(capsys):
    argv = ["--recipe", "llama3_8b", "--gpu", "h100", "--precision", "bf16", "--num-layers", "4"]
    argv += ["--world-size", "8", "--global-batch-size", "16", "--top", "200", "--json"]
    assert main(["search", *argv]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    result = _dense_search("auto", "h100")
    by_label = {layout_label(c): c for c in result.ranked}
    assert len(by_label) == len(result.ranked)  # a label names one costed layout
    assert doc["top"]
    for row in doc["top"]:
        # The environment RecipeSpec.launch_env gives the row's job, as explain prints it.
        assert row["launch_env"] == by_label[row["label"]].spec.launch_env().env
    # On Hopper a TP split without EP overlap takes one hardware queue, Megatron-FSDP or no
    # split takes more: the rows differ in it.
    assert len({row["launch_env"]["CUDA_DEVICE_MAX_CONNECTIONS"] for row in doc["top"]}) > 1


def test_ep_overlap_on_a_dense_model_is_refused(capsys):
    code = main(["search", "--recipe", "llama3_8b", "--num-layers", "4", "--ep-overlap", "on"])
    assert code == EXIT_INVALID
    err = capsys.readouterr().err
    assert "--ep-overlap on" in err and "num_moe_experts" in err


@pytest.mark.parametrize(("flag", "mode"), [("--ep-overlap", "on"), ("--tp-comm-overlap", "on")])
def test_the_flag_alone_requests_the_overlap(capsys, flag, mode):
    argv = ["--recipe", "qwen3_30b_a3b", "--num-layers", "4", "--moe-layer-freq", "1"]
    argv += ["--world-size", "8", "--global-batch-size", "16", "--top", "3", "--json", flag]
    assert main(["search", *argv]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    key = "ep_overlap" if flag == "--ep-overlap" else "tp_comm_overlap"
    assert doc["overlap_search"][key] == mode
