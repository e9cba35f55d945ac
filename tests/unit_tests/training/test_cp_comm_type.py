"""CP's sequence exchange (``cp_comm_type``): megatron-core's and Transformer Engine's rules on it,
what the estimate charges for each exchange, and the tiny model ``--tiny`` builds for it."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import torch
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.check.layout import Layout
from megatron.bridge.check.tiny import tiny_model
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.comm_overlap.rules import check_layout
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules import check_model
from tests.unit_tests.conftest import h100_job
from tests.unit_tests.jobs import dense_model

# --- megatron-core's rules ---------------------------------------------------------------------

_DSA = {
    "num_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "context_parallel_size": 2,
    "bf16": True,
    "add_bias_linear": False,
    "experimental_attention_variant": "dsa",
}


@pytest.mark.parametrize(
    "kind",
    [None, "p2p", "allgather", "all_gather", ("all_gather", "p2p"), ("allgather", "all_gather")],
)
def test_sparse_attention_exchange_rule_is_megatron_cores(kind):
    ours = megatron_core = None
    try:
        check_model(ModelDescription(**_DSA, cp_comm_type=kind))
    except ValueError as exc:
        ours = exc
    value = list(kind) if isinstance(kind, tuple) else kind
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            TransformerConfig(**_DSA, cp_comm_type=value, pipeline_dtype=torch.bfloat16)
        except (AssertionError, ValueError) as exc:
            megatron_core = exc
    assert (ours is None) == (megatron_core is None), (ours, megatron_core)


# --- Transformer Engine's rules, on GPT-OSS (learnable softmax, 64 heads in 8 groups) ----------


def _gpt_oss(cp: int, **model_changes):
    job = recipe_spec("gpt_oss_120b").job
    model = dataclasses.replace(job.model, context_parallel_size=cp, **model_changes)
    return dataclasses.replace(job, model=model)


def test_gpt_oss_runs_cp_over_the_all_to_all_upstream_sets():
    # Megatron-Bridge recipes/gpt_oss/h100/gpt_oss.py sets cp_comm_type = "a2a".
    assert recipe_spec("gpt_oss_120b").job.model.cp_comm_type == "a2a"
    check_layout(_gpt_oss(2))
    check_layout(_gpt_oss(1, cp_comm_type="p2p"))
    check_layout(_gpt_oss(2, cp_comm_type="all_gather", softmax_type="vanilla"))
    check_layout(_gpt_oss(2, cp_comm_type="p2p", softmax_type="vanilla", window_size=None))


def test_a_sliding_window_under_cp_needs_the_all_to_all_or_the_all_gather():
    # GPT-OSS's window (127, 0) on every other layer (window_attn_skip_freq 2: layers 1, 3, ...),
    # with the vanilla softmax so that only the window's rule applies.
    with pytest.raises(ValueError, match=r"cp_comm_type 'p2p' on a layer with the sliding"):
        check_layout(_gpt_oss(2, cp_comm_type="p2p", softmax_type="vanilla"))
    # p2p on the full-attention layers only (index 1, 3, ...): Transformer Engine runs it.
    per_layer = ("all_gather", "p2p") * 18
    check_layout(_gpt_oss(2, cp_comm_type=per_layer, softmax_type="vanilla"))
    swapped = ("p2p", "all_gather") * 18
    with pytest.raises(ValueError, match=r"\(layer 1, 18 such layer\(s\)\)"):
        check_layout(_gpt_oss(2, cp_comm_type=swapped, softmax_type="vanilla"))
    with pytest.raises(ValueError, match=r"cp_comm_type 'a2a\+p2p' on a layer with the sliding"):
        check_layout(_gpt_oss(2, cp_comm_type="a2a+p2p", softmax_type="vanilla"))
    # A window that limits nothing ((-1, 0) is the causal mask) is not a sliding window.
    check_layout(_gpt_oss(2, cp_comm_type="p2p", softmax_type="vanilla", window_size=(-1, 0)))


@pytest.mark.parametrize(
    ("window", "skip"),
    [
        (None, None),
        ((127, 0), None),
        ((127, 0), 2),
        ((4096, 0), 3),
        ((127, 0), (1, 0, 0, 1, 1, 0)),
        ((-1, 0), 2),
    ],
)
def test_which_layers_use_the_window_is_megatron_cores_rule(window, skip):
    from megatron.core.transformer.utils import is_layer_window_attention

    model = ModelDescription(num_layers=6, window_size=window, window_attn_skip_freq=skip)
    upstream_skip = list(skip) if isinstance(skip, tuple) else skip
    assert [model.uses_window(i) for i in range(6)] == [
        is_layer_window_attention(window, upstream_skip, i + 1) for i in range(6)
    ]


@pytest.mark.parametrize("kind", ["p2p", "all_gather", ("a2a",) * 35 + ("p2p",)])
def test_a_softmax_with_sinks_under_cp_needs_the_all_to_all_on_every_layer(kind):
    with pytest.raises(ValueError, match=r"softmax_type='learnable' .* only in cuDNN fused"):
        check_layout(_gpt_oss(2, cp_comm_type=kind))


def test_the_all_to_all_splits_heads_and_groups_over_cp():
    # 8 query groups on a TP rank: CP 16 cannot split them.
    with pytest.raises(ValueError, match=r"64 attention heads and 8 query groups"):
        check_layout(_gpt_oss(16))
    check_layout(_gpt_oss(8))


def test_an_exchange_transformer_engine_does_not_know_is_refused():
    with pytest.raises(ValueError, match=r"cp_comm_type 'ring'"):
        check_layout(_gpt_oss(2, cp_comm_type="ring", softmax_type="vanilla"))


# --- the estimate ------------------------------------------------------------------------------

MODEL = dense_model(num_layers=8, vocab_size=1024)
"""Llama-3 8B's layers (32 heads, 8 query groups of 128), eight of them."""


