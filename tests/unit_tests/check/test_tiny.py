"""Tests for megatron/bridge/check/tiny.py: ``--tiny`` shrinks any model onto the fitted layout.

Every case is judged twice: by the torch-free layout check the plan runs (``check_layout``) and
by megatron-core's own ``TransformerConfig`` (which parses a custom pipeline layout itself).
The models: the shipped recipes, and hand-built descriptions with MoE, MLA, MTP, a custom
layout string, a list layout, first/last stage sizes, the embedding and loss counted, and
hybrid patterns with and without stage boundaries.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from megatron.bridge.check import Layout, fit_layout, tiny_model
from megatron.bridge.recipes import RECIPES, recipe_spec
from megatron.bridge.recipes.nemotron_3_nano import NANO_MODEL
from megatron.bridge.training.comm_overlap import check_layout
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.job_configs import _activation
from megatron.bridge.training.pipeline_layout import parse_layout, stage_layers
from tests.unit_tests.conftest import layout_fields
from tests.unit_tests.jobs import model_defaults, recipe_job_model

DEEPSEEK_LIKE = dataclasses.replace(
    recipe_spec("deepseek_v3", gpu="gb200").job.model,
    fp8=None,
    moe_token_dispatcher_type="alltoall",
    virtual_pipeline_model_parallel_size=None,
)
"""The DeepSeek-V3 recipe's GB200 run in BF16 with the all-to-all dispatcher: PP4 x VPP4 (from
the layout) x EP64, with its published layout."""

DEEPSEEK_LIST_LAYOUT = dataclasses.replace(
    DEEPSEEK_LIKE,
    pipeline_model_parallel_layout=(
        ("embedding", *["decoder"] * 4),
        *[("decoder",) * 4] * 14,
        ("decoder", "mtp", "loss"),
    ),
)
"""The same in megatron-core's list form."""


def first_last_stages(first: int, last: int) -> dict:
    """Model fields for a first pipeline stage of ``first`` layers and a last one of ``last``;
    megatron-core refuses them with the embedding or the loss counted as a layer, so neither is.
    """
    return {
        "account_for_embedding_in_pipeline_split": False,
        "account_for_loss_in_pipeline_split": False,
        "num_layers_in_first_pipeline_stage": first,
        "num_layers_in_last_pipeline_stage": last,
    }


FIRST_LAST = recipe_job_model(
    "qwen3_235b_a22b",
    moe_token_dispatcher_type="alltoall",
    sequence_parallel=True,
    **first_last_stages(10, 12),
    **layout_fields(tp_size=4, pp_size=8, vpp_size=None, ep_size=8),
)
"""The Qwen3-235B recipe's model in BF16 with the all-to-all dispatcher: 94 layers on PP8 as
10 / 12 x 6 / 12."""

FIRST_LAST_VPP = dataclasses.replace(
    FIRST_LAST, num_layers=96, **first_last_stages(8, 16), **layout_fields(vpp_size=2)
)
"""First and last stage sizes with interleaving (each divisible by VPP)."""

HYBRID_PIPES = dataclasses.replace(
    NANO_MODEL,
    num_layers=16,
    moe_token_dispatcher_type="alltoall",
    hybrid_layer_pattern="MEME|M*ME|MEME|M*ME/*E",
    mtp_num_layers=1,
    sequence_parallel=True,
    **layout_fields(tp_size=2, pp_size=2, vpp_size=2, ep_size=8),
)
"""Nemotron 3 Nano's model cut to a 16-layer hybrid: Mamba, attention and MoE layers, '|' stage boundaries, one MTP
pattern."""

HYBRID_PLAIN = dataclasses.replace(
    HYBRID_PIPES,
    hybrid_layer_pattern="M-M-M*-M-M*-M-",
    num_layers=14,
    **model_defaults(
        "num_moe_experts",
        "moe_ffn_hidden_size",
        "moe_shared_expert_intermediate_size",
        "moe_router_topk",
        "mtp_num_layers",
        "mamba_num_heads",
    ),
    **layout_fields(ep_size=1, vpp_size=None),
)
"""A dense hybrid pattern without stage boundaries (megatron-core's even slicing over PP): no
experts, no MTP, megatron-core's Mamba head count."""

