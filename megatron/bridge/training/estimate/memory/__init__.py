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

The parts, lowest first: ``report`` (:data:`PARTS`, :class:`MemoryEstimate` and its text and
JSON), ``activations`` (what layers, chunks and the schedule's peak hold), ``parts`` (each part's
bytes on each rank: :func:`memory_of_job`), ``fixes`` (the cheapest changes when the job does not
fit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from megatron.bridge.training.estimate.memory.activations import (
    block_activation_bytes,
    offloaded_layer_bytes,
)
from megatron.bridge.training.estimate.memory.fixes import with_fixes
from megatron.bridge.training.estimate.memory.parts import (
    CUDA_CONTEXT_BYTES,
    NCCL_BUFFER_BYTES,
    memory_of_job,
)
from megatron.bridge.training.estimate.memory.report import PARTS, MemoryEstimate

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
    return with_fixes(plan.job, estimate, tp_overlap=tp_overlap)
