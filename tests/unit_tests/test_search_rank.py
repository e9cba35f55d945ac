"""The order of a search's rows (``megatron/bridge/search/rank.py``): bands as wide as the
estimate's measured error for the model's family, the simpler layout first within a band; and
what each row says about itself (GPU count, DP, EP, headroom, band)."""

from __future__ import annotations

import dataclasses
import functools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.search import search
from megatron.bridge.search.rank import SIMPLICITY, band_width, banded, simplicity_key
from megatron.bridge.training.estimate.accuracy import measured_accuracy


def _shrunk(name: str, **changes):
    """A recipe's model at 4 layers (its MoE and hybrid patterns cut to match)."""
    spec = recipe_spec(name)
    model = spec.job.model
    fields = {"model.num_layers": 4, **changes}
    if isinstance(model.moe_layer_freq, tuple):
        fields["model.moe_layer_freq"] = 1
    if model.hybrid_layer_pattern is not None:
        fields["model.hybrid_layer_pattern"] = model.hybrid_layer_pattern.replace("|", "")[:4]
        fields["model.mtp_num_layers"] = None
    return spec.changed(**fields)


@functools.cache
def _searched(name: str):
    """A small model of ``name`` searched on 8 GPUs, its first 30 rows exact."""
    return search(_shrunk(name), world_sizes=[8], global_batch_size=16, top=30)


def test_band_width_is_the_measured_error_of_the_models_family():
    # One figure per family, read from the estimate's accuracy record, never restated here.
    for name in ("llama3_8b", "qwen3_30b_a3b", "deepseek_v3", "nemotron_3_nano"):
        model = recipe_spec(name).job.model
        width, accuracy = band_width(model)
        assert accuracy == measured_accuracy(model)
        assert width == accuracy.median_abs_error
    assert (
        _searched("llama3_8b").band_width
        == measured_accuracy(_shrunk("llama3_8b").job.model).median_abs_error
    )


@pytest.mark.parametrize("name", ["llama3_8b", "qwen3_30b_a3b", "nemotron_3_nano"])
def test_bands_are_greedy_from_the_top_and_simplest_first(name):
    result = _searched(name)
    ranked, width = result.ranked, result.band_width
    assert len(ranked) > 10
    bands = [c.band for c in ranked]
    assert bands[0] == 1 and bands == sorted(bands)
    assert set(bands) == set(range(1, bands[-1] + 1))
    for number in set(bands):
        members = [c for c in ranked if c.band == number]
        leader = max(c.tokens_per_s_per_gpu for c in members)
        # Every row of a band is within the width of its fastest; the next band's fastest is not.
        assert all(c.tokens_per_s_per_gpu >= leader * (1 - width) for c in members)
        below = [c.tokens_per_s_per_gpu for c in ranked if c.band == number + 1]
        if below:
            assert max(below) < leader * (1 - width)
        keys = [simplicity_key(c) for c in members]
        assert keys == sorted(keys)
    # The top pick is never a more complex layout tied with a simpler one.
    assert simplicity_key(ranked[0]) == min(simplicity_key(c) for c in ranked if c.band == 1)


def test_a_tie_goes_to_the_layout_without_context_parallelism():
    # Llama-3 8B's plain data-parallel layouts and its CP layouts predict within the dense
    # family's error of each other: one band, and the plain layouts first.
    ranked = _searched("llama3_8b").ranked
    band1 = [c for c in ranked if c.band == 1]
    dims = [words for words, _value in SIMPLICITY].index(
        "fewer parallel dimensions (TP, PP, CP, EP above 1)"
    )
    plain = [c for c in band1 if simplicity_key(c)[dims] == 0]
    with_cp = [c for c in band1 if c.spec.job.cp_size > 1]
    assert plain and with_cp, "the plain and the CP layouts no longer share a band"
    assert ranked[0] is plain[0]
    assert max(ranked.index(c) for c in plain) < min(ranked.index(c) for c in with_cp)


