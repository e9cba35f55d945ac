"""Whether a layout fits: the memory estimate of a planned layout (:func:`memory_of`), and a
lower bound on the weights a GPU holds, cheap enough to prune a layout before it is planned
(:func:`weights_floor_bytes`).

The memory estimate is ``estimate.memory.estimate_memory``'s, the one ``explain`` reports; the
floor counts only the 16-bit weights of the busiest GPU's layers (the parameters every sharding
keeps whole while they compute, Megatron-FSDP's gathered layer aside), so a layout above it
cannot fit whatever else the estimate adds.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from megatron.bridge.training.estimate.memory import estimate_memory, memory_of_job
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.job import JobDescription, ModelDescription

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import OverlapPlan

__all__ = ["MemoryVerdict", "memory_floor", "memory_of", "weights_floor_bytes"]

#: Bytes of a 16-bit weight: the smallest copy of a parameter the layers compute with.
_WEIGHT_BYTES = 2


class MemoryVerdict:
    """Memory per GPU of a planned layout: its parts, total, capacity and headroom."""

    __slots__ = ("capacity_bytes", "fits", "headroom_bytes", "parts", "total_bytes")

    def __init__(self, estimate: object) -> None:
        self.parts: tuple[tuple[str, int], ...] = tuple(estimate.parts)  # type: ignore[attr-defined]
        self.total_bytes: int = int(estimate.total_bytes)  # type: ignore[attr-defined]
        self.capacity_bytes: int = int(estimate.capacity_bytes)  # type: ignore[attr-defined]
        self.headroom_bytes: int = int(estimate.headroom_bytes)  # type: ignore[attr-defined]
        self.fits: bool = bool(estimate.fits)  # type: ignore[attr-defined]


def memory_of(plan: OverlapPlan) -> MemoryVerdict:
    """The memory per GPU of the busiest rank of ``plan`` (``estimate_memory``)."""
    return MemoryVerdict(estimate_memory(plan))


def memory_floor(job: JobDescription) -> MemoryVerdict:
    """The memory of ``job`` before it is planned: ``memory_of_job`` without TP overlap's
    userbuffers, which a plan can only add (a job that does not fit here fits no plan)."""
    return MemoryVerdict(memory_of_job(job, tp_overlap=False))


@functools.lru_cache(maxsize=256)
def _cost(model: ModelDescription) -> ModelCost:
    return ModelCost(model)


def weights_floor_bytes(
    model: ModelDescription,
    *,
    tp: int,
    pp: int,
    ep: int,
    etp: int | None,
    dp_shards: int,
) -> int:
    """A lower bound on the bytes of weights one GPU of the fullest pipeline rank holds.

    The model's decoder layers spread over ``pp`` ranks (the fullest holds at least the mean),
    each layer's dense part split over TP and its experts over EP x ETP
    (:meth:`ModelCost.layer_params`), in 16-bit, divided by ``dp_shards`` (the data-parallel
    ranks that shard the parameters: 1 unless Megatron-FSDP). Optimizer state, gradients,
    activations and buffers only add to it.
    """
    cost = _cost(model)
    moe_layers = cost.num_moe_layers
    dense_layers = model.num_layers - moe_layers
    dense_d, _ = cost.layer_params(tp_size=tp, moe=False)
    params = dense_d * dense_layers
    if moe_layers:
        moe_d, moe_e = cost.layer_params(tp_size=tp, moe=True, ep_size=ep, etp_size=etp)
        params += (moe_d + moe_e) * moe_layers
    return params * _WEIGHT_BYTES // (pp * dp_shards)
