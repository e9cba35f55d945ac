"""Activation memory: what each layer keeps for its backward, and what a pipeline rank holds.

Per token, block by block (attention, MLA, Mamba, gated delta net, MLP, MoE;
:func:`block_activation_bytes`), split over TP (the hidden-wide tensors only with sequence
parallelism) and CP, less what selective recompute drops; per micro-batch and model chunk
(:func:`chunk_activations`), less what full recompute and CPU offloading drop, with the embedding
and the fp32 logits of the loss and MTP heads on the chunks holding them; what fine-grained
activation offloading moves to the host (:func:`offloaded_layer_bytes`); and the micro-batch
chunks a rank holds at the peak of megatron-core's schedule (:func:`peak_in_flight`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.schedule import schedule_order
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.model_rules import recomputed_modules

__all__ = [
    "ChunkActivations",
    "Tokens",
    "block_activation_bytes",
    "chunk_activations",
    "offloaded_layer_bytes",
    "peak_in_flight",
    "tokens_of",
]

_FP32, _BF16 = 4, 2


@dataclass(frozen=True)
class _Act:
    """Bytes per token a block keeps for its backward: ``whole`` on hidden-wide tensors (split
    over TP only with sequence parallelism), ``split`` on tensors TP splits, ``routed`` per
    routed token copy an expert rank receives (MoE)."""

    whole: float = 0.0
    split: float = 0.0
    routed: float = 0.0

    def __add__(self, other: _Act) -> _Act:
        return _Act(self.whole + other.whole, self.split + other.split, self.routed + other.routed)


def block_activation_bytes(
    dims: ModelCost, symbol: str, *, recompute: tuple[str, ...] = ()
) -> tuple[float, float, float]:
    """(whole, split, routed) bytes per token one block keeps for its backward, 16-bit
    activations, 1-byte dropout masks, fp32 softmax statistics.

    ``whole``: hidden-wide tensors, split over TP only with sequence parallelism; ``split``:
    tensors TP splits; ``routed``: bytes per routed token copy (MoE). ``recompute`` is the
    selective-recompute modules (megatron-core's ``recompute_modules``): each drops what its
    checkpoint recomputes in the backward. Core attention runs in TE's fused (flash) kernel,
    which keeps its output and fp32 log-sum-exp, not the s x s scores.

    ``*``/``D`` attention: its norm's input and output (TE's LayerNormLinear keeps the output
    for the QKV GEMM), Q, K and V, the attention output (the projection's input), the
    log-sum-exp, the output gate and its input with attention_output_gate, the dropout mask.
    ``+`` MLA: the norm's input and output (``layernorm`` recompute drops the output: MLA's norm
    is its own module), the query and key/value latents and their norms' outputs, Q, K, V
    (``mla_up_proj`` drops them and the latent norms' outputs), the output, the log-sum-exp.
    ``M`` Mamba: the norm's input and output, in_proj's output (z, x, B, C, dt), conv1d's
    output, the scan's output and the gated norm's output. ``G`` gated delta net: the same
    shape with megatron-core's linear_* defaults. ``-`` MLP: the norm's input and output, fc1's
    output (twice ffn wide when gated), the activation's output, the dropout mask (``mlp``
    recompute keeps only the input). ``E`` MoE: the norm's input and output (``layernorm``
    drops the output), the router's fp32 logits and probabilities, the latent projections'
    outputs with moe_latent_size, the shared experts' fc1 and activation outputs
    (``shared_experts`` drops them), and per routed copy: the expert input, fc1's output, the
    activation's output (``moe_act`` drops it) and the expert output the combine keeps for the
    probabilities' gradient (``moe`` recompute keeps only the layer input).
    """
    a = _block(dims, symbol, frozenset(recompute))
    return a.whole, a.split, a.routed


def _block(dims: ModelCost, symbol: str, recompute: frozenset[str]) -> _Act:
    m = dims.model
    h = m.hidden_size
    # The hidden dropout's mask: one byte per element of the block output.
    mask = float(h) if m.hidden_dropout > 0 else 0.0
    # A GEMM's saved input: 16-bit, or the 1-byte FP8 copy Transformer Engine quantizes it to
    # (FP8 and FP4 recipes keep the quantized input for the weight gradient, not the 16-bit one).
    g = _gemm_input_bytes(m)
    # The attention output core attention keeps (16-bit); with quantized GEMMs the output
    # projection keeps its own quantized copy, else it shares that tensor.
    proj = 0 if g == _BF16 else g
    if symbol in ("*", "D"):
        q, kv = dims.query_width, dims.kv_width
        gate = (_BF16 + g) * q if m.attention_output_gate else 0
        return _Act(
            whole=_BF16 * h + g * h + mask,
            split=_BF16 * (q + 2 * kv) + (_BF16 + proj) * q + _FP32 * m.num_attention_heads + gate,
        )
    if symbol == "+":
        n, rope = m.num_attention_heads, m.qk_pos_emb_head_dim
        ql, kvl = m.q_lora_rank or 0, m.kv_lora_rank
        up = "mla_up_proj" in recompute
        norm_out = 0 if "layernorm" in recompute else g * h
        latents = _BF16 * (ql + kvl + rope) + (0 if up else g * (ql + kvl))
        qkv = 0 if up else _BF16 * n * (2 * (m.qk_head_dim + rope) + m.v_head_dim)
        return _Act(
            whole=_BF16 * h + norm_out + latents + mask,
            split=qkv + (_BF16 + proj) * n * m.v_head_dim + _FP32 * n,
        )
    if symbol == "M":
        d_in = dims.mamba_inner
        heads = d_in // m.mamba_head_dim
        bc = 2 * m.mamba_num_groups * m.mamba_state_dim
        return _Act(
            whole=_BF16 * h + g * h,
            split=_BF16 * ((2 * d_in + bc + heads) + (d_in + bc) + d_in) + g * d_in,
        )
    if symbol == "G":
        # megatron-core's TransformerConfig linear_* defaults, as ModelCost prices them.
        qk, v, v_heads = 16 * 128, 32 * 128, 32
        return _Act(
            whole=_BF16 * h + g * h,
            split=_BF16 * ((2 * qk + 2 * v + 2 * v_heads) + (2 * qk + v) + v) + g * v,
        )
    glu = 2 if m.gated_linear_unit else 1
    if symbol == "-":
        if "mlp" in recompute:
            return _Act(whole=_BF16 * h + mask)
        ffn = m.ffn_size
        return _Act(whole=_BF16 * h + g * h + mask, split=_BF16 * ffn * glu + g * ffn)
    if symbol == "E":
        if "moe" in recompute:
            return _Act(whole=_BF16 * h)
        experts = m.num_moe_experts or 0
        token = m.moe_latent_size or h
        width = m.moe_ffn_hidden_size or m.ffn_size
        shared = m.moe_shared_expert_intermediate_size or 0
        norm_out = 0 if "layernorm" in recompute else g * h
        latent = (_BF16 + g) * m.moe_latent_size if m.moe_latent_size else 0
        shared_act = 0 if "shared_experts" in recompute else shared * (_BF16 * glu + g)
        act_out = 0 if "moe_act" in recompute else g * width
        return _Act(
            whole=_BF16 * h + norm_out + 2 * _FP32 * experts + latent + mask,
            split=shared_act,
            routed=g * token + _BF16 * width * glu + act_out + _BF16 * token,
        )
    raise ValueError(f"unknown layer block {symbol!r}")


def _gemm_input_bytes(model: ModelDescription) -> float:
    """Bytes per element of a GEMM input Transformer Engine keeps for the backward: 1 with FP8
    or FP4 GEMMs (the quantized input; MXFP8 and NVFP4 add block scales, under 4%), else 2."""
    return 1.0 if (model.fp8 is not None or model.fp4 is not None) else float(_BF16)


def _saved_tensors(
    dims: ModelCost, symbol: str, recompute: frozenset[str]
) -> list[tuple[str, str, float, float]]:
    """The tensors one block saves inside each of fine-grained offloading's modules, as
    (module, kind, bytes per element, elements per token); ``kind`` is how the element count
    scales as in :class:`_Act` (whole, split or routed). The same tensors, widths and recompute
    rules as :func:`_block`, one entry per tensor, since megatron-core's threshold applies to
    each tensor's own element count."""
    m = dims.model
    h = m.hidden_size
    g = _gemm_input_bytes(m)
    proj = 0 if g == _BF16 else g
    out: list[tuple[str, str, float, float]] = []
    if symbol in ("*", "D", "+"):
        out.append(("attn_norm", "whole", _BF16, h))
        if symbol == "+":
            n, rope, v = m.num_attention_heads, m.qk_pos_emb_head_dim, m.v_head_dim
            if "layernorm" not in recompute:
                out.append(("qkv_linear", "whole", g, h))
            if "mla_up_proj" not in recompute:
                qk = n * (m.qk_head_dim + rope)
                out += [("core_attn", "split", _BF16, w) for w in (qk, qk, n * v)]
            query, heads = n * v, n
        else:
            out.append(("qkv_linear", "whole", g, h))
            query, kv, heads = dims.query_width, dims.kv_width, m.num_attention_heads
            out += [("core_attn", "split", _BF16, w) for w in (query, kv, kv)]
        out += [("core_attn", "split", _BF16, query), ("core_attn", "split", _FP32, heads)]
        if proj:
            out.append(("attn_proj", "split", proj, query))
    elif symbol == "-" and "mlp" not in recompute:
        out.append(("mlp_norm", "whole", _BF16, h))
    elif symbol == "E" and "moe" not in recompute:
        glu = 2 if m.gated_linear_unit else 1
        token = m.moe_latent_size or h
        width = m.moe_ffn_hidden_size or m.ffn_size
        out.append(("mlp_norm", "whole", _BF16, h))
        # The expert input (fc1's), fc1's output (the activation's input), the activation's
        # output (fc2's input; moe_act recompute drops it): fused_group_mlp covers all three.
        experts = [("expert_fc1", g, token), ("moe_act", _BF16, width * glu)]
        if "moe_act" not in recompute:
            experts.append(("", g, width))
        for name, size, elements in experts:
            if name:
                out.append((name, "routed", size, elements))
            out.append(("fused_group_mlp", "routed", size, elements))
    return out


