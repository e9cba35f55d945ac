"""What a ring collective or a p2p send achieves on its links: bus efficiency and latency per call.

NCCL's time for one call of a ring collective is about a fixed latency per ring step plus its
bytes over the bus bandwidth it reaches on the slowest link (NCCL's own model,
``src/graph/tuning.cc``: a base latency plus a per-hop latency per ring step, and a bandwidth per
link type). This module prices a transfer of ``nbytes`` per GPU in ``calls`` calls over a ring
of ``members`` ranks, ``per_domain`` of them in each NVLink domain:

- **bandwidth**: inside one NVLink domain, the NVLink peak per direction times
  :data:`NVLINK_RING`'s share. Across domains NCCL runs one ring per NIC in parallel, so a group
  with ``per_domain`` members in each domain moves its inter-domain traffic through
  ``per_domain`` NICs: that many times one GPU's NIC peak, times :data:`NETWORK_RING`'s share;
  the slower of the NVLink and network parts sets the time. A group with one member per domain
  runs at one NIC.
- **latency**: per call, NCCL's base latency plus its per-hop latency for each ring step (n - 1
  steps for an all-gather or a reduce-scatter, 2 (n - 1) for an all-reduce, one for a p2p send),
  the NVLink or network hop as the step crosses (:data:`LATENCY`, the Simple protocol that
  carries the large messages a training step sends).

So a small message reaches a small share of the bus (its time is mostly latency) and a group
spread over many domains pays a network hop per step: a collective's achieved time depends on
its size and its span, not only on its bytes.

Pure arithmetic: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LATENCY", "NETWORK_RING", "NVLINK_RING", "LinkLatency", "RingShare", "ring_seconds"]


@dataclass(frozen=True)
class RingShare:
    """The share of a link's peak per-direction bandwidth a large ring collective reaches."""

    share: float
    """Bus bandwidth over link peak at large messages."""
    source: str
    """The measurement."""


#: NVLink: ring collectives at 16 GiB on 8 x H200 with NVLS off (nccl-tests via torch,
#: stas00/ml-engineering ``network/benchmarks``): all-reduce 367, all-gather 361, reduce-scatter
#: 363 GB/s bus bandwidth against 450 GB/s NVLink 4 per direction.
NVLINK_RING = RingShare(
    363 / 450,
    "ring all-gather / reduce-scatter bus bandwidth at 16 GiB on 8 x H200, NVLS off, 361-367 "
    "of 450 GB/s (stas00/ml-engineering network benchmarks)",
)

#: Network: all-reduce bus bandwidth at 16 GiB over 4 nodes of 8 x B200 with 8 x 400 Gb/s NICs
#: per node (stas00/ml-engineering ``network/benchmarks``): 382 GB/s against the node's 8 x 50
#: GB/s of NICs.
NETWORK_RING = RingShare(
    382 / 400,
    "multi-node ring all-reduce bus bandwidth at 16 GiB, 4 nodes of 8 x B200 with 8 x 400 Gb/s "
    "NICs: 382 of 400 GB/s (stas00/ml-engineering network benchmarks)",
)


@dataclass(frozen=True)
class LinkLatency:
    """NCCL's latency model for the Simple protocol, in seconds."""

    base: float
    """Per call."""
    nvlink_hop: float
    """Per ring step over NVLink."""
    network_hop: float
    """Per ring step over the network."""
    source: str
    """Where the figures are."""


#: NVIDIA/nccl ``src/graph/tuning.cc``: the ring's base latency (``baseLat``) and the per-hop
#: latencies (``hwLat``) of NVLink and the network for the Simple protocol: 8.4, 3.4 and 14 us.
LATENCY = LinkLatency(
    8.4e-6,
    3.4e-6,
    14e-6,
    "NCCL's latency model (NVIDIA/nccl src/graph/tuning.cc, Simple protocol): 8.4 us per call, "
    "3.4 us per NVLink and 14 us per network ring step",
)


def ring_seconds(
    nbytes: float,
    *,
    calls: float,
    steps: int,
    members: int,
    per_domain: int,
    nvlink_bytes_per_s: float,
    network_bytes_per_s: float,
    at_peak: bool = False,
) -> float:
    """Seconds of ``nbytes`` per GPU sent in ``calls`` calls of a collective of ``steps`` ring
    steps per call, over ``members`` ranks of which ``per_domain`` share each NVLink domain (all
    of them: no network), on links of the given peaks per direction (see the module docstring).
    ``at_peak``: the links at their peaks and no latency."""
    crosses = per_domain < members
    nvlink = nbytes / nvlink_bytes_per_s
    network = nbytes / (per_domain * network_bytes_per_s) if crosses else 0.0
    if at_peak:
        return max(nvlink, network)
    bandwidth = max(nvlink / NVLINK_RING.share, network / NETWORK_RING.share)
    # Of a ring's steps, those from the last member of a domain to the next domain cross it.
    network_steps = steps * (1 / per_domain if crosses else 0.0)
    latency = LATENCY.base + (steps - network_steps) * LATENCY.nvlink_hop
    latency += network_steps * LATENCY.network_hop
    return bandwidth + calls * latency
