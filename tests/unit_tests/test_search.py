"""``bridge-overlap search``: it runs for every recipe, its layouts are the ones the layout rules
accept, its throughput bound never skips a layout that would rank, its JSON matches its schema,
and bad input is a message with exit code 2."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from importlib import resources

import jsonschema
import pytest

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, main
from megatron.bridge.cli.argument_types import world_sizes_argument
from megatron.bridge.recipes import available_recipes, recipe_spec
from megatron.bridge.search import search
from megatron.bridge.search.bound import throughput_ceiling
from megatron.bridge.search.report import SEARCH_SCHEMA_FILE
from megatron.bridge.search.space import layouts, pipeline_splits
from megatron.bridge.training.comm_overlap import check_layout
from tests.unit_tests.repo_scripts import load_script

SEARCH_PUBLISHED = load_script("benchmarks/search_published.py")


def _small(name: str) -> list[str]:
    """Flags that shrink a recipe's model to 4 layers on 8 GPUs, so its search is quick."""
    model = recipe_spec(name).job.model
    argv = ["--world-size", "8", "--global-batch-size", "16", "--num-layers", "4"]
    if isinstance(model.moe_layer_freq, tuple):
        argv += ["--moe-layer-freq", "([0]*1+[1]*3)"]
    if model.hybrid_layer_pattern is not None:
        # The pattern spells the layers: its first four, and its MTP part.
        main_pattern, *mtp = model.hybrid_layer_pattern.split("/")
        argv += ["--hybrid-layer-pattern", "/".join([main_pattern.replace("|", "")[:4], *mtp])]
    if model.csa_compress_ratios:
        # One compression ratio per layer and MTP layer: the recipe's first four and last.
        ratios = [*model.csa_compress_ratios[:4], model.csa_compress_ratios[-1]]
        argv += ["--csa-compress-ratios", str(ratios).replace(" ", "")]
    return argv


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["search", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _schema() -> dict:
    return json.loads(resources.files("megatron.bridge").joinpath(SEARCH_SCHEMA_FILE).read_text())


@pytest.mark.parametrize("name", sorted(available_recipes()))
def test_search_runs_for_every_recipe(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, err = _run(capsys, "--recipe", name, *_small(name), "--top", "3", "--json")
    assert code == EXIT_OK, err
    doc = json.loads(out)
    jsonschema.validate(doc, _schema())
    rows = doc["top"]
    assert rows and [row["band"] for row in rows] == sorted(row["band"] for row in rows)
    # Band 1 holds the fastest costed layout and every row within the band width of it.
    width = doc["bands"]["width"]
    fastest = doc["fastest_tokens_per_s_per_gpu"]
    for row in rows:
        assert row["tokens_per_s_per_gpu"] <= fastest
        assert (row["band"] == 1) == (row["tokens_per_s_per_gpu"] >= fastest * (1 - width))
    assert all(
        row["memory"]["total_bytes"] <= row["memory"]["capacity_bytes"] for row in doc["top"]
    )
    assert doc["world_sizes"] == [8] and doc["global_batch_size"] == 16


def test_when_a_rule_refuses_every_layout_the_error_quotes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Four layers leave the recipe's 44 per-layer compression ratios (43 layers and one MTP
    # layer) one per layer too many: every layout is refused by the same rule.
    code, _, err = _run(
        capsys,
        "--recipe",
        "deepseek_v4_flash",
        "--world-size",
        "8",
        "--global-batch-size",
        "16",
        "--num-layers",
        "4",
    )
    assert code == EXIT_INVALID
    assert "The most frequent refusal (" in err
    assert "csa_compress_ratios has 44 entries" in err


def test_text_output_names_the_overlap_memory_and_exposed_communication(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _run(capsys, "--recipe", "llama3_8b", *_small("llama3_8b"), "--top", "2")
    assert code == EXIT_OK, err
    assert "tokens/s/GPU" in out and "headroom" in out and "exposed communication" in out
    assert "overlap:" in out
    # stderr is no terminal here: no progress bar.
    assert err == ""


@pytest.mark.parametrize("name", ["llama3_8b", "qwen3_30b_a3b"])
def test_the_counts_account_for_every_layout_tried(name: str) -> None:
    # With the published layout costed first (and generated again by the search): each layout
    # tried ends in one count.
    result = SEARCH_PUBLISHED.published_search(recipe_spec(name), top=3)
    counts = result.counts
    assert result.published is not None
    ends = ("pruned", "rejected", "overlap_refused", "no_fit", "skipped", "costed")
    assert counts["layouts"] == sum(counts[k] for k in ends), counts
    assert counts["costed"] == len(result.ranked)


def test_published_layout_is_costed_and_ranked(capsys: pytest.CaptureFixture[str]) -> None:
    # llama3_8b's first published run: 8 GB300, fp8_cs, global batch 128.
    code, out, err = _run(capsys, "--recipe", "llama3_8b", "--top", "3", "--json")
    assert code == EXIT_OK, err
    doc = json.loads(out)
    jsonschema.validate(doc, _schema())
    published = doc["published"]
    assert published is not None and published["published"]
    assert published["layout"]["world_size"] == 8 and published["layout"]["micro_batch_size"] == 2
    top = doc["top"][0]["tokens_per_s_per_gpu"]
    gap = max(0.0, 1 - published["tokens_per_s_per_gpu"] / top)
    assert published["gap_to_top"] == pytest.approx(gap)
    assert published["rank"] >= 1 and published["band"] >= 1


def test_every_generated_layout_passes_the_layout_rules() -> None:
    spec = recipe_spec("qwen3_30b_a3b").changed(
        **{"model.num_layers": 6, "model.moe_layer_freq": 1}
    )
    seen = 0
    for index, layout in enumerate(layouts(spec.job.model, world_size=8, global_batch_size=32)):
        if index % 7:
            continue  # a spread sample: every 7th layout
        job = spec.changed(world_size=8, global_batch_size=32, **layout.changes()).job
        check_layout(job)
        seen += 1
    assert seen > 10


def test_layouts_the_rules_reject_are_not_generated() -> None:
    # 40 heads: TP 16 does not divide them, TP 8 does.
    model = dataclasses.replace(
        recipe_spec("llama3_8b").job.model, num_attention_heads=40, num_query_groups=8
    )
    tps = {layout.tp for layout in layouts(model, world_size=16, global_batch_size=16)}
    assert 8 in tps and 16 not in tps


def test_pipeline_splits_place_every_layer() -> None:
    # 61 layers on 4 ranks: no even split without counting the embedding/loss; uneven ones exist.
    splits = pipeline_splits(61, 4, None)
    assert any(s.first is not None for s in splits)
    for split in splits:
        if split.first is not None:
            middle = 61 - split.first - split.last
            assert middle % 2 == 0 and split.first <= middle // 2 and split.last <= middle // 2


def test_throughput_bound_is_above_every_prediction() -> None:
    spec = recipe_spec("qwen3_30b_a3b").changed(
        **{"model.num_layers": 8, "model.moe_layer_freq": 1}
    )
    result = search(spec, world_sizes=[16], global_batch_size=64, top=1000, refined=1000)
    assert len(result.ranked) > 20
    for candidate in result.ranked:
        assert throughput_ceiling(candidate.plan) >= candidate.tokens_per_s_per_gpu * (1 - 1e-9)


def test_top_rows_are_exact_against_costing_everything() -> None:
    # The bound may skip only what cannot enter the top: with it and without it the best agree.
    spec = recipe_spec("llama3_8b").changed(**{"model.num_layers": 8})
    quick = search(spec, world_sizes=[8], global_batch_size=32, top=3)
    full = search(spec, world_sizes=[8], global_batch_size=32, top=10_000, refined=10_000)
    assert quick.counts["skipped"] > 0
    # The same rows in the same order: the bands shown, and the simplest of each, are complete.
    assert [c.key for c in quick.ranked[:3]] == [c.key for c in full.ranked[:3]]
    assert [c.band for c in quick.ranked[:3]] == [c.band for c in full.ranked[:3]]


@pytest.mark.parametrize(
    ("text", "sizes"),
    [("256", (256,)), ("64:256", (64, 128, 256)), ("8,16,8", (8, 16)), ("24:100", (24, 48, 96))],
)
def test_world_size_forms(text: str, sizes: tuple[int, ...]) -> None:
    assert world_sizes_argument(text) == sizes


@pytest.mark.parametrize("text", ["abc", "0", "256:64", "1:100000", "8,", "-8"])
def test_bad_world_sizes_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        world_sizes_argument(text)


def test_bad_world_size_on_the_command_line_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--recipe", "llama3_8b", "--world-size", "256:64")
    assert code == EXIT_INVALID and "--world-size" in err and "Traceback" not in err


def test_model_flags_without_a_global_batch_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--num-layers", "4", "--world-size", "8")
    assert code == EXIT_INVALID and "--global-batch-size" in err


def test_nothing_fits_exits_2_with_the_counts(capsys: pytest.CaptureFixture[str]) -> None:
    # Llama-3.1 405B on 2 H100: no layout holds its weights.
    argv = ["--recipe", "llama31_405b", "--gpu", "h100", "--precision", "bf16"]
    code, out, err = _run(capsys, *argv, "--world-size", "2", "--global-batch-size", "2", "--json")
    assert code == EXIT_INVALID
    assert "no layout" in err and "memory" in err
    assert json.loads(out)["exit_code"] == EXIT_INVALID
    # Every layout tried is accounted for: refused by a rule or above the GPU's memory.
    counts = re.search(
        r"(\d+) layouts tried, (\d+) refused by a layout rule, (\d+) above the GPU's memory", err
    )
    assert counts is not None, err
    tried, refused, above = map(int, counts.groups())
    assert tried > 0 and tried == refused + above


def test_layout_flags_are_not_search_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--recipe", "llama3_8b", "--tp", "2")
    assert code == EXIT_INVALID and "--tp" in err


def test_the_picture_holds_the_digest_of_what_it_draws(tmp_path) -> None:
    # matplotlib is a dev dependency (the plot extra): the picture is drawn, never skipped.
    from megatron.bridge.search.plot import plot_search, search_picture
    from megatron.bridge.training.estimate_plot import picture_digest

    spec = recipe_spec("llama3_8b").changed(world_size=8, global_batch_size=16)
    result = search(spec, world_sizes=(8,), global_batch_size=16, top=3)
    picture = search_picture(result, title="llama3_8b")
    assert len(picture["points"]) == len(result.ranked)
    assert picture["top"]["at"] == picture["points"][0]
    path = plot_search(result, tmp_path / "search.png", title="llama3_8b")
    png_description = load_script("scripts/render_docs.py").png_description
    assert png_description(path) == picture_digest(picture)
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        plot_search(result, tmp_path / "search.jpg")