def offloaded_layer_bytes(
    job: JobDescription, chunk: tuple[str, ...], *, dims: ModelCost | None = None
) -> list[float]:
    """Bytes megatron-core's fine-grained activation offloading moves to the host, per layer of
    one micro-batch through ``chunk`` (each layer's block symbols, as ``ModelCost.layer_blocks``
    gives them); all zero without ``fine_grained_activation_offloading``.

    Each layer opens one group per module of ``offload_modules`` it runs
    (``fine_grained_activation_offload.py``): the group's saved tensors move when each holds at
    least ``min_offloaded_tensor_size`` elements (``tensor_need_offloading_checker``); the tensors
    and their element counts are the activation estimate's (tokens per GPU times the
    per-token width; the routed ones per token copy an expert rank receives). The last group of
    each module in the chunk stays, which megatron-core keeps for the first backward and for
    every micro-batch on the last pipeline stage (``post_warmup_callback``,
    ``should_bulk_offload``); of the other groups that move anything,
    ``activation_offload_fraction`` keeps the later ones of the forward on the GPU.
    """
    m = job.model
    if not m.fine_grained_activation_offloading:
        return [0.0] * len(chunk)
    dims = dims or ModelCost(m)
    tok = tokens_of(job)
    selective = (
        frozenset(recomputed_modules(m.recompute_modules))
        if m.recompute_granularity == "selective"
        else frozenset()
    )
    local = tok.tokens / tok.whole_split
    per_token = {
        "whole": local,
        "split": tok.tokens / tok.tp,
        "routed": local * tok.routed_per_token,
    }
    wanted = set(m.offload_modules)
    # Groups in forward order: [layer index, module, bytes it moves].
    groups: list[list[Any]] = []
    for index, blocks in enumerate(chunk):
        by_module: dict[str, float] = {}
        for symbol in blocks:
            for module, kind, size, width in _saved_tensors(dims, symbol, selective):
                if module not in wanted:
                    continue
                elements = per_token[kind] * width
                moved = size * elements if elements >= m.min_offloaded_tensor_size else 0.0
                by_module[module] = by_module.get(module, 0.0) + moved
        groups += [[index, module, moved] for module, moved in by_module.items()]
    last = {module: i for i, (_, module, _) in enumerate(groups)}
    for i in last.values():
        groups[i][2] = 0.0
    eligible = [group for group in groups if group[2] > 0]
    kept = int(len(eligible) * (1 - m.activation_offload_fraction))
    for group in eligible[len(eligible) - kept :] if kept else ():
        group[2] = 0.0
    per_layer = [0.0] * len(chunk)
    for index, _, moved in groups:
        per_layer[index] += moved
    return per_layer