COUNTED = recipe_spec("llama31_405b").job.model
"""Llama-3.1 405B's split: the embedding and the loss count as layers."""

HAND_BUILT = {
    "deepseek_string_layout": DEEPSEEK_LIKE,
    "deepseek_list_layout": DEEPSEEK_LIST_LAYOUT,
    "first_last": FIRST_LAST,
    "first_last_vpp": FIRST_LAST_VPP,
    "hybrid_pipes": HYBRID_PIPES,
    "hybrid_plain": HYBRID_PLAIN,
    "counted": COUNTED,
}
MODELS = {name: recipe_spec(name).job.model for name in RECIPES} | HAND_BUILT
WORLDS = (1, 2, 4, 8)


def _fitted(model: ModelDescription, world: int) -> tuple[Layout, JobDescription, list[str]]:
    """The tiny job ``--tiny`` builds for ``model`` on ``world`` ranks, and the notes."""
    job = JobDescription(model=model, world_size=world)
    sizes = {
        "tp": job.tp_size,
        "pp": job.pp_size,
        "vpp": job.vpp_size,
        "cp": job.cp_size,
        "ep": job.ep_size,
        "etp": model.expert_tensor_parallel_size,
    }
    layout, notes = fit_layout(world_size=world, recipe=sizes, overrides={}, tiny=True)
    fields, tiny_notes = tiny_model(model, layout)
    tiny = job.replace(
        micro_batch_size=1,
        global_batch_size=layout.dp * 2 * layout.pp,
        **{f"model.{k}": v for k, v in fields.items()},
        # RecipeSpec.changed: sequence parallelism follows TP.
        **{"model.sequence_parallel": layout.tp > 1},
    )
    return layout, tiny, notes + tiny_notes


def _megatron_core_accepts(model: ModelDescription) -> None:
    """Build megatron-core's TransformerConfig from the description (raises what it raises)."""
    import torch
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig

    if model.moe and (model.fp8 or model.fp4):
        # On this CPU machine (no Transformer Engine) the check builds an MoE recipe in bf16:
        # megatron-core refuses MoE in FP8/FP4 without TE >= 1.7 (check/config.py says so).
        model = dataclasses.replace(model, fp8=None, fp4=None, bf16=True)
    config_class = MLATransformerConfig if model.multi_latent_attention else TransformerConfig
    names = {f.name for f in dataclasses.fields(config_class)}
    fields = {}
    for f in dataclasses.fields(model):
        value = getattr(model, f.name)
        if f.name not in names or f.name in ("activation_func", "cuda_graph_modules"):
            continue
        if f.name == "pipeline_model_parallel_layout" and isinstance(value, tuple):
            value = [list(stage) for stage in value]
        elif isinstance(value, tuple):
            value = list(value)
        fields[f.name] = value
    fields["pipeline_dtype"] = torch.bfloat16
    # The callable the job writes (GPT-OSS's quick_gelu is compared with by identity).
    fields["activation_func"] = _activation(model.activation_func)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config_class(**fields)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_tiny_model_is_valid_on_every_fitted_layout(name, world):
    layout, tiny, _ = _fitted(MODELS[name], world)
    check_layout(tiny)
    _megatron_core_accepts(tiny.model)
    model = tiny.model
    assert model.hidden_size <= 256 and model.vocab_size == 1000
    assert (tiny.tp_size, tiny.pp_size, tiny.vpp_size, tiny.ep_size) == (
        layout.tp,
        layout.pp,
        layout.vpp,
        layout.ep,
    )
    if model.hybrid_layer_pattern is None:
        # Every chunk builds at least one decoder layer, and the chunks hold them all once.
        layers = stage_layers(model)
        assert sum(map(sum, layers)) == model.num_layers
        assert min(min(rank) for rank in layers) >= 0
        assert model.num_layers <= 3 * layout.pp * layout.chunks