@settings(max_examples=60, deadline=None)
@given(
    speeds=st.lists(st.floats(1.0, 1e5, allow_nan=False), min_size=1, max_size=40),
    width=st.floats(0.0, 0.3),
)
def test_banded_holds_its_contract_on_any_predictions(speeds, width):
    source = _searched("llama3_8b").ranked
    candidates = [
        dataclasses.replace(
            c,
            estimate=dataclasses.replace(
                c.estimate,
                prediction=dataclasses.replace(c.estimate.prediction, tokens_per_s_per_gpu=s),
            ),
        )
        for c, s in zip(source, speeds, strict=False)
    ]
    out = banded(candidates, width)
    assert sorted(c.tokens_per_s_per_gpu for c in out) == sorted(
        c.tokens_per_s_per_gpu for c in candidates
    )
    leaders = {}
    for c in out:
        leaders.setdefault(c.band, c.tokens_per_s_per_gpu)
        leaders[c.band] = max(leaders[c.band], c.tokens_per_s_per_gpu)
    assert list(leaders) == list(range(1, len(leaders) + 1))
    for number, leader in leaders.items():
        members = [c for c in out if c.band == number]
        assert all(c.tokens_per_s_per_gpu >= leader * (1 - width) for c in members)
        if number + 1 in leaders:
            assert leaders[number + 1] < leader * (1 - width)
        assert [simplicity_key(c) for c in members] == sorted(simplicity_key(c) for c in members)


def test_each_row_names_its_gpu_count_dp_band_and_headroom(capsys):
    argv = ["--recipe", "llama3_8b", "--num-layers", "4", "--global-batch-size", "16"]
    assert main(["search", *argv, "--world-size", "8,16", "--top", "40"]) == EXIT_OK
    out = capsys.readouterr().out
    rows = re.findall(r"^#\d+ +band (\d+) +\d+ tokens/s/GPU  (\d+) GPUs DP(\d+): (.*)$", out, re.M)
    assert rows
    assert {int(gpus) for _band, gpus, _dp, _label in rows} == {8, 16}
    for _band, gpus, dp, label in rows:
        sizes = {k: int(v) for k, v in re.findall(r"\b(TP|PP|CP)(\d+)", label)}
        assert int(dp) * sizes["TP"] * sizes["PP"] * sizes["CP"] == int(gpus)
        assert re.search(r"\bEP\d+", label)
    assert out.count("(headroom ") >= len(rows)
    accuracy = measured_accuracy(recipe_spec("llama3_8b").job.model)
    assert f"Bands of {accuracy.median_abs_error:.1%}" in out
    assert main(["search", *argv, "--world-size", "8,16", "--top", "40", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["bands"]["width"] == accuracy.median_abs_error
    assert [r["band"] for r in doc["top"]] == [int(band) for band, *_ in rows[: len(doc["top"])]]
    for row in doc["top"]:
        lay = row["layout"]
        assert lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] == lay["world_size"]
        assert lay["ep"] >= 1 and isinstance(row["memory"]["headroom_bytes"], int)


def test_a_tie_goes_to_the_layout_whose_tp_stays_inside_an_nvlink_domain():
    # Llama-3 70B at global batch 128 on 16384 H100 (64 tokens per GPU): TP16 across two 8-GPU
    # NVLink domains predicts within the dense family's error of TP8 layouts; the band puts
    # every layout with TP inside a domain first.
    spec = recipe_spec("llama3_70b")
    ranked = search(spec, world_sizes=[16384], global_batch_size=spec.job.global_batch_size).ranked
    band1 = [c for c in ranked if c.band == 1]
    inside = [c for c in band1 if c.spec.job.tp_size <= 8]
    across = [c for c in band1 if c.spec.job.tp_size > 8]
    assert inside and across, "the TP8 and TP16 layouts no longer share a band"
    assert max(ranked.index(c) for c in inside) < min(ranked.index(c) for c in across)