@dataclass(frozen=True)
class Tokens:
    """Per micro-batch, on one GPU: the tokens (after CP), the divisor of hidden-wide tensors,
    the TP size, and the routed token copies an expert rank receives per local token."""

    tokens: float
    whole_split: int
    tp: int
    routed_per_token: float

    def bytes(self, act: _Act) -> float:
        local = self.tokens / self.whole_split
        return (
            self.tokens * (act.whole / self.whole_split + act.split / self.tp)
            + local * self.routed_per_token * act.routed
        )


def tokens_of(job: JobDescription) -> Tokens:
    """The :class:`Tokens` of one micro-batch of ``job`` on one GPU."""
    m = job.model
    tp = job.tp_size
    tokens = job.micro_batch_size * m.seq_length / job.cp_size
    whole_split = tp if job.sequence_parallel else 1
    routed = 0.0
    if m.moe:
        # Uniform routing: an expert rank receives on average top-k copies of as many tokens as
        # it sends; ETP ranks gather each other's tokens; drop-and-pad fills to the capacity.
        padded = m.moe_expert_capacity_factor if m.moe_pad_expert_input_to_capacity else None
        routed = m.moe_router_topk * job.etp_size * (padded or 1.0)
        if not job.sequence_parallel:
            routed /= tp  # without SP every TP rank holds every token: count them once per ETP
    return Tokens(tokens=tokens, whole_split=whole_split, tp=tp, routed_per_token=routed)


