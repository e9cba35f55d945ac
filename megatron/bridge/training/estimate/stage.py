"""The pipeline stage a step estimate describes: its layers, FLOPs, bytes, recompute and parameters.

megatron-core splits the transformer layers over the pipeline ranks; :func:`busiest_stage`
picks the rank that takes longest (or has the most model FLOPs) and returns it as a
:class:`Stage`, the one object the compute and communication terms read. :func:`stage_params` counts what one GPU of it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.model_rules import recomputed_modules
from megatron.bridge.training.pipeline_layout import parse_layout, stage_layers

__all__ = [
    "Stage",
    "bf16_layer_indices",
    "busiest_stage",
    "mtp_rank",
    "rank_layer_indices",
    "stage_params",
]


@dataclass(frozen=True)
class Stage:
    """One GPU of one pipeline stage, as a step's cost terms see it."""

    rank: int
    """Pipeline rank (the busiest: the longest compute, the later one on a tie)."""
    layers: int
    """Transformer layers on this rank (summed over its model chunks)."""
    moe_share: float
    """Share of the model's layers that are MoE layers; MoE layers are taken as spread evenly."""
    first: bool
    """This rank holds the embedding (pipeline rank 0)."""
    last: bool
    """This rank holds the output layer and the loss (the last pipeline rank)."""
    micro_batch_size: int
    """Sequences in one micro-batch."""
    micro_batches: int
    """Micro-batches each DP rank runs per step."""
    vpp: int
    """Model chunks per pipeline rank (1 without interleaving)."""
    recompute_full: float
    """Fraction of the stage's layers recomputed whole (full recompute)."""
    recompute_modules: tuple[str, ...]
    """Modules selective recompute runs again (megatron-core's recompute_modules as it reads
    them: None is ("core_attn",)); empty without selective recompute."""
    flops_per_token: float
    """Model FLOPs per token of this stage's layers, plus the logits on the last stage and the
    multi-token-prediction layers on the stage that builds them."""
    recompute_flops_per_token: float
    """Forward FLOPs per token that recomputation executes again on this stage: the forward
    third of the recomputed layers (full) or of the recomputed modules' FLOPs (selective,
    :meth:`ModelCost.recompute_flops_per_token`)."""
    elementwise_bytes_per_token: float
    """HBM bytes per token this stage's layers move in memory-bound kernels on one TP rank,
    forward and backward (:meth:`ModelCost.elementwise_bytes_per_token` x layers)."""
    recompute_elementwise_bytes_per_token: float
    """HBM bytes per token the recomputed forwards move again on one TP rank: the forward's
    third of the recomputed layers' bytes (full), or the recomputed modules' forward bytes
    (selective, :meth:`ModelCost.recompute_elementwise_bytes_per_token`)."""
    bf16_layers: int = 0
    """Decoder layers of this stage that megatron-core keeps out of the FP8/FP4 recipe
    (``first_last_layers_bf16``, :func:`bf16_layer_indices`)."""
    bf16_gemm_flops_per_token: float = 0.0
    """Model FLOPs per token of the linear layers that run at the 16-bit peak in an FP8/FP4
    job: those of the layers kept out of the recipe and those megatron-core never quantizes
    (:func:`_sixteen_bit_gemm_flops`)."""

    @property
    def moe_layers(self) -> float:
        """MoE layers on this stage (fractional when they do not split evenly)."""
        return self.layers * self.moe_share

    @property
    def recompute_core_attn(self) -> float:
        """1.0 when core attention is recomputed (selective recompute), else 0.0."""
        return float("core_attn" in self.recompute_modules)

    @property
    def core_attention_recomputed(self) -> float:
        """Fraction of the stage's layers whose core attention runs again in the backward: the
        layers recomputed whole, or all of them with selective recompute of ``core_attn``."""
        return self.recompute_full + self.recompute_core_attn

    @property
    def recomputed_layers(self) -> float:
        """Layers recomputed whole on this stage."""
        return self.recompute_full * self.layers

    @property
    def recomputed_dense_mlps(self) -> float:
        """Dense MLPs whose forward selective recompute of ``mlp`` runs again (transformer_layer.py
        ``recompute_mlp``, not on MoE layers), their TP collectives included."""
        return (self.layers - self.moe_layers) * float("mlp" in self.recompute_modules)

    @property
    def moe_forward_recomputed(self) -> float:
        """Fraction of the stage's MoE layers whose forward, its dispatch and combine included,
        runs again in the backward: full recompute's share of layers, or 1.0 with selective
        recompute of ``moe`` (moe_layer.py ``moe_layer_recompute`` checkpoints the whole
        forward)."""
        return self.recompute_full + float("moe" in self.recompute_modules)