def test_deepseek_string_layout_is_rebuilt_in_string_form_on_pp2_vpp2():
    layout, tiny, notes = _fitted(DEEPSEEK_LIKE, 4)
    assert layout == Layout(tp=1, pp=2, vpp=2, cp=1, dp=2, ep=2, etp=1)
    model = tiny.model
    assert model.pipeline_model_parallel_layout == "Et|t|t|tmL"
    assert (model.num_layers, model.mtp_num_layers) == (4, 1)
    # Dense first layers stay first; experts split over EP 2; MLA stays on, shrunk.
    assert model.moe_layer_freq == (0, 1, 1, 1)
    assert (model.num_moe_experts, model.moe_router_topk) == (8, 2)
    assert model.multi_latent_attention and (model.kv_lora_rank, model.q_lora_rank) == (32, 32)
    assert notes == []


def test_deepseek_list_layout_stays_a_list_and_matches_the_string_one():
    _, from_string, _ = _fitted(DEEPSEEK_LIKE, 8)
    _, from_list, _ = _fitted(DEEPSEEK_LIST_LAYOUT, 8)
    assert isinstance(from_list.model.pipeline_model_parallel_layout, tuple)
    assert parse_layout(from_list.model.pipeline_model_parallel_layout) == parse_layout(
        from_string.model.pipeline_model_parallel_layout
    )


def test_first_and_last_stage_sizes_stay_set_with_one_layer_per_chunk():
    _, tiny, _ = _fitted(FIRST_LAST_VPP, 8)
    model = tiny.model
    assert (model.num_layers_in_first_pipeline_stage, model.num_layers_in_last_pipeline_stage) == (
        2,
        2,
    )
    assert stage_layers(model) == [[1, 1], [1, 1]]


def test_first_and_last_stage_sizes_are_dropped_with_a_note_on_one_pipeline_rank():
    layout, tiny, notes = _fitted(FIRST_LAST, 2)
    assert layout.pp == 1
    assert tiny.model.num_layers_in_first_pipeline_stage is None
    assert any(n.startswith("num_layers_in_first_pipeline_stage=10") for n in notes), notes


def test_counted_embedding_and_loss_keep_a_decoder_beside_them():
    # The shipped llama31_405b tiny layout failed here: 4 layers + embedding + loss = 6 over
    # PP2 x VPP2.
    _, tiny, _ = _fitted(COUNTED, 4)
    assert tiny.model.num_layers == 6
    assert stage_layers(tiny.model) == [[1, 2], [2, 1]]


def test_hybrid_pattern_keeps_each_kind_of_layer_per_chunk():
    layout, tiny, _ = _fitted(HYBRID_PIPES, 4)
    assert (layout.pp, layout.vpp) == (2, 2)
    model = tiny.model
    assert model.hybrid_layer_pattern == "ME*|ME*|ME*|ME*/*E"
    assert model.num_layers == 12
    assert model.mamba_num_groups == layout.tp and model.mamba_num_heads % layout.tp == 0


def test_hybrid_pattern_without_boundaries_splits_evenly_over_pp():
    layout, tiny, _ = _fitted(HYBRID_PLAIN, 4)
    assert (layout.tp, layout.pp, layout.vpp) == (2, 2, None)
    assert tiny.model.hybrid_layer_pattern == "M-*M-*"
    assert tiny.model.num_layers % layout.pp == 0


@pytest.mark.parametrize(
    "model",
    [
        # One layer per chunk without counting the embedding and loss (the former tiny model).
        dataclasses.replace(
            COUNTED,
            num_layers=4,
            tensor_model_parallel_size=2,
            pipeline_model_parallel_size=2,
            virtual_pipeline_model_parallel_size=2,
            context_parallel_size=1,
        ),
        # The recipe's layout string with fewer layers but not rebuilt.
        dataclasses.replace(DEEPSEEK_LIKE, num_layers=4),
    ],
)
def test_both_judges_refuse_a_split_that_is_not_rebuilt(model):
    job = JobDescription(model=model, world_size=8)
    with pytest.raises(ValueError):
        check_layout(job)
    with pytest.raises((AssertionError, ValueError)):
        _megatron_core_accepts(model)