def _layer_bytes(dims: ModelCost, blocks: str, recompute: frozenset[str], tok: Tokens) -> float:
    return sum(tok.bytes(_block(dims, s, recompute)) for s in blocks)


def chunk_activations(
    job: JobDescription,
    dims: ModelCost,
    chunk: tuple[str, ...],
    tok: Tokens,
    *,
    embedding: bool,
    loss: bool,
    mtp: bool,
) -> ChunkActivations:
    """What one micro-batch through one model chunk keeps (:class:`ChunkActivations`)."""
    m = job.model
    h = m.hidden_size
    granularity = m.recompute_granularity
    selective = (
        frozenset(recomputed_modules(m.recompute_modules))
        if granularity == "selective"
        else frozenset()
    )
    # A chunk repeats a few layer kinds: each distinct one is costed once.
    kinds = {blocks: _layer_bytes(dims, blocks, selective, tok) for blocks in dict.fromkeys(chunk)}
    per_layer = [kinds[blocks] for blocks in chunk]
    layer_input = tok.bytes(_Act(whole=_BF16 * h))
    unit = max(per_layer, default=0.0)
    if granularity == "full" and per_layer:
        n = m.recompute_num_layers or 1
        if m.recompute_method == "block":
            # The first n layers of each chunk keep only their input.
            kept = n * layer_input if n <= len(per_layer) else len(per_layer) * layer_input
            stored = kept + sum(per_layer[n:])
            unit = max(per_layer[:n], default=0.0)
        else:
            # Groups of n layers keep only the group's input; the backward rebuilds one group.
            groups = math.ceil(len(per_layer) / n)
            stored = groups * layer_input
            unit = max(sum(per_layer[i : i + n]) for i in range(0, len(per_layer), n))
        layers_bytes = stored
    else:
        layers_bytes = sum(per_layer)
    # Fine-grained offloading moves tensors of the layers whose activations are kept: under full
    # recompute the recomputed layers save nothing but their input.
    kept_from = (
        0
        if granularity != "full"
        else (m.recompute_num_layers or 1)
        if m.recompute_method == "block"
        else len(chunk)
    )
    moved_fine = [0.0] * min(kept_from, len(chunk)) + offloaded_layer_bytes(
        job, chunk[kept_from:], dims=dims
    )
    host = sum(moved_fine)
    layers_bytes -= host
    offloaded = (
        m.cpu_offloading_num_layers if m.cpu_offloading and m.cpu_offloading_activations else 0
    )
    if offloaded and per_layer:
        # megatron-core's cpu_offloading moves the first N layers' activations to the host after
        # their forward and brings them back for their backward: one of them is on the GPU at a
        # time (the one in flight to or from the host).
        moved = per_layer[: min(offloaded, len(per_layer))]
        layers_bytes -= sum(moved) - max(moved)
    logits = 0.0
    vocab = dims.padded_vocab(job.tp_size)
    if embedding:
        # Token ids (int64) on every TP rank, and the embedding dropout's mask.
        mask = float(h) if m.hidden_dropout > 0 else 0.0
        layers_bytes += tok.tokens * 8 + tok.bytes(_Act(whole=mask))
    heads = (1 if loss else 0) + (dims.mtp_layers if mtp else 0)
    if heads:
        # The final norm's input and output, and the logits over the vocabulary / TP the cross
        # entropy keeps, per output head (the main one and each MTP depth's): fp32 (megatron-core's
        # vocab_parallel_cross_entropy casts them and keeps exp(logits)), or the 16-bit logits
        # Transformer Engine's fused cross entropy writes its gradient into.
        te_loss = m.cross_entropy_loss_fusion and m.cross_entropy_fusion_impl == "te"
        per_vocab = _BF16 if te_loss else _FP32
        logits = heads * tok.bytes(_Act(whole=2 * _BF16 * h, split=per_vocab * vocab))
    if mtp and dims.mtp_layers:
        blocks = dims.mtp_blocks()
        depth = _layer_bytes(dims, blocks, selective, tok)
        # The embedding and hidden-state norms and their concatenation, the eh projection's input.
        depth += tok.bytes(_Act(whole=4 * _BF16 * h))
        layers_bytes += dims.mtp_layers * depth
    return ChunkActivations(layers_bytes, logits, unit, host, max(moved_fine, default=0.0))


