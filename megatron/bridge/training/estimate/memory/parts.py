"""The bytes of each memory part on each pipeline rank, and the busiest rank's estimate.

:func:`memory_of_job` lays the decoder layers out on the pipeline ranks and model chunks, sums
each rank's parts and keeps the rank with the highest peak: the model state (parameters in their
storage format, Transformer Engine's quantized weight copies, main gradients, fp32 master weights
and Adam's moments, sharded as the distributed optimizer or Megatron-FSDP shards them, less what
``optimizer_cpu_offload`` moves to the host), the activations held at the schedule's peak
(:mod:`.activations`), and the working memory: one layer's backward, userbuffers for TP overlap,
pipeline send/receive tensors, NCCL's buffers and the CUDA context.
"""

from __future__ import annotations

from typing import NamedTuple

from megatron.bridge.training.estimate.memory.activations import (
    ChunkActivations,
    chunk_activations,
    peak_in_flight,
    tokens_of,
)
from megatron.bridge.training.estimate.memory.report import MemoryEstimate, gib
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.job import JobDescription, check_micro_batch_chunks
from megatron.bridge.training.pipeline_layout import parse_layout, stage_layers

__all__ = ["CUDA_CONTEXT_BYTES", "NCCL_BUFFER_BYTES", "USERBUFFER_COUNT", "memory_of_job"]

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
            _Rank(job, dims, rank, chunks, places),
            micro_batches=micro_batches,
            tp_overlap=tp_overlap,
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


class _Rank(NamedTuple):
    """One pipeline rank of a job: its model chunks (each a tuple of its layers' block symbols, as
    ``ModelCost.layer_blocks`` gives them) and where the embedding, the loss and the MTP layers
    sit (:func:`_places`)."""

    job: JobDescription
    dims: ModelCost
    index: int
    chunks: list[tuple[str, ...]]
    places: dict[str, tuple[int, int]]


def _rank_params(on: _Rank) -> tuple[int, int]:
    """(dense, expert) parameters one GPU of the pipeline rank holds."""
    job, dims, rank, chunks, places = on
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
    on: _Rank, *, micro_batches: int, tp_overlap: bool
) -> tuple[list[tuple[str, int]], int, int]:
    """(part, bytes) of each of the rank's parts, the micro-batch chunks it holds at its peak
    and the activation bytes fine-grained offloading holds on the host then."""
    job, dims, rank, chunks, places = on
    m = job.model
    dense, expert = _rank_params(on)
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

    tok = tokens_of(job)
    vpp = len(chunks)
    sizes: list[ChunkActivations] = []
    for c, chunk in enumerate(chunks):
        sizes.append(
            chunk_activations(
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
    held_layers, held_logits, in_flight, host = peak_in_flight(job, rank, vpp, micro_batches, sizes)
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


def _assumptions(job: JobDescription) -> tuple[str, ...]:
    grad = "fp32" if job.grad_reduce_in_fp32 else "16-bit"
    out = [
        "capacity: what the device reports of the datasheet's (binary) GB; allocator "
        "fragmentation not counted",
        f"Adam with fp32 master weights and moments; main gradients in {grad}",
        "core attention in TE's fused kernel (no s x s scores kept); 16-bit activations",
        f"CUDA context {gib(CUDA_CONTEXT_BYTES)}, NCCL buffers {gib(NCCL_BUFFER_BYTES)}",
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