def rank_layer_indices(chunks: list[list[int]], rank: int) -> list[int]:
    """Global indices (0-based) of the decoder layers on pipeline ``rank``. ``chunks`` is
    :func:`~megatron.bridge.training.pipeline_layout.stage_layers`' split: virtual stage ``v``
    of rank ``r`` is the model's ``v x PP + r``-th run of layers."""
    pp = len(chunks)
    sizes = {
        v * pp + r: n for r, rank_chunks in enumerate(chunks) for v, n in enumerate(rank_chunks)
    }
    start = 0
    indices: list[int] = []
    for stage in sorted(sizes):
        if stage % pp == rank:
            indices.extend(range(start, start + sizes[stage]))
        start += sizes[stage]
    return indices


def bf16_layer_indices(job: JobDescription, chunks: list[list[int]], rank: int) -> list[int]:
    """Global indices (0-based) of the decoder layers on pipeline ``rank`` that megatron-core
    keeps out of the FP8/FP4 recipe: with ``first_last_layers_bf16`` and FP8 or FP4 training,
    the first ``num_layers_at_start_in_bf16`` and the last ``num_layers_at_end_in_bf16`` layers
    of the model (``fp8_utils.is_first_last_bf16_layer`` and ``fp4_utils.get_fp4_context`` by
    global layer index; the transformer and hybrid blocks pass each layer's). Empty
    otherwise."""
    return _kept_in_bf16(job, rank_layer_indices(chunks, rank))


def _kept_in_bf16(job: JobDescription, indices: list[int]) -> list[int]:
    """Those of the decoder layers ``indices`` that megatron-core keeps out of the FP8/FP4
    recipe (:func:`bf16_layer_indices`)."""
    m = job.model
    if not (m.first_last_layers_bf16 and (m.fp8 or m.fp4)):
        return []
    start, end = m.num_layers_at_start_in_bf16, m.num_layers - m.num_layers_at_end_in_bf16
    return [i for i in indices if i < start or i >= end]


def _sixteen_bit_gemm_flops(
    job: JobDescription, dims: ModelCost, indices: list[int], kept: list[int], *, mtp: bool
) -> float:
    """Model FLOPs per token of the linear layers that run in 16 bits in an FP8/FP4 job on a
    rank holding the decoder layers ``indices``, ``kept`` of them out of the recipe
    (:func:`bf16_layer_indices`), and the MTP layers with ``mtp``: every linear layer of the
    kept layers, and in the others (MTP layers included) those megatron-core never quantizes
    (:meth:`ModelCost.unquantized_gemm_flops_per_token`)."""
    m = job.model
    if not (m.fp8 or m.fp4):
        return 0.0
    mtp_indices = range(m.num_layers, m.num_layers + dims.mtp_layers) if mtp else range(0)
    kept_set = set(kept)
    return sum(
        dims.layer_gemm_flops_per_token(i)
        if i in kept_set
        else dims.unquantized_gemm_flops_per_token(i)
        for i in (*indices, *mtp_indices)
    )


def mtp_rank(job: JobDescription) -> int:
    """The pipeline rank that builds the multi-token-prediction layers: the one whose stage of
    ``pipeline_model_parallel_layout`` holds them, else the last (megatron-core builds MTP with
    the output layer, ``mtp_on_this_rank``)."""
    layout = job.model.pipeline_model_parallel_layout
    if layout is not None:
        for index, stage in enumerate(parse_layout(layout)):
            if "mtp" in stage:
                return index % job.pp_size
    return job.pp_size - 1


def _recomputed(job: JobDescription, stage_layers: int, vpp: int) -> tuple[float, tuple[str, ...]]:
    """(fraction of the stage's layers recomputed whole, modules recomputed selectively)."""
    granularity = job.model.recompute_granularity
    if granularity == "full":
        if job.model.recompute_method == "block" and job.model.recompute_num_layers is not None:
            return min(1.0, job.model.recompute_num_layers * vpp / max(stage_layers, 1)), ()
        return 1.0, ()
    if granularity == "selective":
        return 0.0, recomputed_modules(job.model.recompute_modules)
    return 0.0, ()