def _estimate(cp: int, kind=None):
    job = h100_job(dataclasses.replace(MODEL, cp_comm_type=kind), tp_size=1, cp_size=cp, dp_size=2)
    return estimate_step(plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False), job))


def _cp(estimate) -> dict[str, tuple[float, str | None]]:
    return {
        c.collective: (c.bytes_per_gpu_per_step, c.hidden_by)
        for c in estimate.communication
        if c.mode == "cp"
    }


@pytest.mark.parametrize("cp", [2, 4])
def test_the_all_to_all_moves_qkvo_and_nothing_hides_it(cp):
    ring = _cp(_estimate(cp))
    a2a = _cp(_estimate(cp, "a2a"))
    assert list(ring) == ["K/V ring exchange (p2p)"] and list(a2a) == ["Q/K/V/O all-to-all (a2a)"]
    ring_bytes, ring_hidden = ring["K/V ring exchange (p2p)"]
    a2a_bytes, a2a_hidden = a2a["Q/K/V/O all-to-all (a2a)"]
    assert ring_hidden == "ring attention" and a2a_hidden is None
    # Per layer, ring: 3 (CP-1) K/V chunks of 2 k; all-to-all: (5 q + 4 k) x (CP-1)/CP.
    q, k = 32 * 128, 8 * 128
    assert a2a_bytes / ring_bytes == pytest.approx((5 * q + 4 * k) / (cp * 3 * 2 * k))


def test_a_per_layer_exchange_splits_the_layers():
    half = ("a2a", "p2p") * 4
    mixed = _cp(_estimate(2, half))
    ring = _cp(_estimate(2))["K/V ring exchange (p2p)"][0]
    a2a = _cp(_estimate(2, "a2a"))["Q/K/V/O all-to-all (a2a)"][0]
    assert mixed["K/V ring exchange (p2p)"][0] == pytest.approx(ring / 2)
    assert mixed["Q/K/V/O all-to-all (a2a)"][0] == pytest.approx(a2a / 2)


def test_after_the_all_to_all_a_rank_runs_the_whole_causal_call_on_its_heads():
    # The same keys per call as without CP, on 1 / CP of the heads: half the time at CP 2.
    whole = _estimate(1).step.attention_seconds
    assert _estimate(2, "a2a").step.attention_seconds == pytest.approx(whole / 2)
    # The ring's shorter calls run slower per FLOP.
    assert _estimate(2).step.attention_seconds > whole / 2


# --- the tiny model ----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "groups"), [(None, 2), ("p2p", 2), ("a2a", 4), ("a2a+p2p", 4)])
def test_the_tiny_model_gives_the_all_to_all_heads_to_split(kind, groups):
    model = dataclasses.replace(MODEL, cp_comm_type=kind)
    layout = Layout(tp=2, pp=1, vpp=None, cp=2, dp=1, ep=1, etp=None)
    fields, _notes = tiny_model(model, layout)
    assert fields["num_query_groups"] == groups
    assert fields["num_attention_heads"] == 2 * groups


# --- the explain flag ----------------------------------------------------------------------------


def _cp_entries(capsys, *flags: str) -> tuple[int, list[str], str]:
    from megatron.bridge.cli import main

    code = main(["explain", "--recipe", "llama3_8b", *flags, "--json"])
    doc = json.loads(capsys.readouterr().out)
    if code != 0:
        return code, [], doc["error"]
    comm = doc["estimate"]["communication"]
    return code, [c["collective"] for c in comm if c["mode"] == "cp"], ""


def test_the_cp_comm_type_flag_sets_the_exchange(capsys):
    assert _cp_entries(capsys, "--cp", "2") == (0, ["K/V ring exchange (p2p)"], "")
    assert _cp_entries(capsys, "--cp", "2", "--cp-comm-type", "a2a") == (
        0,
        ["Q/K/V/O all-to-all (a2a)"],
        "",
    )
    # One type per layer, as Megatron-LM's --cp-comm-type takes them.
    per_layer = ["a2a"] * 16 + ["p2p"] * 16
    code, entries, _ = _cp_entries(capsys, "--cp", "2", "--cp-comm-type", *per_layer)
    assert code == 0 and len(entries) == 2
    code, _, error = _cp_entries(capsys, "--cp", "2", "--cp-comm-type", "a2a", "p2p")
    assert code == 2 and "cp_comm_type has 2 entries for num_layers=32" in error
    code, _, error = _cp_entries(capsys, "--cp-comm-type", "a2a")
    assert code == 2 and "--cp-comm-type would have no effect" in error
