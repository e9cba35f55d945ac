"""Hybrid layer patterns on a pipeline (megatron/bridge/training/pipeline_layout.py).

A hybrid (Mamba) model places its layers by its ``hybrid_layer_pattern``: megatron-core's
``hybrid_layer_allocation.select_pipeline_segment`` picks each model chunk's layers while
``HybridModel`` is built, on the cluster. ``hybrid_pipeline.hybrid_stage_layers`` is its
torch-free mirror; the property test runs megatron-core's own function on the same random
patterns and sizes. Only the process group is not real: a ``fake``-backend world (no GPU, no
network) stands in for the pipeline group, one rank at a time. The named cases pin the
refusals through every route a user takes (``check_layout``, ``RecipeSpec.plan``, the CLI) and
the search.
"""

from __future__ import annotations

import contextlib
import json

import pytest
import torch.distributed as dist
from hypothesis import example, given, settings
from hypothesis import strategies as st
from megatron.core.models.hybrid.hybrid_layer_allocation import select_pipeline_segment
from torch.testing._internal.distributed.fake_pg import FakeStore

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, main
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.search.space import layouts, pipeline_splits
from megatron.bridge.training.hybrid_pipeline import hybrid_stage_layers
from megatron.bridge.training.pipeline_layout import check_pipeline_layout

NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"


@contextlib.contextmanager
def pipeline_rank(pp_size: int, rank: int):
    """A ``pp_size``-rank fake world seen from ``rank``: the pipeline group megatron-core reads."""
    assert not dist.is_initialized(), "a previous test left a process group behind"
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=pp_size)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def core_layers(main_pattern: str, pp: int, vpp: int | None, first, last):
    """megatron-core's layers per ``[pp_rank][vp_stage]``, or None where it refuses the layout.

    ``get_model`` builds one chunk per virtual stage when PP > 1 and VPP is set, else one with
    ``vp_stage`` None. A layout is refused where ``select_pipeline_segment`` raises for a chunk,
    or where the chunks, in megatron-core's order (``vp_stage * PP + pp_rank``), do not hold
    the pattern's layers once each (it builds what it selects, silently).
    """
    stages = list(range(vpp)) if pp > 1 and vpp is not None else [None]
    chunks = {}
    try:
        for rank in range(pp):
            with pipeline_rank(pp, rank) as group:
                for stage in stages:
                    chunks[rank, stage] = select_pipeline_segment(
                        main_pattern,
                        group,
                        stage,
                        first_stage_layers=first,
                        last_stage_layers=last,
                        tp_group=group,
                        dp_cp_group=group,
                    )
    except ValueError:
        return None
    in_order = [chunks[rank, stage] for stage in stages for rank in range(pp)]
    offsets = [offset for _, offset in in_order]
    built = "".join("".join(layers) for layers, _ in in_order)
    running = [sum(len(layers) for layers, _ in in_order[:i]) for i in range(len(in_order))]
    if built != main_pattern.replace("|", "") or offsets != running:
        return None
    return tuple(tuple(len(chunks[rank, stage][0]) for stage in stages) for rank in range(pp))


def mirror_layers(main_pattern: str, pp: int, vpp: int | None, first, last):
    try:
        return hybrid_stage_layers(
            main_pattern,
            pp_size=pp,
            vpp_size=vpp,
            num_layers_in_first_pipeline_stage=first,
            num_layers_in_last_pipeline_stage=last,
        )
    except ValueError:
        return None


segments = st.lists(st.text(alphabet="M*-E", max_size=7), min_size=1, max_size=8)
sizes = st.one_of(st.none(), st.integers(min_value=1, max_value=10))


@settings(max_examples=300, deadline=None)
@given(
    segments=segments,
    pp=st.integers(min_value=1, max_value=4),
    vpp=st.one_of(st.none(), st.integers(min_value=1, max_value=4)),
    first=sizes,
    last=sizes,
)
@example(segments=[NANO], pp=2, vpp=2, first=None, last=None)  # the nemotron_3_nano
@example(segments=["M*"] * 8, pp=2, vpp=4, first=None, last=None)
@example(segments=["M*"] * 4, pp=2, vpp=None, first=None, last=None)  # segments dropped
@example(segments=["M*-E" * 3], pp=3, vpp=None, first=3, last=5)
def test_mirror_equals_megatron_core(segments, pp, vpp, first, last):
    pattern = "|".join(segments)
    assert mirror_layers(pattern, pp, vpp, first, last) == core_layers(
        pattern, pp, vpp, first, last
    )


