"""Parallel-layout check (megatron/bridge/training/parallel_layout.py), against megatron-core itself.

Each rule is tested twice: our check rejects the layout with a ``ValueError`` naming the field,
and the megatron-core code that owns the rule rejects the same layout (while a neighbouring
good layout passes both), so a rule that drifts from megatron-core fails here.

Rules that megatron-core only checks once ranks exist (the rank grids, the experts per EP rank,
the context-parallel batch split) run on torch's in-process ``fake`` backend: a real
``ProcessGroup`` of any world size, rank 0, no peers. A world of 16 or 64 ranks cannot exist
on a CPU test machine any other way; everything megatron-core does with it is the real code.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st
from megatron.core import parallel_state
from megatron.core.model_parallel_config import ModelParallelConfig
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.moe.moe_layer import MoELayer
from megatron.core.transformer.transformer_block import get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import get_batch_on_this_cp_rank

# Importing fake_pg registers torch's "fake" process-group backend.
from torch.testing._internal.distributed.fake_pg import FakeStore

from megatron.bridge.recipes import gpt3_175b, llama3_70b, llama31_405b
from megatron.bridge.training.parallel_layout import (
    ParallelSizes,
    check_parallel_layout,
    data_parallel_size,
)
from tests.unit_tests.conftest import core_config, short_layout

# ---------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def fake_world(world_size: int):
    """A ``world_size``-rank world seen from rank 0, torn down (with megatron-core's state) after."""
    assert not dist.is_initialized(), "a previous test left a process group behind"
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def initialize_model_parallel(layout: dict) -> None:
    """megatron-core's ``initialize_model_parallel`` for a layout (a world must be up)."""
    vpp = layout.get("vpp_size")
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=layout["tp_size"],
        pipeline_model_parallel_size=layout["pp_size"],
        # Recipes and the CLI store VPP 1 as None ("not interleaved") before megatron-core sees it.
        virtual_pipeline_model_parallel_size=None if vpp in (None, 1) else vpp,
        context_parallel_size=layout["cp_size"],
        expert_model_parallel_size=layout.get("ep_size", 1),
        expert_tensor_parallel_size=layout.get("etp_size"),
        # Gloo groups cannot be made on the fake backend, and no test here needs them.
        create_gloo_process_groups=False,
    )


def layers_built(config: TransformerConfig) -> int:
    """Transformer layers megatron-core builds over every pipeline rank and virtual stage."""
    vpp = config.virtual_pipeline_model_parallel_size
    stages = [None] if vpp is None else list(range(vpp))
    return sum(
        get_num_layers_to_build(config, vp_stage=stage, pp_rank=rank)
        for rank in range(config.pipeline_model_parallel_size)
        for stage in stages
    )


def layout_of(world_size, tp=1, pp=1, vpp=None, cp=1, **kwargs) -> dict:
    """Keyword arguments of ``check_parallel_layout`` for a layout."""
    return dict(world_size=world_size, tp_size=tp, pp_size=pp, vpp_size=vpp, cp_size=cp, **kwargs)


# ---------------------------------------------------------------------------- our check