def busiest_stage(
    job: JobDescription,
    dims: ModelCost,
    *,
    micro_batch_size: int,
    micro_batches: int,
    seconds: Callable[[Stage], float] | None = None,
) -> Stage:
    """The pipeline stage that takes longest: the most ``seconds`` (a stage's compute time as
    the step estimate prices it, its kernel terms included) when given, else the most model
    FLOPs per token; the later one on a tie.

    Each layer costs the model's mean decoder layer (:meth:`ModelCost.layer_flops_per_token`:
    attention and MLP for a transformer, the pattern's mixers and MLPs spread over its layers
    for a hybrid model); the last stage adds the logits, and the stage that builds the
    multi-token-prediction layers adds them (:meth:`ModelCost.mtp_flops_per_token`, their
    output heads included). Recompute adds forward passes: a full layer's forward is a third of
    its training FLOPs; selective recompute adds each module's forward
    (:meth:`ModelCost.recompute_flops_per_token`). The stage's memory-bound bytes are its
    layers' on one TP rank (:meth:`ModelCost.elementwise_bytes_per_token`), full recompute
    adding the forward third of the recomputed layers' and selective recompute the recomputed
    modules' forward bytes (:meth:`ModelCost.recompute_elementwise_bytes_per_token`).
    """
    tp, pp = job.tp_size, job.pp_size
    vpp = job.vpp_size if job.interleaved else 1
    # Decoder layers on each rank (summed over its model chunks), as megatron-core splits them
    # (stage_layers: a custom layout, uneven first/last stages, the embedding and loss counted
    # or not).
    chunks = stage_layers(job.model)
    per_rank = [sum(rank_chunks) for rank_chunks in chunks]
    mtp_stage = mtp_rank(job)
    # Each rank's global layer indices, once: its kept layers and 16-bit FLOPs read them.
    indices = [rank_layer_indices(chunks, rank) for rank in range(pp)]
    kept = [_kept_in_bf16(job, rank_indices) for rank_indices in indices]
    sixteen_bit = [
        _sixteen_bit_gemm_flops(job, dims, indices[rank], kept[rank], mtp=rank == mtp_stage)
        for rank in range(pp)
    ]
    moe_share = dims.num_moe_layers / job.model.num_layers
    per_layer = dims.layer_flops_per_token()
    sp = job.sequence_parallel
    ep = job.ep_size
    layer_bytes = dims.elementwise_bytes_per_token(tp_size=tp, sequence_parallel=sp, ep_size=ep)

    def stage_flops(rank: int) -> float:
        return (
            per_rank[rank] * per_layer
            + (dims.logit_flops_per_token(tp) if rank == pp - 1 else 0.0)
            + (dims.mtp_flops_per_token(tp) if rank == mtp_stage else 0.0)
        )

    def build(rank: int) -> Stage:
        layers = per_rank[rank]
        full, modules = _recomputed(job, layers, vpp)
        selective_flops = sum(dims.recompute_flops_per_token(m) for m in modules)
        selective_bytes = sum(
            dims.recompute_elementwise_bytes_per_token(
                m, tp_size=tp, sequence_parallel=sp, ep_size=ep
            )
            for m in modules
        )
        return Stage(
            rank=rank,
            layers=layers,
            moe_share=moe_share,
            first=rank == 0,
            last=rank == pp - 1,
            micro_batch_size=micro_batch_size,
            micro_batches=micro_batches,
            vpp=vpp,
            recompute_full=full,
            recompute_modules=modules,
            flops_per_token=stage_flops(rank),
            recompute_flops_per_token=layers * (full * per_layer / 3 + selective_flops),
            elementwise_bytes_per_token=layers * layer_bytes,
            recompute_elementwise_bytes_per_token=layers
            * (full * layer_bytes / 3 + selective_bytes),
            bf16_layers=len(kept[rank]),
            bf16_gemm_flops_per_token=sixteen_bit[rank],
        )

    if seconds is None:
        return build(max(range(pp), key=lambda r: (stage_flops(r), r)))
    # Ranks alike in layers, in what they hold and in their 16-bit linear FLOPs (the layers kept
    # out of the recipe, DeepSeek-V4's layer mix) take the same time: one stage of each kind.
    kinds: dict[tuple[int, bool, bool, bool, float], int] = {}
    for rank in range(pp):
        kind = (per_rank[rank], rank == 0, rank == pp - 1, rank == mtp_stage, sixteen_bit[rank])
        kinds[kind] = rank
    timed = [build(rank) for rank in kinds.values()]
    return max(timed, key=lambda stage: (seconds(stage), stage.rank))


def stage_params(job: JobDescription, dims: ModelCost, stage: Stage) -> tuple[int, int]:
    """(dense, expert) parameters one GPU of ``stage`` holds.

    Dense parameters are what DP reduces over DP x CP ranks; expert parameters what expert-DP
    reduces. The first stage adds the embedding, the last the final norm and output layer.
    """
    tp = job.tp_size
    moe_layers = stage.moe_layers
    dense_params = 0.0
    expert_params = 0.0
    for is_moe, count in ((False, stage.layers - moe_layers), (True, moe_layers)):
        d, e = dims.layer_params(tp_size=tp, moe=is_moe, ep_size=job.ep_size, etp_size=job.etp_size)
        dense_params += d * count
        expert_params += e * count
    dense_params = round(dense_params)
    expert_params = round(expert_params)
    if stage.first:
        dense_params += dims.embedding_params(tp)
    if stage.last:
        dense_params += dims.output_params(tp, pp_size=job.pp_size)
    return dense_params, expert_params
