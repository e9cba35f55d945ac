"""The memory estimate as a record: :class:`MemoryEstimate`, its parts and how it reads.

:data:`PARTS` names the parts in the order every estimate lists them; :class:`MemoryEstimate`
holds their bytes for one GPU of the busiest pipeline rank against the GPU's capacity, and gives
the error line when the job does not fit, the text lines ``explain`` prints and the JSON values.
:func:`gib` writes bytes as the GiB figures all of them use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["FRAGMENTATION_FRACTION", "PARTS", "MemoryEstimate", "gib"]

#: Headroom under this fraction of the GPU's capacity is warned about: the parts above are what
#: tensors hold, and PyTorch's CUDA caching allocator reserves more than that, in blocks it has
#: split and cannot hand out whole. GMLake (Guo et al., ASPLOS 2024, arXiv:2401.08156) measures
#: the caching allocator's fragmentation over eight LLM trainings on 80 GB A100s: removing it
#: saves 9.2 GB on average (up to 25 GB), about 11 % of the device, so 10 % is taken as the usual
#: figure. An assumption, not a measurement of this job: a job's own fragmentation varies with
#: recompute, offloading and pipeline schedule (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments``
#: lowers it).
FRAGMENTATION_FRACTION = 0.10

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
            f"the job does not fit in {self.gpu.upper()} memory: {gib(self.total_bytes)} per GPU "
            f"on pipeline rank {self.pipeline_rank} > {gib(self.capacity_bytes)} capacity "
            f"({gib(-self.headroom_bytes)} over). Cheapest fixes: {fixes}."
        )

    @property
    def warning(self) -> str | None:
        """The warning when the job fits with less headroom than the caching allocator's usual
        fragmentation (:data:`FRAGMENTATION_FRACTION` of capacity); None otherwise."""
        margin = int(self.capacity_bytes * FRAGMENTATION_FRACTION)
        if not self.fits or self.headroom_bytes >= margin:
            return None
        return (
            f"the job fits in {self.gpu.upper()} memory with {gib(self.headroom_bytes)} headroom, "
            f"under the {gib(margin)} ({FRAGMENTATION_FRACTION:.0%} of capacity) that PyTorch's "
            "caching allocator commonly loses to fragmentation: it may still run out of memory. "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fragmentation; a larger PP "
            "or TP, or recompute, gives more headroom."
        )

    def render(self) -> list[str]:
        """The text lines ``explain`` prints: one per part, the total, capacity and headroom."""
        width = max(len(name) for name, _ in self.parts)
        lines = [f"{name.ljust(width)}  {gib(value):>10}" for name, value in self.parts]
        lines.append(
            f"{'total'.ljust(width)}  {gib(self.total_bytes):>10}  of {gib(self.capacity_bytes)} "
            f"({self.gpu.upper()}): headroom {gib(self.headroom_bytes)}"
            + ("" if self.fits else "  DOES NOT FIT")
        )
        lines.append(
            f"pipeline rank {self.pipeline_rank}, {self.in_flight} micro-batch chunk(s) in flight"
        )
        if self.offloaded_bytes:
            lines.append(f"activations offloaded to the host: {gib(self.offloaded_bytes)}")
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


def gib(n: float) -> str:
    """``n`` bytes in GiB with one decimal (``"12.3 GiB"``)."""
    return f"{n / 2**30:.1f} GiB"
