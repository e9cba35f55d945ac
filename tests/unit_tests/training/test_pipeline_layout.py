"""Pipeline split (megatron/bridge/training/pipeline_layout.py), against megatron-core itself.

The torch-free mirror is held to megatron-core's own code on the same inputs:
``PipelineParallelLayerLayout`` (parsing, shape checks, ``validate_layer_layout``, decoder
layers per stage), ``TransformerConfig.__post_init__`` (first/last-stage sizes, the
``account_for_*`` split, conflicts, VPP from a layout) and ``get_num_layers_to_build`` (the
layers each pipeline rank and virtual stage builds). Named cases pin the workloads the check was
written for (DeepSeek-V3 on PP4 x VPP4, 94 layers as 10/12 on PP8); hypothesis properties cover
the rest of the space, invalid layouts included.
"""

from __future__ import annotations

import contextlib
import copy
import json

import pytest
import torch
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from megatron.core import parallel_state
from megatron.core.transformer.enums import LayerType
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
from megatron.core.transformer.transformer_block import get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.job_configs import describe_model, write_model
from megatron.bridge.training.parallel_layout import check_parallel_layout
from megatron.bridge.training.pipeline_layout import (
    check_pipeline_layout,
    parse_layout,
    stage_layers,
)
from tests.unit_tests.conftest import core_config, tiny_model
from tests.unit_tests.training.test_parallel_layout import (
    fake_world,
    initialize_model_parallel,
    layout_of,
)

