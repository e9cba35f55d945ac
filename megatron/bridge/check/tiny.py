"""The model ``--tiny`` builds: a recipe's model shrunk to build anywhere, on the fitted layout.

:func:`tiny_model` reads the recipe's :class:`~megatron.bridge.training.job.ModelDescription`
and the :class:`~megatron.bridge.check.layout.Layout` fitted to the world, and returns the model
fields to change (megatron-core's names), with a note for each setting of the recipe it had to
drop. What the recipe's parallelism asks of the model stays valid on the tiny layout:

- the decoder layers split over PP x VPP the way the recipe splits them: the even split (one
  layer per chunk, plus one beside an embedding or a loss counted as a layer), the first and
  last stage sizes (one layer per virtual stage), or a custom ``pipeline_model_parallel_layout``
  rebuilt in the same form (string or list) with PP x VPP stages: the embedding and the first
  stage's decoder, one decoder per middle stage, the last stage's decoder, every MTP layer and
  the loss;
- a hybrid layer pattern keeps each kind of layer it has, one of each per pipeline chunk, with
  ``|`` stage boundaries when the recipe uses them (and always under VPP, which needs them), and
  its MTP patterns after ``/``;
- heads, query groups, Mamba groups and heads divide over TP; routed experts over EP; the
  sequence over CP (2 x CP pieces) and TP (sequence parallelism);
- per-layer lists (``moe_layer_freq``, ``window_attn_skip_freq``, ``cp_comm_type``) are sampled
  at the tiny layer count, keeping their first and last entries (dense first layers, an MoE last
  one).

Plain values only: nothing here imports torch, megatron-core or a recipe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from megatron.bridge.check.layout import Layout
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.pipeline_layout import LAYER_NAMES, parse_layout

__all__ = ["TINY_HEAD_DIM", "TINY_VOCAB_SIZE", "tiny_model"]

#: Width of one attention head (and one Mamba head) of the tiny model.
TINY_HEAD_DIM = 16
#: Vocabulary of the tiny model.
TINY_VOCAB_SIZE = 1000
#: Tokens per TP x CP piece of the tiny sequence.
_TINY_SEQ_PER_PIECE = 32
#: Routed experts per expert-parallel rank.
_TINY_EXPERTS_PER_EP_RANK = 4

_LAYER_CHARS = {name: char for char, name in LAYER_NAMES.items()}
_PIPE, _MTP_SEPARATOR = "|", "/"


def tiny_model(model: ModelDescription, layout: Layout) -> tuple[dict[str, Any], list[str]]:
    """The model fields ``--tiny`` changes on ``layout``, and a note per dropped setting.

    Two attention heads of :data:`TINY_HEAD_DIM` per TP rank (one query group per TP rank with
    grouped-query attention), per TP x CP rank when a layer exchanges its sequence by CP's
    all-to-all over heads (``cp_comm_type`` "a2a" or "a2a+p2p"), a 4 x hidden MLP,
    :data:`TINY_VOCAB_SIZE` tokens, a sequence of 32 x TP x CP; the pipeline, MoE, MLA, Mamba and
    sliding-window fields as the module says.
    """
    groups = layout.tp * (layout.cp if model.cp_splits_heads else 1)
    heads = 2 * groups
    hidden = TINY_HEAD_DIM * heads
    fields: dict[str, Any] = {
        "hidden_size": hidden,
        "ffn_hidden_size": 4 * hidden,
        "num_attention_heads": heads,
        "num_query_groups": groups if model.num_query_groups is not None else None,
        "kv_channels": TINY_HEAD_DIM if model.kv_channels is not None else None,
        "vocab_size": TINY_VOCAB_SIZE,
        "seq_length": _TINY_SEQ_PER_PIECE * layout.tp * layout.cp,
        "tensor_model_parallel_size": layout.tp,
        "pipeline_model_parallel_size": layout.pp,
        "virtual_pipeline_model_parallel_size": layout.vpp,
        "context_parallel_size": layout.cp,
        "expert_model_parallel_size": layout.ep,
        "expert_tensor_parallel_size": layout.etp,
    }
    notes: list[str] = []
    fields |= _pipeline_fields(model, layout, notes)
    num_layers = fields["num_layers"]
    fields |= _attention_fields(model, fields["seq_length"], num_layers)
    fields |= _expert_fields(model, layout, hidden, num_layers)
    if model.hybrid_layer_pattern is not None:
        fields |= _mamba_fields(model, layout)
    if model.recompute_num_layers is not None:
        fields["recompute_num_layers"] = 1
    return fields, notes


# ------------------------------------------------------------------------------ pipeline split


def _pipeline_fields(model: ModelDescription, layout: Layout, notes: list[str]) -> dict[str, Any]:
    """num_layers and the fields that place the layers on pipeline stages."""
    if model.hybrid_layer_pattern is not None:
        return _hybrid_fields(model, layout, notes)
    if model.pipeline_model_parallel_layout is not None:
        return _custom_layout_fields(model.pipeline_model_parallel_layout, layout)
    return _split_fields(model, layout, notes, unit=1)


def _split_fields(
    model: ModelDescription, layout: Layout, notes: list[str], *, unit: int
) -> dict[str, Any]:
    """The even split or the first/last stage sizes, ``unit`` decoder layers per chunk."""
    first = model.num_layers_in_first_pipeline_stage
    last = model.num_layers_in_last_pipeline_stage
    if first is not None or last is not None:
        if layout.pp == 1:
            notes.append(
                f"num_layers_in_first_pipeline_stage={first} / num_layers_in_last_pipeline_"
                f"stage={last} of the recipe dropped: the tiny layout has one pipeline rank"
            )
            return {
                "num_layers": unit * layout.chunks,
                "num_layers_in_first_pipeline_stage": None,
                "num_layers_in_last_pipeline_stage": None,
            }
        # Every rank builds `unit` layers per virtual stage; the set sizes say so explicitly.
        per_rank = unit * layout.chunks
        return {
            "num_layers": per_rank * layout.pp,
            "num_layers_in_first_pipeline_stage": per_rank if first is not None else None,
            "num_layers_in_last_pipeline_stage": per_rank if last is not None else None,
        }
    embedding = int(model.account_for_embedding_in_pipeline_split)
    loss = int(model.account_for_loss_in_pipeline_split)
    stages = layout.pp * layout.chunks
    # One decoder per chunk beside whatever else the chunk counts: on one chunk, both extras.
    extras = embedding + loss if stages == 1 else max(embedding, loss)
    per_chunk = unit + extras
    return {"num_layers": stages * per_chunk - embedding - loss}


def _custom_layout_fields(
    recipe_layout: str | Sequence[Sequence[str]], layout: Layout
) -> dict[str, Any]:
    """The recipe's custom layout rebuilt with PP x VPP stages, in the recipe's form."""
    stages = parse_layout(recipe_layout)
    count = layout.pp * layout.chunks
    first, last = stages[0], stages[-1]
    embedding = ["embedding"] * first.count("embedding")
    mtp = ["mtp"] * sum(stage.count("mtp") for stage in stages)
    loss = ["loss"] * last.count("loss")
    first_decoder = ["decoder"] if "decoder" in first else []
    last_decoder = ["decoder"] if "decoder" in last else []
    if count == 1:
        tiny = [[*embedding, "decoder", *mtp, *loss]]
    else:
        middle = [["decoder"] for _ in range(count - 2)]
        if not (first_decoder or middle or last_decoder):
            last_decoder = ["decoder"]
        tiny = [[*embedding, *first_decoder], *middle, [*last_decoder, *mtp, *loss]]
    num_layers = sum(stage.count("decoder") for stage in tiny)
    if isinstance(recipe_layout, str):
        shrunk: Any = _PIPE.join("".join(_LAYER_CHARS[name] for name in stage) for stage in tiny)
    else:
        shrunk = tuple(tuple(stage) for stage in tiny)
    return {
        "num_layers": num_layers,
        "pipeline_model_parallel_layout": shrunk,
        "mtp_num_layers": len(mtp) or None,
    }


def _distinct(pattern: str) -> str:
    """Each layer symbol of ``pattern`` once, in the order it first appears."""
    return "".join(dict.fromkeys(ch for ch in pattern if ch != _PIPE))


def _hybrid_fields(model: ModelDescription, layout: Layout, notes: list[str]) -> dict[str, Any]:
    """A hybrid pattern with each kind of layer once per chunk; its MTP patterns shrunk alike."""
    main, *mtp_patterns = model.hybrid_layer_pattern.split(_MTP_SEPARATOR)
    kinds = _distinct(main)
    mtp = "".join(_MTP_SEPARATOR + _distinct(pattern) for pattern in mtp_patterns)
    if _PIPE in main or layout.vpp is not None:
        # megatron-core's select_pipeline_segment: one '|'-separated segment per (virtual)
        # pipeline stage, and no first/last stage sizes beside them.
        segments = [kinds] * (layout.pp * layout.chunks)
        return {
            "num_layers": len(kinds) * len(segments),
            "hybrid_layer_pattern": _PIPE.join(segments) + mtp,
            "num_layers_in_first_pipeline_stage": None,
            "num_layers_in_last_pipeline_stage": None,
        }
    fields = _split_fields(model, layout, notes, unit=len(kinds))
    repeats = fields["num_layers"] // len(kinds)
    fields["num_layers"] = len(kinds) * repeats
    fields["hybrid_layer_pattern"] = kinds * repeats + mtp
    return fields


# ------------------------------------------------------------------------------- layer shapes


def _sampled(values: Sequence[Any], count: int) -> tuple[Any, ...]:
    """``count`` entries of a per-layer list, evenly spaced, its first and last ones kept."""
    if count == 1:
        return (values[-1],)
    step = (len(values) - 1) / (count - 1)
    return tuple(values[round(i * step)] for i in range(count))


def _attention_fields(model: ModelDescription, seq_length: int, num_layers: int) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if model.multi_latent_attention:
        fields |= {
            "q_lora_rank": None if model.q_lora_rank is None else 2 * TINY_HEAD_DIM,
            "kv_lora_rank": 2 * TINY_HEAD_DIM,
            "qk_head_dim": TINY_HEAD_DIM,
            "qk_pos_emb_head_dim": TINY_HEAD_DIM // 2,
            "v_head_dim": TINY_HEAD_DIM,
        }
    if model.window_size is not None:
        # A window shorter than the tiny sequence, so that it still masks; -1 (unbounded) stays.
        fields["window_size"] = tuple(
            side if side < 0 else min(side, seq_length // 2) for side in model.window_size
        )
    if isinstance(model.window_attn_skip_freq, tuple):
        fields["window_attn_skip_freq"] = _sampled(model.window_attn_skip_freq, num_layers)
    if isinstance(model.cp_comm_type, tuple):
        fields["cp_comm_type"] = _sampled(model.cp_comm_type, num_layers)
    return fields


def _expert_fields(
    model: ModelDescription, layout: Layout, hidden: int, num_layers: int
) -> dict[str, Any]:
    if not model.moe:
        return {}
    topk = min(model.moe_router_topk, 2)
    fields: dict[str, Any] = {
        "num_moe_experts": _TINY_EXPERTS_PER_EP_RANK * layout.ep,
        "moe_router_topk": topk,
        "moe_ffn_hidden_size": None if model.moe_ffn_hidden_size is None else hidden,
        "moe_shared_expert_intermediate_size": (
            None if model.moe_shared_expert_intermediate_size is None else hidden
        ),
        "moe_latent_size": None if model.moe_latent_size is None else hidden // 2,
    }
    if isinstance(model.moe_layer_freq, tuple):
        fields["moe_layer_freq"] = _sampled(model.moe_layer_freq, num_layers)
    return fields


def _mamba_fields(model: ModelDescription, layout: Layout) -> dict[str, Any]:
    # Mamba groups divide over TP and heads over groups (megatron-core's MambaMixer asserts).
    return {
        "mamba_head_dim": TINY_HEAD_DIM,
        "mamba_state_dim": TINY_HEAD_DIM,
        "mamba_num_groups": layout.tp,
        "mamba_num_heads": None if model.mamba_num_heads is None else 4 * layout.tp,
    }