# ------------------------------------------------------------------------------ named cases


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param(
            dict(num_layers=52, pp_size=2, vpp_size=2, hybrid_layer_pattern=NANO),
            "no '|' separators",
            id="vpp-without-pipes",
        ),
        pytest.param(
            dict(num_layers=52, pp_size=2, vpp_size=1, hybrid_layer_pattern=NANO),
            "1 included",
            id="vpp-1-without-pipes",
        ),
        pytest.param(
            dict(num_layers=51, pp_size=2, vpp_size=None, hybrid_layer_pattern=NANO[:-1]),
            "splits them evenly",
            id="layers-not-divisible-by-pp",
        ),
        pytest.param(
            dict(num_layers=6, pp_size=2, vpp_size=None, hybrid_layer_pattern="M*|M*|M*"),
            "not divisible by pipeline_model_parallel_size=2",
            id="segments-not-divisible-by-pp",
        ),
        pytest.param(
            dict(num_layers=8, pp_size=2, vpp_size=4, hybrid_layer_pattern="M*|M*|M*|M*"),
            "out of range",
            id="segment-index-out-of-range",
        ),
        pytest.param(
            dict(num_layers=8, pp_size=2, vpp_size=None, hybrid_layer_pattern="M*|M*|M*|M*"),
            "virtual_pipeline_model_parallel_size=2",
            id="segments-left-unbuilt",
        ),
        pytest.param(
            dict(
                num_layers=4,
                pp_size=2,
                vpp_size=None,
                hybrid_layer_pattern="M*|M*",
                num_layers_in_first_pipeline_stage=2,
            ),
            "num_layers_in_first_pipeline_stage",
            id="first-stage-with-pipes",
        ),
        pytest.param(
            dict(num_layers=40, pp_size=1, vpp_size=None, hybrid_layer_pattern=NANO),
            "spells 52 decoder layers.*num_layers=40",
            id="pattern-length-vs-num-layers",
        ),
        pytest.param(
            dict(num_layers=4, pp_size=1, vpp_size=None, hybrid_layer_pattern="/*E"),
            "spells 0 decoder layers",
            id="empty-main-pattern",
        ),
        pytest.param(
            dict(
                num_layers=52,
                pp_size=2,
                vpp_size=None,
                hybrid_layer_pattern=NANO,
                account_for_loss_in_pipeline_split=True,
            ),
            "ignores account_for_loss_in_pipeline_split",
            id="account-for-loss-ignored",
        ),
        pytest.param(
            dict(
                num_layers=2,
                pp_size=2,
                vpp_size=None,
                hybrid_layer_pattern="M|*",
                pipeline_model_parallel_layout="Et|tL",
            ),
            "ignores pipeline_model_parallel_layout",
            id="custom-layout-ignored",
        ),
    ],
)
def test_refused_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        check_pipeline_layout(**kwargs)
    assert "hybrid_layer_pattern=" in str(info.value)


@pytest.mark.parametrize(
    ("pattern", "pp", "vpp", "layers"),
    [
        (NANO, 2, None, ((26,), (26,))),
        (NANO, 4, None, ((13,), (13,), (13,), (13,))),
        ("M*|M*|M*|M*", 2, 2, ((2, 2), (2, 2))),
        # Segment i is virtual stage i // PP of rank i % PP; segments may be uneven.
        ("M|M*|M*-|M*-E/*E", 2, 2, ((1, 3), (2, 4))),
        ("M*-E", 1, None, ((4,),)),
    ],
)
def test_accepted_split(pattern, pp, vpp, layers):
    split = check_pipeline_layout(
        num_layers=len(pattern.split("/")[0].replace("|", "")),
        pp_size=pp,
        vpp_size=vpp,
        hybrid_layer_pattern=pattern,
    )
    assert split.layers == layers


def test_nemotron_3_nano_recipe_plan_refuses_vpp_without_pipes():
    spec = recipe_spec("nemotron_3_nano", pp_size=2, vpp_size=2)
    with pytest.raises(ValueError, match="select_pipeline_segment refuses"):
        spec.plan(world_size=16)
    assert recipe_spec("nemotron_3_nano", pp_size=2).plan(world_size=16) is not None


def test_nemotron_3_nano_explain_exits_two(capsys):
    argv = ["explain", "--recipe", "nemotron_3_nano", "--world-size", "16", "--pp", "2"]
    assert main([*argv, "--vpp", "2"]) == EXIT_INVALID
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "hybrid_layer_pattern" in captured.err and "virtual_pipeline" in captured.err
    assert main(["explain", "--json", *argv[1:], "--vpp", "2"]) == EXIT_INVALID
    assert "select_pipeline_segment" in json.loads(capsys.readouterr().out)["error"]
    assert main(argv) == EXIT_OK


def test_search_keeps_only_splits_the_pattern_allows():
    # Without '|' a pipeline gets no interleaving; '|' segments give the one VPP they spell.
    assert {s.vpp for s in pipeline_splits(52, 2, None, NANO)} == {None}
    assert not any(s.embedding or s.loss for s in pipeline_splits(52, 2, None, NANO))
    assert {s.vpp for s in pipeline_splits(8, 2, None, "M*|M*|M*|M*")} == {2}
    assert pipeline_splits(8, 1, None, "M*|M*|M*|M*") == ()
    spec = recipe_spec("nemotron_3_nano")
    found = list(layouts(spec.job.model, world_size=16, global_batch_size=512))
    assert any(layout.pp == 2 for layout in found)
    for layout in found:
        pattern = spec.job.model.hybrid_layer_pattern
        if layout.pp > 1:
            assert layout.split.vpp is None, layout
        hybrid_stage_layers(
            pattern,
            pp_size=layout.pp,
            vpp_size=layout.split.vpp,
            num_layers_in_first_pipeline_stage=layout.split.first,
            num_layers_in_last_pipeline_stage=layout.split.last,
        )


def test_search_refuses_a_pattern_that_disagrees_with_num_layers(capsys):
    argv = ["search", "--recipe", "nemotron_3_nano", "--world-size", "8", "--num-layers", "4"]
    assert main(argv) == EXIT_INVALID
    assert "spells 52 decoder layers" in capsys.readouterr().err
