"""Memory per GPU: :func:`estimate_memory` reads a plan's job and returns a :class:`MemoryEstimate`.

The estimate is the peak of the busiest pipeline rank, in bytes, by part:

- **model state**: the parameters in their storage format (16-bit, or FP8/FP4 with
  ``fp8_param_gather`` / ``fp4_param_gather``), the quantized weight copies Transformer Engine
  keeps for the GEMMs, the main gradients (fp32 with ``grad_reduce_in_fp32``, else 16-bit),
  the fp32 master weights and Adam's two fp32 moments. The distributed optimizer shards the
  last two over the data-parallel ranks (DP x CP for dense parameters, expert-DP for expert
  ones); Megatron-FSDP shards all four; ``optimizer_cpu_offload`` moves its fraction to the host.
- **activations**: what each decoder layer keeps for its backward, per micro-batch, block by
  block (attention, MLA, Mamba, MLP, MoE; :func:`block_activation_bytes`), split over TP (the
  hidden-wide tensors only with sequence parallelism) and CP, less what selective or full
  recompute drops; times the micro-batches in flight on megatron-core's schedule (1F1B: PP minus
  the rank on rank 0; interleaved: the warmup plus one, chunk by chunk), the embedding on the
  stage holding it, and the fp32 logits of the loss and MTP heads on the stage holding them.
- **working memory**: the backward of one layer (its activations' gradients), userbuffers for TP
  overlap, pipeline send/receive tensors, NCCL's buffers, the CUDA context.

The layer counting is Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models" (arXiv 2205.05198, Table 2), the formula Megatron-LM's
``megatron/training/theoretical_memory_usage.py`` implements; the tests hold the two equal on
the terms both model. Pure arithmetic: importing it loads no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from megatron.bridge.training.comm_overlap.rules import check_layout
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.schedule import schedule_order
from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.job import JobDescription, ModelDescription, check_micro_batch_chunks
from megatron.bridge.training.model_rules import recomputed_modules
from megatron.bridge.training.pipeline_layout import parse_layout, stage_layers

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import OverlapPlan

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "NCCL_BUFFER_BYTES",
    "PARTS",
    "MemoryEstimate",
    "block_activation_bytes",
    "estimate_memory",
    "memory_of_job",
    "offloaded_layer_bytes",
]

#: The parts of a :class:`MemoryEstimate`, in the order it lists them.
PARTS = (
    "parameters",
    "quantized weight copies",
    "gradients",
    "master weights",
    "optimizer state",
    "activations",
    "logits and loss",
    "backward working set",
    "communication buffers",
    "CUDA context",
)

#: The CUDA context of one process: the driver's state and the kernels loaded into it. With
#: lazy module loading (CUDA 11.7 and newer) PyTorch's context takes about 300 MB
#: (pytorch/pytorch issue 107667) and 200-700 MB by GPU and version (issue 28113); Transformer
#: Engine, cuBLAS/cuBLASLt workspaces and NCCL's kernels come on top: 1 GB is taken.
CUDA_CONTEXT_BYTES = 1_000_000_000
#: NCCL's buffers for the job's communicators: NCCL_BUFFSIZE (4 MiB by default, NCCL's
#: environment-variable docs) per channel and peer, on each of the communicators of a 3-D/4-D
#: layout (TP, CP, DP, PP, EP, expert DP and their combinations): 0.5 GB is taken.
NCCL_BUFFER_BYTES = 500_000_000
#: Userbuffers Transformer Engine allocates for TP overlap: one per overlapped GEMM of a layer
#: (TE ``pytorch/module/base.py`` ``initialize_ub``: qkv/proj/fc1/fc2 forward and the
#: data- and weight-gradient GEMMs, ten names), each [seq x mbs / CP, hidden] in 16 bits.
USERBUFFER_COUNT = 10

_FP32, _BF16 = 4, 2
# Adam keeps two fp32 moments per parameter (megatron-core's default optimizer).
_ADAM_STATE_BYTES = 2 * _FP32

# Bytes per parameter of the storage format and of the copies Transformer Engine keeps for the
# GEMMs, by (quantized format of the parameters, tensor-core format of the GEMMs):
# - 16-bit parameters and 16-bit GEMMs: 2 bytes, no copy.
# - 16-bit parameters and FP8 GEMMs (fp8 without fp8_param_gather): TE casts each weight to FP8
#   for the forward (rowwise) and the backward (columnwise, the transpose) and keeps both across
#   the micro-batches of a step (``is_first_microbatch`` caching): 2 bytes of copies. FP4: the
#   same at half a byte plus one FP8 scale per 16 elements, 2 x 0.5625.
# - FP8 primary weights (fp8_param_gather): 1 byte, plus the columnwise copy TE makes for the
#   backward, 1 byte. MXFP8 adds one 8-bit scale per 32 elements to each (1.03125).
# - FP4 primary weights (fp4_param_gather, NVFP4): 0.5 + 1/16 bytes each way.
_FP8_BYTES, _MXFP8_BYTES, _NVFP4_BYTES = 1.0, 1.0 + 1 / 32, 0.5 + 1 / 16


@dataclass(frozen=True)
class MemoryEstimate:
    """The peak memory of one GPU of the busiest pipeline rank, by part, against its capacity."""

    parts: tuple[tuple[str, int], ...]
    """(part, bytes), one per name of :data:`PARTS`, in that order."""
    total_bytes: int
    """The sum of the parts."""
    capacity_bytes: int
    """The GPU's HBM capacity as the device reports it (``GpuSpec.memory_bytes``)."""
    headroom_bytes: int
    """capacity - total; negative when the job does not fit."""
    fits: bool
    """total <= capacity."""
    fixes: tuple[str, ...] = ()
    """When it does not fit: the cheapest layout changes, each with the memory it gives and
    whether the job then fits, cheapest first (empty when it fits)."""
    pipeline_rank: int = 0
    """The pipeline rank the estimate describes (the one with the highest peak)."""
    in_flight: int = 1
    """Micro-batch chunks whose activations that rank holds at its peak."""
    offloaded_bytes: int = 0
    """Activations fine-grained offloading holds on the host at that peak (in none of the
    parts: they are off the GPU)."""
    gpu: str = ""
    """The GPU model."""
    assumptions: tuple[str, ...] = field(default=())
    """What the numbers assume and leave out."""

    def part(self, name: str) -> int:
        """Bytes of one part by name; ``KeyError`` listing the parts."""
        for part, value in self.parts:
            if part == name:
                return value
        raise KeyError(f"no memory part {name!r}; parts are {list(PARTS)}")

    @property
    def error(self) -> str | None:
        """The error line when the job does not fit (None when it fits): the numbers and the
        fixes."""
        if self.fits:
            return None
        fixes = "; ".join(self.fixes) if self.fixes else "no single layout change fits it"
        return (
            f"the job does not fit in {self.gpu.upper()} memory: {_gb(self.total_bytes)} per GPU "
            f"on pipeline rank {self.pipeline_rank} > {_gb(self.capacity_bytes)} capacity "
            f"({_gb(-self.headroom_bytes)} over). Cheapest fixes: {fixes}."
        )

    def render(self) -> list[str]:
        """The text lines ``explain`` prints: one per part, the total, capacity and headroom."""
        width = max(len(name) for name, _ in self.parts)
        lines = [f"{name.ljust(width)}  {_gb(value):>10}" for name, value in self.parts]
        lines.append(
            f"{'total'.ljust(width)}  {_gb(self.total_bytes):>10}  of {_gb(self.capacity_bytes)} "
            f"({self.gpu.upper()}): headroom {_gb(self.headroom_bytes)}"
            + ("" if self.fits else "  DOES NOT FIT")
        )
        lines.append(
            f"pipeline rank {self.pipeline_rank}, {self.in_flight} micro-batch chunk(s) in flight"
        )
        if self.offloaded_bytes:
            lines.append(f"activations offloaded to the host: {_gb(self.offloaded_bytes)}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values: parts as an object of bytes, totals, fixes, assumptions."""
        return {
            "parts": dict(self.parts),
            "total_bytes": self.total_bytes,
            "capacity_bytes": self.capacity_bytes,
            "headroom_bytes": self.headroom_bytes,
            "fits": self.fits,
            "fixes": list(self.fixes),
            "pipeline_rank": self.pipeline_rank,
            "in_flight": self.in_flight,
            "offloaded_bytes": self.offloaded_bytes,
            "assumptions": list(self.assumptions),
        }


def _gb(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def estimate_memory(plan: OverlapPlan) -> MemoryEstimate:
    """The peak memory per GPU of the busiest pipeline rank of ``plan``'s job, by part.

    Reads the job description (model, layout, batch, optimizer sharding, precision and
    parameter formats) and whether the plan runs TP overlap (its userbuffers). When the job
    does not fit, :attr:`MemoryEstimate.fixes` lists the cheapest layout changes that help.
    Raises ``ValueError`` when the job lacks what the estimate needs (GPU, micro-batch size,
    the model's shape) or its layout does not split.
    """
    try:
        tp_overlap = bool(plan.value("tp_comm_overlap"))
    except KeyError:
        tp_overlap = False
    estimate = memory_of_job(plan.job, tp_overlap=tp_overlap)
    if estimate.fits:
        return estimate
    return _with_fixes(plan.job, estimate, tp_overlap=tp_overlap)


def memory_of_job(job: JobDescription, *, tp_overlap: bool = False) -> MemoryEstimate:
    """:func:`estimate_memory` of a job description without its plan (no fixes):
    ``tp_overlap`` says whether TP overlap's userbuffers are allocated."""
    if job.gpu is None:
        raise ValueError(
            "the memory estimate needs the GPU model: set JobDescription.gpu (e.g. 'h100')."
        )
    if job.micro_batch_size is None:
        raise ValueError("the memory estimate needs JobDescription.micro_batch_size.")
    check_micro_batch_chunks(job)
    gpu = gpu_spec(job.gpu)
    dims = ModelCost(job.model)
    layers = stage_layers(job.model)
    vpp = len(layers[0])
    places = _places(job, vpp)
    blocks = dims.layer_blocks()
    offsets = _chunk_offsets(layers, job.pp_size, vpp)
    micro_batches = job.micro_batches
    best: tuple[int, int, list[tuple[str, int]], int, int] | None = None
    for rank in range(job.pp_size):
        chunks = [blocks[offsets[rank][c] : offsets[rank][c] + layers[rank][c]] for c in range(vpp)]
        parts, in_flight, host = _rank_parts(
            job, dims, rank, chunks, places, micro_batches=micro_batches, tp_overlap=tp_overlap
        )
        total = sum(v for _, v in parts)
        if best is None or total > best[0]:
            best = (total, rank, parts, in_flight, host)
    total, rank, parts, in_flight, host = best
    capacity = gpu.memory_bytes
    return MemoryEstimate(
        parts=tuple(parts),
        total_bytes=total,
        capacity_bytes=capacity,
        headroom_bytes=capacity - total,
        fits=total <= capacity,
        pipeline_rank=rank,
        in_flight=in_flight,
        offloaded_bytes=host,
        gpu=gpu.name,
        assumptions=_assumptions(job),
    )


# --- where the embedding, the loss and the MTP layers sit ---------------------------------------


def _places(job: JobDescription, vpp: int) -> dict[str, tuple[int, int]]:
    """(pipeline rank, model chunk) of the embedding, the loss (output layer) and the MTP layers:
    a custom layout's stages (stage i is chunk i // PP of rank i % PP), else the first chunk of
    rank 0, and the last chunk of the last rank for the loss and MTP (megatron-core builds MTP
    with the output layer)."""
    pp = job.pp_size
    places = {"embedding": (0, 0), "loss": (pp - 1, vpp - 1), "mtp": (pp - 1, vpp - 1)}
    layout = job.model.pipeline_model_parallel_layout
    if layout is not None:
        for index, stage in enumerate(parse_layout(layout)):
            for name in ("embedding", "loss", "mtp"):
                if name in stage:
                    places[name] = (index % pp, index // pp)
    return places


def _chunk_offsets(layers: list[list[int]], pp: int, vpp: int) -> list[list[int]]:
    """The index of each [rank][chunk]'s first decoder layer: megatron-core numbers the layers
    in virtual-stage order (chunk c of rank r is stage c x PP + r)."""
    offsets = [[0] * vpp for _ in range(pp)]
    start = 0
    for chunk in range(vpp):
        for rank in range(pp):
            offsets[rank][chunk] = start
            start += layers[rank][chunk]
    return offsets


# --- activations ----------------------------------------------------------------------------------


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
    tok = _tokens(job)
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
class _Tokens:
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


def _tokens(job: JobDescription) -> _Tokens:
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
    return _Tokens(tokens=tokens, whole_split=whole_split, tp=tp, routed_per_token=routed)


def _layer_bytes(dims: ModelCost, blocks: str, recompute: frozenset[str], tok: _Tokens) -> float:
    return sum(tok.bytes(_block(dims, s, recompute)) for s in blocks)


def _chunk_activations(
    job: JobDescription,
    dims: ModelCost,
    chunk: tuple[str, ...],
    tok: _Tokens,
    *,
    embedding: bool,
    loss: bool,
    mtp: bool,
) -> _Chunk:
    """What one micro-batch through one model chunk keeps (:class:`_Chunk`)."""
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
    return _Chunk(layers_bytes, logits, unit, host, max(moved_fine, default=0.0))


@dataclass(frozen=True)
class _Chunk:
    """One micro-batch through one model chunk: the layers' bytes kept on the GPU for the
    backward, the logits' bytes, the largest recompute unit, the bytes fine-grained offloading
    holds on the host and the most of them one layer brings back."""

    layers: float
    logits: float
    unit: float
    host: float
    reload: float


def _peak_in_flight(
    job: JobDescription, rank: int, vpp: int, micro_batches: int, sizes: list[_Chunk]
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


# --- one rank -------------------------------------------------------------------------------------


def _param_bytes(job: JobDescription) -> tuple[float, float]:
    """(storage, quantized copies) bytes per parameter (see the table above)."""
    cores = job.compute_dtype
    fp8 = job.model.fp8 is not None
    fp4 = job.model.fp4 is not None
    mx = job.model.fp8_recipe == "mxfp8"
    if job.fp4_param_gather and fp4:
        return _NVFP4_BYTES, _NVFP4_BYTES
    if job.fp8_param_gather and fp8:
        per = _MXFP8_BYTES if mx else _FP8_BYTES
        return per, per
    if fp4:
        return _BF16, 2 * _NVFP4_BYTES
    if fp8 or cores is None:
        return _BF16, 2 * (_MXFP8_BYTES if mx else _FP8_BYTES)
    return _BF16, 0.0


def _rank_params(
    job: JobDescription,
    dims: ModelCost,
    rank: int,
    chunks: list[tuple[str, ...]],
    places: dict[str, tuple[int, int]],
) -> tuple[int, int]:
    """(dense, expert) parameters one GPU of pipeline ``rank`` holds."""
    tp, ep, etp = job.tp_size, job.ep_size, job.etp_size
    dense = expert = 0
    # The layers repeat a few block kinds: each distinct one is counted once.
    kinds = {
        symbol: dims.block_params(symbol, tp_size=tp, ep_size=ep, etp_size=etp)
        for symbol in dict.fromkeys(s for chunk in chunks for blocks in chunk for s in blocks)
    }
    for chunk in chunks:
        for blocks in chunk:
            for symbol in blocks:
                d, e = kinds[symbol]
                dense, expert = dense + d, expert + e
    mtp_here = dims.mtp_layers and places["mtp"][0] == rank
    if places["embedding"][0] == rank or mtp_here:
        dense += dims.embedding_params(tp)
    if places["loss"][0] == rank:
        dense += dims.output_params(tp, pp_size=job.pp_size)
    if mtp_here:
        d, e = dims.mtp_params(tp, ep_size=ep, etp_size=etp)
        dense += dims.mtp_layers * d
        expert += dims.mtp_layers * e
    return dense, expert


def _rank_parts(
    job: JobDescription,
    dims: ModelCost,
    rank: int,
    chunks: list[tuple[str, ...]],
    places: dict[str, tuple[int, int]],
    *,
    micro_batches: int,
    tp_overlap: bool,
) -> tuple[list[tuple[str, int]], int, int]:
    m = job.model
    dense, expert = _rank_params(job, dims, rank, chunks, places)
    params = dense + expert
    storage, copies = _param_bytes(job)
    grad = _FP32 if job.grad_reduce_in_fp32 else _BF16
    # Sharded within one distributed-optimizer instance; HSDP's "optim" outer strategy shards
    # the optimizer state over the instances as well.
    dense_shards, expert_shards = job.optimizer_shards
    fsdp = job.use_megatron_fsdp
    sharded = job.use_distributed_optimizer or fsdp
    outer = job.num_distributed_optimizer_instances if job.hsdp_outer_shard else 1
    dense_opt = dense / dense_shards / outer if sharded else dense
    expert_opt = expert / expert_shards / outer if sharded else expert
    optimizer_params = dense_opt + expert_opt
    on_gpu = 1.0 - (job.optimizer_offload_fraction if job.optimizer_cpu_offload else 0.0)
    # Megatron-FSDP (optim_grads_params) shards parameters and gradients too, within an instance.
    params_held = dense / dense_shards + expert / expert_shards if fsdp else params

    tok = _tokens(job)
    vpp = len(chunks)
    sizes: list[_Chunk] = []
    for c, chunk in enumerate(chunks):
        sizes.append(
            _chunk_activations(
                job,
                dims,
                chunk,
                tok,
                embedding=places["embedding"] == (rank, c),
                loss=places["loss"] == (rank, c),
                mtp=places["mtp"] == (rank, c),
            )
        )
    unit = max(size.unit for size in sizes)
    held_layers, held_logits, in_flight, host = _peak_in_flight(
        job, rank, vpp, micro_batches, sizes
    )
    # Fine-grained offloading brings one layer's tensors back ahead of its backward (the reload
    # megatron-core prefetches one layer ahead): one layer's worth is on the GPU besides.
    held_layers += max(size.reload for size in sizes)

    hidden_tensor = tok.tokens * m.hidden_size * _BF16
    comm = NCCL_BUFFER_BYTES
    if tp_overlap:
        comm += USERBUFFER_COUNT * hidden_tensor
    if job.pp_size > 1:
        # The send and receive tensors of the forward and the backward (one micro-batch each).
        comm += 4 * hidden_tensor / tok.whole_split
    if fsdp:
        # Two layers' parameters gathered whole (the one computing and the prefetched one) and
        # one layer's unsharded gradients before their reduce-scatter.
        per_layer = (dense + expert) / max(1, sum(len(c) for c in chunks))
        comm += per_layer * (2 * (storage + copies) + grad)

    parts = [
        ("parameters", params_held * storage),
        ("quantized weight copies", 0.0 if fsdp else params * copies),
        ("gradients", params_held * grad),
        ("master weights", optimizer_params * _FP32 * on_gpu),
        ("optimizer state", optimizer_params * _ADAM_STATE_BYTES * on_gpu),
        ("activations", held_layers),
        ("logits and loss", held_logits),
        ("backward working set", unit),
        ("communication buffers", comm),
        ("CUDA context", CUDA_CONTEXT_BYTES),
    ]
    return [(name, round(value)) for name, value in parts], in_flight, round(host)


# --- fixes ----------------------------------------------------------------------------------------


def _candidates(job: JobDescription) -> list[tuple[str, JobDescription]]:
    """Layout changes that lower the memory per GPU, cheapest first: sharding the optimizer
    (no compute), selective recompute of core attention and the activation, a smaller
    micro-batch, more EP, more PP, more TP, more CP, then full recompute (a third more compute)."""
    m = job.model
    out: list[tuple[str, JobDescription]] = []
    if not job.use_distributed_optimizer and not job.use_megatron_fsdp and job.dp_size > 1:
        out.append(("the distributed optimizer", job.replace(use_distributed_optimizer=True)))
    if m.recompute_granularity is None:
        modules = ("core_attn", "mlp") if not m.moe else ("core_attn", "moe_act", "layernorm")
        out.append(
            (
                f"selective recompute ({', '.join(modules)})",
                job.replace(
                    **{
                        "model.recompute_granularity": "selective",
                        "model.recompute_modules": modules,
                    }
                ),
            )
        )
    if job.micro_batch_size and job.micro_batch_size > 1:
        out.append(
            (
                f"micro-batch size {job.micro_batch_size // 2}",
                job.replace(micro_batch_size=job.micro_batch_size // 2),
            )
        )
    if m.moe:
        out.append(
            (
                f"EP {job.ep_size * 2}",
                job.replace(**{"model.expert_model_parallel_size": job.ep_size * 2}),
            )
        )
    out.append(
        (
            f"PP {job.pp_size * 2}",
            job.replace(
                **{
                    "model.pipeline_model_parallel_size": job.pp_size * 2,
                    "model.pipeline_model_parallel_layout": None,
                }
            ),
        )
    )
    out.append(
        (
            f"TP {job.tp_size * 2}",
            job.replace(
                **{
                    "model.tensor_model_parallel_size": job.tp_size * 2,
                    "model.sequence_parallel": True,
                }
            ),
        )
    )
    out.append(
        (f"CP {job.cp_size * 2}", job.replace(**{"model.context_parallel_size": job.cp_size * 2}))
    )
    if m.recompute_granularity != "full":
        out.append(
            (
                "full recompute (uniform, 1 layer)",
                job.replace(
                    **{
                        "model.recompute_granularity": "full",
                        "model.recompute_method": "uniform",
                        "model.recompute_num_layers": 1,
                        "model.recompute_modules": None,
                    }
                ),
            )
        )
    return out


def _with_fixes(
    job: JobDescription, estimate: MemoryEstimate, *, tp_overlap: bool
) -> MemoryEstimate:
    """``estimate`` with the fixes that lower it: those that make the job fit first (cheapest
    first), then those that help without making it fit; at most four."""
    fitting: list[str] = []
    helping: list[str] = []
    for label, candidate in _candidates(job):
        try:
            check_layout(candidate)
            other = memory_of_job(candidate, tp_overlap=tp_overlap)
        except (ValueError, ZeroDivisionError):
            continue  # megatron-core would refuse that layout
        saved = estimate.total_bytes - other.total_bytes
        if saved <= 0:
            continue
        line = f"{label} saves {_gb(saved)}"
        if other.fits:
            fitting.append(f"{line} (fits, headroom {_gb(other.headroom_bytes)})")
        else:
            helping.append(f"{line} (still {_gb(-other.headroom_bytes)} over)")
    fixes = (fitting + helping)[:4]
    return MemoryEstimate(
        parts=estimate.parts,
        total_bytes=estimate.total_bytes,
        capacity_bytes=estimate.capacity_bytes,
        headroom_bytes=estimate.headroom_bytes,
        fits=estimate.fits,
        fixes=tuple(fixes),
        pipeline_rank=estimate.pipeline_rank,
        in_flight=estimate.in_flight,
        offloaded_bytes=estimate.offloaded_bytes,
        gpu=estimate.gpu,
        assumptions=estimate.assumptions,
    )


def _assumptions(job: JobDescription) -> tuple[str, ...]:
    grad = "fp32" if job.grad_reduce_in_fp32 else "16-bit"
    out = [
        "capacity: what the device reports of the datasheet's (binary) GB; allocator "
        "fragmentation not counted",
        f"Adam with fp32 master weights and moments; main gradients in {grad}",
        "core attention in TE's fused kernel (no s x s scores kept); 16-bit activations",
        f"CUDA context {_gb(CUDA_CONTEXT_BYTES)}, NCCL buffers {_gb(NCCL_BUFFER_BYTES)}",
    ]
    if job.model.fine_grained_activation_offloading:
        out.append(
            "fine-grained activation offloading: the host copies keep pace with the compute "
            "(no tensor waits on the GPU for its copy); MTP layers not offloaded"
        )
    if job.model.moe:
        out.append(
            "MoE: uniform routing (an expert rank receives top-k copies of as many tokens as it "
            "sends); imbalance not counted"
        )
    return tuple(out)
