"""Model FLOPs per token against upstream Megatron-Bridge's definition.

``ModelCost.flops_per_token`` ports ``num_floating_point_operations`` of Megatron-Bridge's
``training/utils/flop_utils.py``. Copying that arithmetic into a reference would test nothing,
so the checks here are independent of it: published rows of Megatron-Bridge's performance
tables (their Model TFLOP/s/GPU over tokens/s/GPU is upstream's FLOPs per token), numbers worked
by hand for small shapes, and structural identities the definition must keep (a dense MLP is a
one-expert MoE, an MTP layer adds a layer and a head, a hybrid ``*-`` pattern is a transformer).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training.estimate import ModelCost
from megatron.bridge.training.job import ModelDescription
from tests.unit_tests.conftest import mamba_fields, size_fields

_LLAMA_STYLE = dict(
    gated_linear_unit=True,
    add_bias_linear=False,
    normalization="RMSNorm",
    position_embedding_type="rope",
    share_embeddings_and_output_weights=False,
)

# The shipped recipes' models: their modules cite upstream's providers (llama, qwen3_moe,
# deepseek_v3 bridge) and the Hugging Face configs they read.
LLAMA3_8B = recipe_spec("llama3_8b").job.model
QWEN3_30B_A3B = recipe_spec("qwen3_30b_a3b").job.model
DEEPSEEK_V3 = recipe_spec("deepseek_v3").job.model

PUBLISHED = [
    pytest.param(
        LLAMA3_8B,
        1933,
        37556,
        "docs/performance-summary-archive.md, DGX-GB300, LLAMA3_8B, 8 GPUs FP8-CS, TP1",
        id="llama3_8b",
    ),
    pytest.param(
        QWEN3_30B_A3B,
        1029,
        44544,
        "docs/performance-summary.md 26.08, DGX-GB300, Qwen3_30B_a3B, 8 GPUs MXFP8, TP1 EP8",
        id="qwen3_30b_a3b",
    ),
    pytest.param(
        DEEPSEEK_V3,
        1635,
        6288,
        "docs/performance-summary.md 26.08, DGX-GB300, DeepSeekV3, 256 GPUs MXFP8, TP1 (MTP 1)",
        id="deepseek_v3",
    ),
    pytest.param(
        dataclasses.replace(DEEPSEEK_V3, mtp_num_layers=None),
        961,
        3848,
        "docs/performance-summary-archive.md, DeepSeekV3 (w/o MTP), 256 GPUs BF16, TP1",
        id="deepseek_v3_without_mtp",
    ),
]


@pytest.mark.parametrize(("model", "tflops", "tokens_per_s", "source"), PUBLISHED)
def test_flops_per_token_matches_published_rows(model, tflops, tokens_per_s, source):
    implied = tflops * 1e12 / tokens_per_s
    assert ModelCost(model).flops_per_token(tp_size=1) == pytest.approx(implied, rel=0.01), source


# --- numbers worked by hand ---------------------------------------------------------------------

TINY = ModelDescription(
    **size_fields(layers=4, hidden=8, heads=2, groups=1, ffn=16, vocab=128, seq=8), **_LLAMA_STYLE
)


def test_a_dense_layer_by_hand():
    # h 8, 2 heads of 4, 1 group: Q 8x8, K and V 8x4 each, O 8x8; SwiGLU 8x16 three times.
    # Per token and layer: 6 x (64 + 64 + 64) projections, 6 x q s = 6 x 8 x 8 core attention,
    # 6 x 8 x 16 x 3 MLP; logits 6 x 8 x 128.
    layer = 6 * (64 + 32 + 32 + 64) + 6 * 8 * 8 + 6 * 8 * 16 * 3
    assert ModelCost(TINY).flops_per_token() == 4 * layer + 6 * 8 * 128


def test_sliding_window_counts_the_mean_causal_context():
    # A window of 3 before and the token itself (W = 4) over 8 tokens: token i sees min(i, 4)
    # keys, (1 + 2 + 3 + 4 x 5) / 8 = 3.25 on average; full attention counts the causal half,
    # s / 2 = 4. Training core attention costs 6 x q x 2 x context per token and layer.
    windowed = dataclasses.replace(TINY, window_size=(3, 0))
    saved = ModelCost(TINY).flops_per_token() - ModelCost(windowed).flops_per_token()
    assert saved == pytest.approx(4 * 6 * 8 * (8 - 2 * 3.25))


def test_window_attn_skip_freq_keeps_every_nth_layer_full():
    windowed = dataclasses.replace(TINY, window_size=(3, 0))
    one_full = dataclasses.replace(windowed, window_attn_skip_freq=4)
    as_list = dataclasses.replace(windowed, window_attn_skip_freq=(1, 1, 1, 0))
    per_layer = ModelCost(TINY).flops_per_token() - ModelCost(windowed).flops_per_token()
    assert ModelCost(one_full).flops_per_token() == pytest.approx(
        ModelCost(windowed).flops_per_token() + per_layer / 4
    )
    assert ModelCost(as_list).flops_per_token() == ModelCost(one_full).flops_per_token()


def test_a_mamba_layer_by_hand():
    # h 4: d_inner 8, 4 heads of 2, 1 group, state 2. in_proj 2 x 4 x (16 + 4 + 4) = 192,
    # scan 7 x 8 x 2 = 112, out_proj 2 x 8 x 4 = 64 forward FLOPs per token; x 3 to train.
    model = ModelDescription(
        **size_fields(layers=1, hidden=4, heads=1, vocab=128, seq=8),
        hybrid_layer_pattern="M",
        **mamba_fields(state=2, head_dim=2, groups=1),
    )
    assert ModelCost(model).decoder_flops_per_token() == 3 * (192 + 112 + 64)
    assert ModelCost(model).flops_per_token() == 3 * (192 + 112 + 64) + 6 * 4 * 128


def test_attention_output_gate_adds_a_query_width_projection():
    gated = dataclasses.replace(TINY, attention_output_gate=True)
    added = ModelCost(gated).flops_per_token() - ModelCost(TINY).flops_per_token()
    assert added == TINY.num_layers * 6 * 8 * 8


def test_mla_full_rank_queries_replace_the_low_rank_pair():
    mla = dataclasses.replace(DEEPSEEK_V3, mtp_num_layers=None)
    full_rank = dataclasses.replace(mla, q_lora_rank=None)
    h, n, qk, r = 7168, 128, 128 + 64, 1536
    per_layer = h * n * qk - r * (h + n * qk + 1)
    added = ModelCost(full_rank).flops_per_token() - ModelCost(mla).flops_per_token()
    assert added == 61 * 6 * per_layer


def test_latent_moe_routes_through_the_latent_width():
    moe = dataclasses.replace(TINY, num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=6)
    latent = dataclasses.replace(moe, moe_latent_size=2)
    # Routed experts in 2 wide instead of 8 (a quarter), plus a 8x2 down and a 2x8 up projection.
    routed = 6 * 8 * 6 * 2 * 3
    assert ModelCost(moe).flops_per_token() - ModelCost(latent).flops_per_token() == pytest.approx(
        4 * (routed - routed / 4 - 6 * 2 * 8 * 2)
    )


# --- structure ----------------------------------------------------------------------------------

shapes = st.fixed_dictionaries(
    {
        "num_layers": st.integers(1, 12),
        "hidden_size": st.sampled_from([64, 128, 256]),
        "num_attention_heads": st.sampled_from([1, 2, 4, 8]),
        "ffn_hidden_size": st.sampled_from([96, 256, 512]),
        "vocab_size": st.integers(100, 5000),
        "seq_length": st.sampled_from([128, 1024, 4096]),
        "gated_linear_unit": st.booleans(),
        "kv_channels": st.sampled_from([None, 16, 32]),
    }
)


#: The routed experts of the MoE layers the structure tests add: 8 of width 64, top-2.
_EXPERTS = {"num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 64}


def _model(shape: dict, **fields) -> ModelDescription:
    groups = shape["num_attention_heads"] // 2 or 1
    return ModelDescription(num_query_groups=groups, **shape, **fields)


@settings(max_examples=60, deadline=None)
@given(shape=shapes)
def test_a_dense_mlp_is_a_one_expert_moe(shape):
    dense = _model(shape)
    moe = dataclasses.replace(
        dense, num_moe_experts=1, moe_router_topk=1, moe_ffn_hidden_size=shape["ffn_hidden_size"]
    )
    assert ModelCost(moe).flops_per_token() == pytest.approx(ModelCost(dense).flops_per_token())


@settings(max_examples=60, deadline=None)
@given(
    shape=shapes, experts=st.sampled_from([4, 8]), topk=st.integers(1, 4), freq=st.integers(1, 3)
)
def test_moe_layer_freq_int_and_list_forms_agree(shape, experts, topk, freq):
    model = _model(shape, num_moe_experts=experts, moe_router_topk=topk, moe_layer_freq=freq)
    listed = dataclasses.replace(model, moe_layer_freq=model.moe_layer_pattern)
    assert ModelCost(listed).flops_per_token() == ModelCost(model).flops_per_token()


@settings(max_examples=60, deadline=None)
@given(shape=shapes, moe=st.booleans(), mla=st.booleans(), tp=st.sampled_from([1, 2, 8]))
def test_an_mtp_layer_adds_a_layer_its_projection_and_a_head(shape, moe, mla, tp):
    fields = {"multi_latent_attention": mla}
    if moe:
        fields.update(_EXPERTS)
        fields.update(moe_layer_freq=(0,) * (shape["num_layers"] - 1) + (1,))
    base = _model(shape, **fields)
    longer = dataclasses.replace(
        base,
        num_layers=base.num_layers + 1,
        moe_layer_freq=(*base.moe_layer_pattern, 1) if moe else 1,
    )
    layer = ModelCost(longer).flops_per_token(tp) - ModelCost(base).flops_per_token(tp)
    h = base.hidden_size
    # The eh projection (2h -> h) and its norms, and one more output head.
    extra = 6 * (3 * h + 2 * h * h) + ModelCost(base).logit_flops_per_token(tp)
    with_mtp = ModelCost(dataclasses.replace(base, mtp_num_layers=2)).flops_per_token(tp)
    assert with_mtp == pytest.approx(ModelCost(base).flops_per_token(tp) + 2 * (layer + extra))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, moe=st.booleans(), latent=st.sampled_from([None, 32]))
def test_a_hybrid_attention_mlp_pattern_is_a_transformer(shape, moe, latent):
    fields = {}
    if moe:
        fields = {**_EXPERTS, "moe_shared_expert_intermediate_size": 32, "moe_latent_size": latent}
    transformer = _model(shape, **fields)
    hybrid = dataclasses.replace(
        transformer,
        num_layers=2 * shape["num_layers"],
        hybrid_layer_pattern=("*E" if moe else "*-") * shape["num_layers"],
    )
    assert ModelCost(hybrid).flops_per_token() == pytest.approx(
        ModelCost(transformer).flops_per_token()
    )


def test_hybrid_mtp_depths_come_from_the_pattern():
    plain = dataclasses.replace(TINY, num_layers=8, hybrid_layer_pattern="*-" * 4)
    with_mtp = dataclasses.replace(plain, hybrid_layer_pattern="*-|" * 3 + "*-/*-/*-")
    cost = ModelCost(with_mtp)
    assert cost.mtp_layers == 2
    # Each depth: one attention and one MLP layer (a quarter of the decoder) and one head;
    # upstream's hybrid_flops counts no MTP norms or projection.
    decoder = ModelCost(plain).decoder_flops_per_token()
    head = cost.logit_flops_per_token()
    assert cost.flops_per_token() == pytest.approx(decoder + head + 2 * (decoder / 4 + head))


@pytest.mark.parametrize(
    ("pattern", "match"),
    [("M*X-", r"\['X'\]"), ("M*-/*-/M-", "every MTP part")],
)
def test_a_pattern_megatron_core_refuses_is_refused(pattern, match):
    model = dataclasses.replace(TINY, hybrid_layer_pattern=pattern)
    with pytest.raises(ValueError, match=match):
        ModelCost(model).flops_per_token()


def test_an_experimental_attention_variant_is_named_not_guessed():
    model = dataclasses.replace(TINY, experimental_attention_variant="dsa")
    with pytest.raises(ValueError, match="experimental_attention_variant='dsa'"):
        ModelCost(model).flops_per_token()