BAD_LAYOUTS = [
    # id, layout, message pattern (names the megatron-core field)
    (
        "dense-grid",
        layout_of(100, tp=4, pp=8),
        r"world_size=100 does not fit tensor_model_parallel",
    ),
    (
        "expert-grid-ep",
        layout_of(24, tp=2, pp=2, ep_size=4, num_moe_experts=8),
        r"expert_tensor_parallel_size \* expert_model_parallel_size \* pipeline_model_parallel_size = 2 \* 4 \* 2",
    ),
    (
        "expert-grid-etp",
        layout_of(8, tp=2, ep_size=2, etp_size=8, num_moe_experts=8),
        r"expert_tensor_parallel_size \* expert_model_parallel_size .* = 8 \* 2 \* 1",
    ),
    (
        "vpp-without-pp",
        layout_of(8, vpp=2),
        r"virtual_pipeline_model_parallel_size=2 needs pipeline",
    ),
    ("sp-without-tp", layout_of(8, sequence_parallel=True), r"sequence_parallel=True needs tensor"),
    (
        "heads",
        layout_of(10, tp=5, num_attention_heads=96),
        r"num_attention_heads=96 .* tensor_model",
    ),
    (
        "query-groups",
        layout_of(8, tp=4, num_attention_heads=48, num_query_groups=6),
        r"num_query_groups=6 must be a multiple or a divisor of tensor_model_parallel_size=4",
    ),
    ("layers-pp", layout_of(8, pp=4, num_layers=30), r"num_layers=30 does not split .* pipeline"),
    (
        "layers-vpp-80-pp4-vpp3",
        layout_of(16, pp=4, vpp=3, num_layers=80),
        r"20 layers per pipeline rank, not divisible by virtual_pipeline_model_parallel_size=3",
    ),
    (
        "layers-405b-without-embedding-and-loss",
        layout_of(64, pp=8, vpp=8, num_layers=126),
        r"num_layers=126 does not split evenly over pipeline_model_parallel_size=8",
    ),
    (
        "layers-405b-embedding-only",
        layout_of(64, pp=8, vpp=8, num_layers=126, account_for_embedding_in_pipeline_split=True),
        r"num_layers=126 \+ 1 for the embedding = 127 does not split",
    ),
    (
        "layers-vpp-with-loss",
        layout_of(16, pp=4, vpp=2, num_layers=22, account_for_loss_in_pipeline_split=True),
        r"23 does not split evenly over pipeline_model_parallel_size=4",
    ),
    ("ep-dense", layout_of(8, ep_size=2), r"expert_model_parallel_size=2 needs a MoE model"),
    (
        "experts-ep3",
        layout_of(24, ep_size=3, num_moe_experts=8),
        r"num_moe_experts=8 is not divisible by expert_model_parallel_size=3",
    ),
    (
        "experts-ep16",
        layout_of(16, ep_size=16, num_moe_experts=8),
        r"num_moe_experts=8 is not divisible by expert_model_parallel_size=16",
    ),
    (
        "cp-seq",
        layout_of(8, cp=2, seq_length=2050),
        r"seq_length=2050 .* 2 \* context_parallel_size",
    ),
    ("cp4-seq", layout_of(8, cp=4, seq_length=8196), r"seq_length=8196 .* = 8"),
    ("zero-tp", layout_of(8, tp=0), r"tensor_model_parallel_size \(tp_size\) must be >= 1"),
    ("zero-vpp", layout_of(8, pp=2, vpp=0), r"virtual_pipeline_model_parallel_size \(vpp_size\)"),
    ("zero-layers", layout_of(8, num_layers=0), r"num_layers must be >= 1"),
    ("zero-experts", layout_of(8, num_moe_experts=0), r"num_moe_experts must be >= 1"),
]


@pytest.mark.parametrize(
    ("layout", "match"), [p[1:] for p in BAD_LAYOUTS], ids=[p[0] for p in BAD_LAYOUTS]
)
def test_bad_layout_is_rejected_naming_the_field(layout, match):
    with pytest.raises(ValueError, match=match):
        check_parallel_layout(**layout)


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        (layout_of(8, tp=True), r"tensor_model_parallel_size \(tp_size\) must be an int"),
        (layout_of(8, tp=2.0), r"tensor_model_parallel_size \(tp_size\) must be an int"),
        (layout_of("8"), r"world_size must be an int"),
        (layout_of(8, etp_size=1.0), r"expert_tensor_parallel_size \(etp_size\) must be an int"),
        (layout_of(8, seq_length=2048.0), r"seq_length must be an int"),
        (layout_of(8, tp=2, sequence_parallel=1), r"sequence_parallel must be True or False"),
        (
            layout_of(8, account_for_loss_in_pipeline_split="yes"),
            r"account_for_loss_in_pipeline_split must be True or False",
        ),
    ],
)
def test_wrong_type_is_a_type_error(layout, match):
    with pytest.raises(TypeError, match=match):
        check_parallel_layout(**layout)


#: The fields of ``check_parallel_layout`` that the model config names alike.
_MODEL_FIELDS = (
    "sequence_parallel",
    "num_layers",
    "num_attention_heads",
    "num_query_groups",
    "num_moe_experts",
    "seq_length",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
)