@dataclass(frozen=True)
class ChunkActivations:
    """One micro-batch through one model chunk: the layers' bytes kept on the GPU for the
    backward, the logits' bytes, the largest recompute unit, the bytes fine-grained offloading
    holds on the host and the most of them one layer brings back."""

    layers: float
    logits: float
    unit: float
    host: float
    reload: float


def peak_in_flight(
    job: JobDescription, rank: int, vpp: int, micro_batches: int, sizes: list[ChunkActivations]
) -> tuple[float, float, int, float]:
    """(layers, logits, chunk micro-batches, host bytes) held at the peak of ``rank`` on
    megatron-core's schedule: forwards add a chunk's activations, backwards free them
    (``schedule_order``)."""
    fwd, bwd, warmup = schedule_order(
        micro_batches=micro_batches, vpp=vpp, pp=job.pp_size, rank=rank, ep_overlap=False
    )
    total = len(fwd)
    # The order repeats every PP x VPP forwards: the peak is reached within warmup + 2 periods.
    horizon = min(total, warmup + 2 * job.pp_size * vpp + 1)
    held_layers = held_logits = held_host = 0.0
    count = 0
    best = (0.0, 0.0, 0, 0.0)
    f = b = 0

    def forward() -> None:
        nonlocal held_layers, held_logits, held_host, count, f, best
        chunk = sizes[fwd[f]]
        held_layers += chunk.layers
        held_logits += chunk.logits
        held_host += chunk.host
        count += 1
        f += 1
        if held_layers + held_logits > best[0] + best[1]:
            best = (held_layers, held_logits, count, held_host)

    def backward() -> None:
        nonlocal held_layers, held_logits, held_host, count, b
        chunk = sizes[bwd[b]]
        held_layers -= chunk.layers
        held_logits -= chunk.logits
        held_host -= chunk.host
        count -= 1
        b += 1

    for _ in range(warmup):
        forward()
    while f < horizon:
        forward()
        backward()
    return best