DEEPSEEK_V3 = "Et*4|(t*4|)*14tmL"
DEEPSEEK_V3_LIST = (
    [["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + [["decoder", "mtp", "loss"]]
)
# 61 decoders: stage 15 (pipeline rank 3, virtual stage 3) holds the last one, the MTP layer
# and the loss.
DEEPSEEK_V3_LAYERS = [[4, 4, 4, 4]] * 3 + [[4, 4, 4, 1]]

# ---------------------------------------------------------------------------- megatron-core side


@contextlib.contextmanager
def virtual_world_size(size: int | None):
    """megatron-core's VPP world size, which ``PipelineParallelLayerLayout`` reads, then restored."""
    before = parallel_state.get_virtual_pipeline_model_parallel_world_size()
    parallel_state.set_virtual_pipeline_model_parallel_world_size(size)
    try:
        yield
    finally:
        parallel_state.set_virtual_pipeline_model_parallel_world_size(before)


def core_layers(config: TransformerConfig) -> list[list[int]]:
    """Decoder layers megatron-core builds on each [pp_rank][vp_stage] of a finalized config."""
    pp = config.pipeline_model_parallel_size
    layout = config.pipeline_model_parallel_layout
    if layout is not None:
        # transformer_block.get_num_layers_to_build reads the rank from parallel_state for a
        # layout; the layout's own method takes it.
        with virtual_world_size(config.virtual_pipeline_model_parallel_size):
            return [
                [
                    layout.get_num_layers_to_build(
                        layer_type=LayerType.decoder, vp_stage=vp, pp_rank=rank
                    )
                    for vp in range(layout.virtual_pipeline_model_parallel_size)
                ]
                for rank in range(pp)
            ]
    vpp = config.virtual_pipeline_model_parallel_size
    stages = [None] if vpp is None else list(range(vpp))
    return [
        [get_num_layers_to_build(config, vp_stage=vp, pp_rank=rank) for vp in stages]
        for rank in range(pp)
    ]


def core_split(*, num_layers, pp, vpp=None, **fields) -> list[list[int]]:
    """megatron-core's split, refused (``AssertionError``) unless it builds each layer once.

    Raises what ``TransformerConfig`` and ``get_num_layers_to_build`` raise; a layer count
    that is negative, or layers that do not add up to ``num_layers``, is a model megatron-core
    would build wrong, which the check must refuse too.
    """
    config = core_config(num_layers=num_layers, pp=pp, vpp=vpp, **fields)
    layers = core_layers(config)
    if any(n < 0 for rank in layers for n in rank) or sum(map(sum, layers)) != num_layers:
        raise AssertionError(f"megatron-core would build {layers} for num_layers={num_layers}")
    return layers


def _verdict(call):
    try:
        return call(), None
    except (ValueError, AssertionError, NotImplementedError, IndexError, RuntimeError) as exc:
        return None, exc


# ---------------------------------------------------------------------------- named workloads


@pytest.mark.parametrize("layout", [DEEPSEEK_V3, DEEPSEEK_V3_LIST], ids=["string", "list"])
@pytest.mark.parametrize("vpp", [None, 4])
def test_deepseek_v3_on_pp4_vpp4_is_accepted_with_megatron_cores_counts(layout, vpp):
    split = check_pipeline_layout(
        num_layers=61,
        pp_size=4,
        vpp_size=vpp,
        pipeline_model_parallel_layout=layout,
        mtp_num_layers=1,
    )
    config = core_config(
        num_layers=61,
        pp=4,
        vpp=vpp,
        pipeline_model_parallel_layout=copy.deepcopy(layout),
        mtp_num_layers=1,
    )
    assert split.virtual_pipeline_model_parallel_size == 4
    assert config.virtual_pipeline_model_parallel_size == 4
    assert [list(rank) for rank in split.layers] == core_layers(config) == DEEPSEEK_V3_LAYERS


def test_deepseek_v3_string_and_list_forms_parse_alike():
    assert parse_layout(DEEPSEEK_V3) == parse_layout(DEEPSEEK_V3_LIST)
    core = PipelineParallelLayerLayout.parse_str_to_list(DEEPSEEK_V3)
    assert parse_layout(DEEPSEEK_V3) == tuple(tuple(t.name for t in s) for s in core)


def test_deepseek_v3_passes_the_whole_layout_check():
    job = layout_of(
        256,
        tp=2,
        pp=4,
        ep_size=32,
        etp_size=1,
        num_layers=61,
        num_attention_heads=128,
        num_moe_experts=256,
        mtp_num_layers=1,
    )
    sizes = check_parallel_layout(**job, pipeline_model_parallel_layout=DEEPSEEK_V3)
    assert (sizes.data_parallel_size, sizes.expert_data_parallel_size) == (32, 2)
    # Without the layout, 61 layers do not split evenly over 4 pipeline ranks.
    with pytest.raises(ValueError, match=r"num_layers=61 does not split evenly over .*=4"):
        check_parallel_layout(**job)


def _first_and_last(first: int | None, last: int | None) -> dict:
    """The first and last pipeline stages' sizes, by megatron-core's field names."""
    return {
        "num_layers_in_first_pipeline_stage": first,
        "num_layers_in_last_pipeline_stage": last,
    }


def test_94_layers_as_10_and_12_on_pp8():
    stages = _first_and_last(10, 12)
    split = check_pipeline_layout(num_layers=94, pp_size=8, vpp_size=None, **stages)
    core = core_split(num_layers=94, pp=8, **stages)
    assert [list(rank) for rank in split.layers] == core == [[10]] + [[12]] * 7
    # The even split refuses it: 94 does not divide by 8.
    with pytest.raises(ValueError, match=r"num_layers=94 does not split evenly over .*=8"):
        check_pipeline_layout(num_layers=94, pp_size=8, vpp_size=None)


def _bad(id: str, layout, match: str, *, num_layers=61, pp=4, vpp=None, mtp=1):
    """A layout both checks refuse; DeepSeek-V3's 61 layers and 1 MTP layer on PP4 unless said."""
    return pytest.param(layout, num_layers, pp, vpp, mtp, match, id=id)


#: Layouts both checks refuse, with our message.
BAD_LAYOUTS = [
    _bad(
        "a-layer-missing",
        "Et*4|(t*4|)*14mL",
        r"places 60 decoder layers \(t\), but num_layers=61 needs 61",
    ),
    _bad(
        "a-layer-twice",
        "Et*4|(t*4|)*14ttmL",
        r"places 62 decoder layers \(t\), but num_layers=61 needs 61",
    ),
    _bad(
        "embedding-twice",
        "Et*4|E(t*4|)*14tmL",
        r"places the embedding \(E\) 2 times; it needs exactly 1",
    ),
    _bad(
        "stages-not-a-multiple-of-pp",
        "Et*4|(t*4|)*13tttttmL",
        r"has 15 stages, not a positive multiple of pipeline_model_parallel_size=4",
    ),
    _bad(
        "stages-not-pp-times-vpp",
        DEEPSEEK_V3,
        r"has 16 stages = pipeline_model_parallel_size 4 x 4 virtual stages, but "
        r"virtual_pipeline_model_parallel_size=2 needs 8 stages",
        vpp=2,
    ),
    _bad(
        "vpp-1-is-a-given-vpp",
        DEEPSEEK_V3,
        r"virtual_pipeline_model_parallel_size=1 needs 4 stages",
        vpp=1,
    ),
    _bad(
        "mtp-not-in-a-last-virtual-stage",
        "Ett|ttm||L",
        r"places MTP layers in stage 1 \(pipeline rank 1, virtual stage 0 of 2\)",
        num_layers=4,
        pp=2,
    ),
    _bad(
        "decoder-after-mtp",
        "Et*4|(t*4|)*14mtL",
        r"places a decoder layer \(t\) after an MTP layer \(m\)",
    ),
    _bad(
        "mtp-split-over-stages",
        "Ettm|mL",
        r"places 1 of the 2 MTP layers in stage 0",
        num_layers=2,
        pp=2,
        mtp=2,
    ),
    _bad(
        "mtp-count", DEEPSEEK_V3, r"places 1 MTP layers \(m\), but mtp_num_layers=2 needs 2", mtp=2
    ),
    _bad("no-embedding", "t*5|(t*4|)*14tmL", r"the embedding \(E\) 0 times"),
    _bad("no-loss", "Et*4|(t*4|)*14tm", r"the loss \(L\) 0 times"),
    _bad(
        "loss-not-last",
        "Et|tLm",
        r"ends with mtp: the loss \(L\) must be the last layer",
        num_layers=2,
        pp=2,
    ),
    _bad(
        "embedding-not-first",
        "tEt*3|(t*4|)*14tmL",
        r"starts with decoder: the embedding \(E\) must be the first layer",
    ),
]


@pytest.mark.parametrize(("layout", "num_layers", "pp", "vpp", "mtp", "match"), BAD_LAYOUTS)
def test_bad_layout_is_refused_by_both_naming_the_counts(layout, num_layers, pp, vpp, mtp, match):
    fields = {"pipeline_model_parallel_layout": layout, "mtp_num_layers": mtp}
    with pytest.raises(ValueError, match=match):
        check_pipeline_layout(num_layers=num_layers, pp_size=pp, vpp_size=vpp, **fields)
    with pytest.raises(AssertionError):
        core_config(num_layers=num_layers, pp=pp, vpp=vpp, **fields)


@pytest.mark.parametrize(
    ("layout", "error", "match"),
    [
        ("Et*4|t*4x|L", ValueError, r"'x' \(in stage 1, 'ttttx' once repeats are unrolled\)"),
        ([["embedding", "decoder"], ["dekoder", "loss"]], ValueError, r"'dekoder', not a"),
        ([["embedding", "decoder"], "tL"], TypeError, r"stage 1 must be a list of layer names"),
        ([["embedding", 4, "loss"]], TypeError, r"stage 0 holds 4 \(int\)"),
        (7, TypeError, r"must be a string .* or a list of stages"),
    ],
)
def test_unreadable_layout_is_refused(layout, error, match):
    with pytest.raises(error, match=match):
        parse_layout(layout)


def test_list_form_names_are_read_as_megatron_core_reads_them():
    # PipelineParallelLayerLayout strips and lower-cases each name.
    assert parse_layout([[" Embedding", "DECODER "], ["decoder", "loss"]]) == (
        ("embedding", "decoder"),
        ("decoder", "loss"),
    )


def test_encoder_parses_but_is_refused_like_megatron_core():
    layout = [["embedding", "encoder"], ["decoder", "loss"]]
    with pytest.raises(ValueError, match="encoder layer, which megatron-core's custom pipeline"):
        check_pipeline_layout(
            num_layers=1, pp_size=2, vpp_size=None, pipeline_model_parallel_layout=layout
        )
    with pytest.raises(NotImplementedError, match="Encoder layer is not supported"):
        core_config(num_layers=1, pp=2, pipeline_model_parallel_layout=layout)


@pytest.mark.parametrize(
    ("fields", "match", "core_match"),
    [
        (
            {"pipeline_model_parallel_layout": "Et|tL", "num_layers_in_first_pipeline_stage": 1},
            r"pipeline_model_parallel_layout cannot be set with num_layers_in_first",
            r"pipeline_model_parallel_layout cannot be set",
        ),
        (
            {"pipeline_model_parallel_layout": "Et|tL", "account_for_loss_in_pipeline_split": True},
            r"pipeline_model_parallel_layout cannot be set with .*"
            r"account_for_loss_in_pipeline_split=True",
            r"pipeline_model_parallel_layout cannot be set",
        ),
        (
            {
                "num_layers_in_last_pipeline_stage": 1,
                "account_for_embedding_in_pipeline_split": True,
            },
            r"num_layers_in_last_pipeline_stage=1 cannot be combined with account_for_embedding",
            r"cannot beset at the same time with account_for_embedding",
        ),
    ],
)
def test_conflicting_split_settings_are_refused_by_both(fields, match, core_match):
    with pytest.raises(ValueError, match=match):
        check_pipeline_layout(num_layers=2, pp_size=2, vpp_size=None, **fields)
    with pytest.raises(ValueError, match=core_match):
        core_config(num_layers=2, pp=2, **fields)


@pytest.mark.parametrize(
    ("num_layers", "pp", "vpp", "first", "last", "match"),
    [
        (94, 8, None, 10, 11, r"leaves 73 layers, which do not split evenly over the 6 middle"),
        (94, 8, 2, 9, 12, r"num_layers_in_first_pipeline_stage=9 is not divisible by virtual"),
        (10, 2, None, 10, None, r"leaves 0 layers for 1 middle pipeline ranks"),
        (4, 3, None, 4, 4, r"build 4 decoder layers; pipeline rank 1 would get -4 layers"),
        (10, 1, None, 3, 4, r"build 4 decoder layers, but num_layers=10 needs 10"),
        (16, 4, 2, 4, 4, None),
    ],
)
def test_first_and_last_stage_rules_agree_with_megatron_core(
    num_layers, pp, vpp, first, last, match
):
    stages = _first_and_last(first, last)

    def ours():
        return check_pipeline_layout(num_layers=num_layers, pp_size=pp, vpp_size=vpp, **stages)

    def core():
        return core_split(num_layers=num_layers, pp=pp, vpp=vpp, **stages)

    if match is None:
        assert [list(rank) for rank in ours().layers] == core()
    else:
        with pytest.raises(ValueError, match=match):
            ours()
        with pytest.raises((ValueError, AssertionError)):
            core()


def test_a_layout_on_one_pipeline_rank_is_refused_like_initialize_model_parallel():
    # TransformerConfig takes VPP 4 from the layout; initialize_model_parallel then refuses an
    # interleaved schedule without a pipeline.
    layout = "Et|t|t|tL"
    config = core_config(num_layers=4, pp=1, pipeline_model_parallel_layout=layout)
    assert config.virtual_pipeline_model_parallel_size == 4
    with pytest.raises(
        ValueError, match=r"=4 \(from pipeline_model_parallel_layout='Et\|t\|t\|tL'\) needs"
    ):
        check_parallel_layout(**layout_of(8, num_layers=4, pipeline_model_parallel_layout=layout))
    layout_args = {"tp_size": 1, "pp_size": 1, "vpp_size": 4, "cp_size": 1}
    with fake_world(8), pytest.raises(RuntimeError, match="greater than 1 with interleaved"):
        initialize_model_parallel(layout_args)


def test_layout_with_unknown_num_layers_is_still_checked():
    split = check_pipeline_layout(
        num_layers=None,
        pp_size=4,
        vpp_size=None,
        pipeline_model_parallel_layout=DEEPSEEK_V3,
        mtp_num_layers=1,
    )
    assert [list(rank) for rank in split.layers] == DEEPSEEK_V3_LAYERS
    with pytest.raises(ValueError, match="has 16 stages"):
        check_pipeline_layout(
            num_layers=None, pp_size=3, vpp_size=None, pipeline_model_parallel_layout=DEEPSEEK_V3
        )
    assert check_pipeline_layout(num_layers=None, pp_size=4, vpp_size=2).layers is None


# ---------------------------------------------------------------------------- the description


def _deepseek_model(layout) -> ModelDescription:
    return tiny_model(
        num_layers=61,
        pipeline_model_parallel_size=4,
        mtp_num_layers=1,
        pipeline_model_parallel_layout=layout,
    )


@pytest.mark.parametrize(
    "layout",
    [DEEPSEEK_V3, tuple(tuple(stage) for stage in DEEPSEEK_V3_LIST)],
    ids=["string", "list"],
)
def test_description_carries_the_layout_through_megatron_core_and_json(layout):
    model = _deepseek_model(layout)
    assert stage_layers(model) == DEEPSEEK_V3_LAYERS
    provider = GPTModelProvider(pipeline_dtype=torch.bfloat16)
    write_model(provider, model)
    expected_on_provider = layout if isinstance(layout, str) else DEEPSEEK_V3_LIST
    assert provider.pipeline_model_parallel_layout == expected_on_provider
    assert describe_model(provider) == model
    # finalize turns the layout into a PipelineParallelLayerLayout and takes VPP 4 from it;
    # the description reads back the user's form.
    provider.finalize()
    assert isinstance(provider.pipeline_model_parallel_layout, PipelineParallelLayerLayout)
    finalized = describe_model(provider)
    assert finalized.pipeline_model_parallel_layout == layout
    assert finalized.virtual_pipeline_model_parallel_size == 4
    assert stage_layers(finalized) == DEEPSEEK_V3_LAYERS
    job = JobDescription(model=model, world_size=16)
    assert JobDescription.from_dict(json.loads(json.dumps(job.to_dict()))) == job
    hash(model)  # frozen and hashable: the list form is stored as tuples


def test_description_reads_layer_types_of_a_list_layout_as_names():
    provider = GPTModelProvider(
        num_layers=2,
        pipeline_model_parallel_layout=[
            [LayerType.embedding, LayerType.decoder],
            ["decoder", "loss"],
        ],
    )
    assert describe_model(provider).pipeline_model_parallel_layout == (
        ("embedding", "decoder"),
        ("decoder", "loss"),
    )


def test_description_carries_first_and_last_stage_sizes():
    model = ModelDescription(
        num_layers=94, pipeline_model_parallel_size=8, **_first_and_last(10, 12)
    )
    provider = GPTModelProvider()
    write_model(provider, model)
    assert describe_model(provider) == model
    assert stage_layers(model) == [[10]] + [[12]] * 7
    assert stage_layers(model, pp_size=4) == [[10], [36], [36], [12]]
    with pytest.raises(ValueError, match="num_layers is None"):
        stage_layers(ModelDescription(pipeline_model_parallel_size=2))


# ---------------------------------------------------------------------------- properties

# 200 examples each under the "ci" profile (about 2 s here); HYPOTHESIS_PROFILE=dev runs more.
EXAMPLES = max(200, settings().max_examples)

_TOKENS = ["E", "t", "m", "L", "|", ",", "(", ")", "*2", "*3", "*0", "*12", "x", " "]
_PIECES = ["E", "t", "m", "L", "|", "|", ",", "t*3", "t*2", "x"]


def _group(parts: list[str], times: int) -> str:
    return "(" + "".join(parts) + f")*{times}"


# Free token soup (odd nesting, stray '*', unknown characters) and well-formed pieces with
# "(group)*n" repeats, each half the time.
layout_texts = st.one_of(
    st.lists(st.sampled_from(_TOKENS), max_size=14).map("".join),
    st.lists(
        st.one_of(
            st.sampled_from(_PIECES),
            st.builds(
                _group,
                st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4),
                st.integers(0, 3),
            ),
        ),
        max_size=8,
    ).map("".join),
)


@settings(max_examples=EXAMPLES)
@given(layout_texts)
def test_property_string_parser_is_megatron_cores(text):
    ours, our_error = _verdict(lambda: parse_layout(text))
    core, core_error = _verdict(lambda: PipelineParallelLayerLayout.parse_str_to_list(text))
    event("parsed" if core_error is None else "refused")
    assert (our_error is None) == (core_error is None), (text, our_error, core_error)
    if core is not None:
        assert ours == tuple(tuple(layer.name for layer in stage) for stage in core)


def _spell(stage: list[str], draw) -> str:
    # One stage in the string form, with runs of a layer written as x*n now and then.
    chars = {v: k for k, v in {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}.items()}
    out, i = "", 0
    while i < len(stage):
        j = i
        while j < len(stage) and stage[j] == stage[i]:
            j += 1
        run = j - i
        out += (
            f"{chars[stage[i]]}*{run}" if run > 1 and draw(st.booleans()) else chars[stage[i]] * run
        )
        i = j
    return out


@st.composite
def layouts(draw):
    """A random layout (string or list form), mostly well formed, often subtly not."""
    pp = draw(st.sampled_from([1, 2, 3, 4]))
    vpp = draw(st.sampled_from([1, 2, 3]))
    count = pp * vpp if draw(st.integers(0, 5)) else draw(st.integers(1, 9))
    stages = [["decoder"] * draw(st.integers(0, 3)) for _ in range(count)]
    if draw(st.integers(0, 19)):
        stages[0].insert(0, "embedding")
    if draw(st.integers(0, 19)):
        stages[-1].append("loss")
    mtps = draw(st.sampled_from([0, 0, 1, 2]))
    if mtps:
        # The last stage, a rank's last virtual stage or anywhere.
        last_vp = list(range(max(count - pp, 0), count))
        where = draw(
            st.sampled_from(
                [count - 1] * 2
                + [draw(st.sampled_from(last_vp))] * 2
                + [draw(st.integers(0, count - 1))] * 2
            )
        )
        # Two MTP layers go to one stage, or now and then to two (mostly last virtual stages).
        places = [where] * mtps
        if mtps == 2 and draw(st.booleans()):
            later = [s for s in last_vp if s > where] or list(range(where, count))
            places[1] = draw(st.sampled_from(later))
        for place in places:
            stage = stages[place]
            at = len(stage) - 1 if stage and stage[-1] == "loss" else len(stage)
            stage.insert(at, "mtp")
        if draw(st.booleans()):
            # No decoder after the MTP layers, so where they sit is what decides.
            for later in stages[where + 1 :]:
                later[:] = [layer for layer in later if layer != "decoder"]
    for _ in range(draw(st.sampled_from([0] * 6 + [1, 2]))):
        # A mutation: a layer added, dropped or moved to another place.
        i = draw(st.integers(0, count - 1))
        layer = draw(st.sampled_from(["embedding", "decoder", "mtp", "loss"]))
        action = draw(st.sampled_from(["add", "drop", "move"])) if stages[i] else "add"
        if action != "add":
            layer = stages[i].pop(draw(st.integers(0, len(stages[i]) - 1)))
        if action != "drop":
            j = draw(st.integers(0, count - 1))
            stages[j].insert(draw(st.integers(0, len(stages[j]))), layer)
    decoders = sum(stage.count("decoder") for stage in stages)
    num_layers = max(1, decoders + draw(st.sampled_from([0] * 8 + [1, -1])))
    actual_mtps = sum(stage.count("mtp") for stage in stages)
    mtp_num_layers = draw(st.sampled_from([actual_mtps or None] * 4 + [actual_mtps + 1, 0]))
    if draw(st.booleans()):
        layout = "|".join(_spell(stage, draw) for stage in stages)
    else:
        layout = [
            [draw(st.sampled_from([name, name.upper(), f" {name}"])) for name in stage]
            for stage in stages
        ]
    given_vpp = draw(st.sampled_from([None] * 3 + [count // pp or 1] * 2 + [vpp, 1, 2]))
    return dict(layout=layout, pp=pp, vpp=given_vpp, num_layers=num_layers, mtp=mtp_num_layers)


@settings(max_examples=EXAMPLES)
@given(layouts())
def test_property_layout_accepted_iff_megatron_core_runs_it_with_the_same_stages(case):
    def core():
        config = core_config(
            num_layers=case["num_layers"],
            pp=case["pp"],
            vpp=case["vpp"],
            pipeline_model_parallel_layout=copy.deepcopy(case["layout"]),
            mtp_num_layers=case["mtp"],
        )
        vpp = config.virtual_pipeline_model_parallel_size
        if vpp is not None and vpp > 1:
            # initialize_model_parallel, where the job starts, with the VPP the layout set.
            with fake_world(case["pp"]):
                initialize_model_parallel(
                    {"tp_size": 1, "pp_size": case["pp"], "vpp_size": vpp, "cp_size": 1}
                )
        return vpp, core_layers(config)

    def ours():
        return check_pipeline_layout(
            num_layers=case["num_layers"],
            pp_size=case["pp"],
            vpp_size=case["vpp"],
            pipeline_model_parallel_layout=case["layout"],
            mtp_num_layers=case["mtp"],
        )

    split, our_error = _verdict(ours)
    theirs, core_error = _verdict(core)
    event("accepted" if core_error is None else f"refused: {type(core_error).__name__}")
    assert (our_error is None) == (core_error is None), (case, our_error, core_error)
    if theirs is not None:
        vpp, layers = theirs
        assert split.virtual_pipeline_model_parallel_size == vpp
        assert [list(rank) for rank in split.layers] == layers


@st.composite
def stage_sizes(draw):
    """A pipeline with first/last-stage sizes, the account_for_* flags or neither."""
    size = st.one_of(st.none(), st.none(), st.integers(-1, 14))
    return dict(
        num_layers=draw(st.integers(1, 40)),
        pp=draw(st.sampled_from([1, 2, 3, 4, 6])),
        vpp=draw(st.sampled_from([None, None, 1, 2, 3])),
        first=draw(size),
        last=draw(size),
        embedding=draw(st.integers(0, 4)) == 0,
        loss=draw(st.integers(0, 4)) == 0,
    )


@settings(max_examples=EXAMPLES)
@given(stage_sizes())
# TransformerConfig builds each of these 4 layers once on PP1 x VPP2 with uneven first/last
# sizes; initialize_model_parallel, where the job starts, refuses interleaving without a
# pipeline.
@example(
    {"num_layers": 4, "pp": 1, "vpp": 2, "first": 4, "last": 2, "embedding": False, "loss": False}
)
def test_property_stage_sizes_accepted_iff_megatron_core_builds_each_layer_once(case):
    fields = dict(
        **_first_and_last(case["first"], case["last"]),
        account_for_embedding_in_pipeline_split=case["embedding"],
        account_for_loss_in_pipeline_split=case["loss"],
    )
    split, our_error = _verdict(
        lambda: check_pipeline_layout(
            num_layers=case["num_layers"], pp_size=case["pp"], vpp_size=case["vpp"], **fields
        )
    )

    def megatron_core():
        layers = core_split(num_layers=case["num_layers"], pp=case["pp"], vpp=case["vpp"], **fields)
        if case["vpp"] is not None and case["vpp"] > 1:
            # initialize_model_parallel, where the job starts, with the same interleaving.
            with fake_world(case["pp"]):
                initialize_model_parallel(
                    {"tp_size": 1, "pp_size": case["pp"], "vpp_size": case["vpp"], "cp_size": 1}
                )
        return layers

    core, core_error = _verdict(megatron_core)
    event("accepted" if core_error is None else f"refused: {type(core_error).__name__}")
    assert (our_error is None) == (core_error is None), (case, our_error, core_error)
    if core is not None:
        assert [list(rank) for rank in split.layers] == core