def _recipe_layout(recipe, spec) -> dict:
    # The layout as the shipped recipe writes it onto its model, on its published GPU count.
    model = recipe().model
    fields = {name: getattr(model, name) for name in _MODEL_FIELDS}
    return {"world_size": spec.num_gpus, **short_layout(model), **fields}


@pytest.mark.parametrize(
    ("recipe", "spec", "expected"),
    [
        # TP4 SP, PP8 x VPP6, 96 layers, 1024 GPUs.
        (
            gpt3_175b.gpt3_175b,
            gpt3_175b.SPEC,
            ParallelSizes(
                data_parallel_size=32, expert_tensor_parallel_size=4, expert_data_parallel_size=None
            ),
        ),
        # TP4 SP, PP4 x VPP5, CP2, 80 layers, seq 8192, 64 GPUs.
        (
            llama3_70b.llama3_70b,
            llama3_70b.SPEC,
            ParallelSizes(
                data_parallel_size=2, expert_tensor_parallel_size=4, expert_data_parallel_size=None
            ),
        ),
        # TP8 SP, PP8 x VPP8, CP2, 126 layers + embedding + loss, 1024 GPUs.
        (
            llama31_405b.llama31_405b,
            llama31_405b.SPEC,
            ParallelSizes(
                data_parallel_size=8, expert_tensor_parallel_size=8, expert_data_parallel_size=None
            ),
        ),
    ],
    ids=["gpt3_175b", "llama3_70b", "llama31_405b"],
)
def test_shipped_recipe_layouts_pass(recipe, spec, expected):
    assert check_parallel_layout(**_recipe_layout(recipe, spec)) == expected


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        (layout_of(16, pp=4, vpp=5, num_layers=80), (4, 1, None)),
        # VPP 1 is "not interleaved", with or without a pipeline.
        (layout_of(8, vpp=1, num_layers=7), (8, 1, None)),
        # Fewer query groups than TP ranks: megatron-core replicates each group.
        (layout_of(16, tp=16, num_attention_heads=128, num_query_groups=8), (1, 16, None)),
        # MoE: dense DP 64 / (2*2) = 16; expert DP 64 / (1*8*2) = 4.
        (layout_of(64, tp=2, pp=2, ep_size=8, etp_size=1, num_moe_experts=64), (16, 1, 4)),
        # ETP defaults to TP; CP folds into the expert data-parallel size.
        (layout_of(32, tp=2, cp=2, ep_size=4, num_moe_experts=8, seq_length=4096), (8, 2, 4)),
        # Model shape unknown: only the grids are checked.
        (layout_of(12, tp=3, pp=2, vpp=7), (2, 3, None)),
    ],
)
def test_good_layout_returns_derived_sizes(layout, expected):
    sizes = check_parallel_layout(**layout)
    assert (
        sizes.data_parallel_size,
        sizes.expert_tensor_parallel_size,
        sizes.expert_data_parallel_size,
    ) == expected


def test_data_parallel_size():
    assert data_parallel_size(num_gpus=16, tp_size=2, cp_size=2, pp_size=2) == 2
    with pytest.raises(ValueError, match=r"num_gpus=12 is not divisible by .* = 8"):
        data_parallel_size(num_gpus=12, tp_size=4, cp_size=1, pp_size=2)


def test_module_imports_without_torch():
    code = (
        "import sys, megatron.bridge.training.parallel_layout; "
        "print(sorted(m for m in ('torch', 'megatron.core') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------- megatron-core agrees
# Each test: one layout megatron-core rejects (with the error it raises, matched), and a
# neighbouring layout both accept, so neither side can pass by rejecting everything.


@pytest.mark.parametrize(
    ("layout", "core_error"),
    [
        (layout_of(100, tp=4, pp=8), r"world_size \(100\) is not divisible by 32"),
        (layout_of(64, tp=4, pp=8), None),
        (
            layout_of(24, tp=2, pp=2, ep_size=4, num_moe_experts=8),
            r"world_size \(24\) is not divisible by expert_tensor_model_pipeline_parallel size \(16\)",
        ),
        (layout_of(32, tp=2, pp=2, ep_size=4, num_moe_experts=8), None),
        (
            layout_of(8, tp=2, ep_size=2, etp_size=8, num_moe_experts=8),
            r"world_size \(8\) is not divisible by expert_tensor_model_pipeline_parallel size \(16\)",
        ),
        (layout_of(16, tp=2, ep_size=2, etp_size=8, num_moe_experts=8), None),
        (
            layout_of(8, vpp=2),
            r"pipeline-model-parallel size should be greater than 1 with interleaved schedule",
        ),
        (layout_of(8, pp=2, vpp=2), None),
    ],
)
def test_core_initialize_model_parallel_agrees_on_grids(layout, core_error):
    with fake_world(layout["world_size"]):
        if core_error is None:
            sizes = check_parallel_layout(**layout)
            initialize_model_parallel(layout)
            assert sizes.data_parallel_size == parallel_state.get_data_parallel_world_size()
            assert (
                sizes.expert_tensor_parallel_size
                == parallel_state.get_expert_tensor_parallel_world_size()
            )
            if layout.get("num_moe_experts") is not None:  # dense models report None
                assert (
                    sizes.expert_data_parallel_size
                    == parallel_state.get_expert_data_parallel_world_size()
                )
        else:
            with pytest.raises(ValueError):
                check_parallel_layout(**layout)
            with pytest.raises(RuntimeError, match=core_error):
                initialize_model_parallel(layout)


@pytest.mark.parametrize(("tp", "rejected"), [(1, True), (2, False)])
def test_core_model_parallel_config_agrees_on_sequence_parallel(tp, rejected):
    layout = layout_of(8, tp=tp, sequence_parallel=True)
    if rejected:
        with pytest.raises(ValueError, match="sequence_parallel"):
            check_parallel_layout(**layout)
        with pytest.raises(
            ValueError, match="Cannot use sequence parallelism without tensor parallelism"
        ):
            ModelParallelConfig(sequence_parallel=True, tensor_model_parallel_size=tp)
    else:
        check_parallel_layout(**layout)
        ModelParallelConfig(sequence_parallel=True, tensor_model_parallel_size=tp)


@pytest.mark.parametrize(
    ("tp", "heads", "groups", "core_error"),
    [
        (
            5,
            96,
            None,
            r"num_attention_heads \(96\) must be a multiple of tensor_model_parallel_size \(5\)",
        ),
        (4, 96, None, None),
        (
            4,
            48,
            6,
            r"num_query_groups \(6\) must be a multiple or divisor of tensor_model_parallel_size \(4\)",
        ),
        (4, 64, 8, None),
        (16, 128, 8, None),
    ],
)
def test_core_transformer_config_agrees_on_heads_and_groups(tp, heads, groups, core_error):
    layout = layout_of(tp, tp=tp, num_attention_heads=heads, num_query_groups=groups)

    def build():
        return core_config(
            num_layers=2,
            hidden_size=heads * 8,
            num_attention_heads=heads,
            num_query_groups=groups,
            tensor_model_parallel_size=tp,
        )

    if core_error is None:
        check_parallel_layout(**layout)
        build()
    else:
        with pytest.raises(ValueError, match=r"num_attention_heads|num_query_groups"):
            check_parallel_layout(**layout)
        with pytest.raises(ValueError, match=core_error):
            build()


@pytest.mark.parametrize(
    ("num_layers", "pp", "vpp", "embedding", "loss", "core_error"),
    [
        # megatron-core accepts 80/PP4/VPP3 in the config and fails only when it builds.
        (80, 4, 3, False, False, (AssertionError, r"should be divisible by vp_size 3")),
        (80, 4, 5, False, False, None),
        (30, 4, None, False, False, (AssertionError, r"num_layers=30 should be divisible by")),
        (32, 4, None, False, False, None),
        (126, 8, 8, False, False, (AssertionError, r"num_layers=126 should be divisible by")),
        (126, 8, 8, True, True, None),
        # With the account_for_* flags, TransformerConfig checks at construction.
        (126, 8, 8, True, False, (ValueError, r"num_layers: 127 after enable")),
        (
            126,
            8,
            None,
            True,
            False,
            (ValueError, r"number of middle layers: 127 must be divisible"),
        ),
        (22, 4, 2, False, True, (ValueError, r"num_layers: 23 after enable")),
        (22, 4, 4, True, True, (ValueError, r"number of layers on each pipeline rank: 6")),
        (22, 4, 2, True, True, None),
    ],
)
def test_core_layer_split_agrees(num_layers, pp, vpp, embedding, loss, core_error):
    split = {
        "num_layers": num_layers,
        "account_for_embedding_in_pipeline_split": embedding,
        "account_for_loss_in_pipeline_split": loss,
    }
    layout = layout_of(pp, pp=pp, vpp=vpp, **split)

    def build():
        return layers_built(core_config(pp=pp, vpp=vpp, **split))

    if core_error is None:
        check_parallel_layout(**layout)
        # Every transformer layer is built exactly once over all ranks and virtual stages.
        assert build() == num_layers
    else:
        with pytest.raises(ValueError, match=r"num_layers|virtual_pipeline_model_parallel_size"):
            check_parallel_layout(**layout)
        error, pattern = core_error
        with pytest.raises(error, match=pattern):
            build()


@pytest.mark.parametrize(("experts", "rejected"), [(None, True), (8, False)])
def test_core_transformer_config_agrees_on_ep_without_experts(experts, rejected):
    layout = layout_of(8, ep_size=2, num_moe_experts=experts)

    def build():
        return core_config(num_layers=2, expert_model_parallel_size=2, num_moe_experts=experts)

    if rejected:
        with pytest.raises(ValueError, match="num_moe_experts"):
            check_parallel_layout(**layout)
        with pytest.raises(
            ValueError, match="num_moe_experts must be non None to use expert-parallel"
        ):
            build()
    else:
        check_parallel_layout(**layout)
        build()


@pytest.mark.parametrize(
    ("ep", "experts", "rejected"), [(16, 8, True), (3, 8, True), (8, 8, False)]
)
def test_core_moe_layer_agrees_on_experts_per_ep_rank(ep, experts, rejected):
    layout = layout_of(ep, ep_size=ep, num_moe_experts=experts)
    # The local (non-TE) MoE spec with the all-gather dispatcher builds on a CPU.
    moe_spec = get_gpt_layer_local_spec(num_experts=experts).submodules.mlp
    moe_submodules = moe_spec.keywords["submodules"]
    with fake_world(ep):
        initialize_model_parallel(layout)
        config = core_config(
            num_layers=2,
            num_moe_experts=experts,
            expert_model_parallel_size=ep,
            moe_token_dispatcher_type="allgather",
            use_cpu_initialization=True,
        )
        if rejected:
            with pytest.raises(ValueError, match="num_moe_experts"):
                check_parallel_layout(**layout)
            with pytest.raises(AssertionError) as excinfo:
                MoELayer(config, submodules=moe_submodules)
            # The assert carries no message: pin the statement that fired.
            assert "num_moe_experts % ep_size == 0" in str(excinfo.traceback[-1].statement)
        else:
            check_parallel_layout(**layout)
            assert MoELayer(config, submodules=moe_submodules).num_local_experts == experts // ep


@pytest.mark.parametrize(
    ("cp", "seq", "rejected"), [(2, 2050, True), (2, 2048, False), (4, 8196, True)]
)
def test_core_cp_batch_split_agrees_on_seq_length(cp, seq, rejected):
    # megatron-core has no config-time check: the load-balanced split in
    # get_batch_on_this_cp_rank reshapes each sequence into 2 * CP chunks, on the first batch.
    layout = layout_of(cp, cp=cp, seq_length=seq)
    batch = {"tokens": torch.arange(seq).unsqueeze(0), "cu_seqlens": None}
    with fake_world(cp):
        if rejected:
            with pytest.raises(ValueError, match="seq_length"):
                check_parallel_layout(**layout)
            with pytest.raises(RuntimeError, match=r"is invalid for input of size"):
                get_batch_on_this_cp_rank(batch, is_hybrid_cp=False, cp_group=dist.group.WORLD)
        else:
            check_parallel_layout(**layout)
            tokens = get_batch_on_this_cp_rank(
                batch, is_hybrid_cp=False, cp_group=dist.group.WORLD
            )["tokens"]
            # Rank 0 holds chunk 0 and chunk 2 * CP - 1 of the sequence.
            chunk = seq // (2 * cp)
            expected = torch.cat([torch.arange(chunk), torch.arange(seq - chunk, seq)])
            assert torch.equal(tokens[0], expected)


# ---------------------------------------------------------------------------- properties


def _verdict(call) -> Exception | None:
    try:
        call()
    except (ValueError, RuntimeError, AssertionError) as exc:
        return exc
    return None


@st.composite
def grid_layouts(draw):
    tp = draw(st.sampled_from([1, 2, 3, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 3, 4]))
    cp = draw(st.sampled_from([1, 2]))
    ep = draw(st.sampled_from([1, 2, 4, 8]))
    etp = draw(st.sampled_from([None, 1, 2, 4]))
    vpp = draw(st.sampled_from([None, 1, 2, 3]))
    # Half the worlds tile the dense grid, so the expert-grid and VPP rules are reached too.
    if draw(st.booleans()):
        world = tp * pp * cp * draw(st.integers(1, 4))
    else:
        world = draw(st.integers(1, 64))
    return layout_of(
        world, tp=tp, pp=pp, vpp=vpp, cp=cp, ep_size=ep, etp_size=etp, num_moe_experts=8
    )


@given(grid_layouts())
def test_property_grid_accepted_iff_initialize_model_parallel_accepts(layout):
    ours = _verdict(lambda: check_parallel_layout(**layout))
    with fake_world(layout["world_size"]):
        core = _verdict(lambda: initialize_model_parallel(layout))
        assert (ours is None) == (core is None), (layout, ours, core)
        if core is None:
            assert check_parallel_layout(**layout) == ParallelSizes(
                data_parallel_size=parallel_state.get_data_parallel_world_size(),
                expert_tensor_parallel_size=parallel_state.get_expert_tensor_parallel_world_size(),
                expert_data_parallel_size=parallel_state.get_expert_data_parallel_world_size(),
            )


@st.composite
def model_layouts(draw):
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 3, 4, 8]))
    return dict(
        tp=tp,
        pp=pp,
        vpp=draw(st.sampled_from([None, 2, 3, 4, 5])) if pp > 1 else None,
        sp=draw(st.booleans()),
        num_layers=draw(st.integers(1, 130)),
        heads=draw(st.sampled_from([4, 6, 8, 12, 32, 48, 64])),
        groups=draw(st.sampled_from([None, 1, 2, 3, 4, 8, 16])),
        embedding=draw(st.booleans()),
        loss=draw(st.booleans()),
    )


@given(model_layouts())
def test_property_model_shape_accepted_iff_megatron_core_builds_it(m):
    layout = layout_of(
        m["tp"] * m["pp"],
        tp=m["tp"],
        pp=m["pp"],
        vpp=m["vpp"],
        sequence_parallel=m["sp"],
        num_layers=m["num_layers"],
        num_attention_heads=m["heads"],
        num_query_groups=m["groups"],
        account_for_embedding_in_pipeline_split=m["embedding"],
        account_for_loss_in_pipeline_split=m["loss"],
    )

    def core():
        config = core_config(
            num_layers=m["num_layers"],
            pp=m["pp"],
            vpp=m["vpp"],
            account_for_embedding_in_pipeline_split=m["embedding"],
            account_for_loss_in_pipeline_split=m["loss"],
            num_attention_heads=m["heads"],
            num_query_groups=m["groups"],
            tensor_model_parallel_size=m["tp"],
            sequence_parallel=m["sp"],
        )
        assert layers_built(config) == m["num_layers"]

    ours = _verdict(lambda: check_parallel_layout(**layout))
    theirs = _verdict(core)
    assert (ours is None) == (theirs is None), (m, ours, theirs)
