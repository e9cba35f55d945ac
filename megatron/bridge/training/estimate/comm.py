"""Communication of one step: bytes per GPU for each parallelism, then time on its link.

One function per mode (:func:`tp_transfers`, :func:`cp_transfers`, :func:`pp_transfers`,
:func:`dp_transfers`, :func:`ep_transfers`) returns that mode's :class:`Transfer` list: the
bytes one GPU of the stage sends per step, with their formula, the ranks the group spans and
the overlap knob that would hide them. :func:`price` places each transfer on NVLink or the
network, times it at that link's peak and asks the plan whether its knob is on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from megatron.bridge.training.estimate.attention import a2a_share
from megatron.bridge.training.estimate.collectives import ring_seconds
from megatron.bridge.training.estimate.efficiency import ALLTOALL_ACHIEVED
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.result import CP_RING, FSDP_PREFETCH, CommEntry, Link
from megatron.bridge.training.estimate.stage import Stage
from megatron.bridge.training.job import JobDescription

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import OverlapPlan
    from megatron.bridge.training.hardware import GpuSpec

__all__ = [
    "FSDP_GATHER",
    "FSDP_REDUCE",
    "Transfer",
    "bucket_params",
    "cp_transfers",
    "dp_transfers",
    "ep_transfers",
    "pp_sends",
    "pp_transfers",
    "price",
    "tp_transfers",
]

_ACT_BYTES = 2
"""Bytes per activation element on the wire (bf16; FP8 all-gathers are not modelled)."""
_PARAM_BYTES = 2
"""Bytes per parameter in the distributed optimizer's all-gather (bf16 model weights)."""

FSDP_GATHER = "all-gather (params), every micro-batch's forward and backward"
"""Megatron-FSDP's per-layer parameter gathers: they travel with each forward and backward."""
FSDP_REDUCE = "reduce-scatter (grads), every micro-batch's backward"
"""Megatron-FSDP's per-layer gradient reduce-scatters: they travel with each backward."""


@dataclass(frozen=True)
class Transfer:
    """One communication stream of a step before it is placed on a link."""

    mode: str
    """Parallelism: tp, cp, pp, dp, dp-expert or ep."""
    collective: str
    """The collective(s), in words."""
    nbytes: float
    """Bytes one GPU sends per step (ring collectives: the (n-1)/n share)."""
    span: int
    """Consecutive ranks the group covers: more than the NVLink domain crosses the network."""
    knob: str | None
    """The overlap knob that hides it (:data:`CP_RING`: hidden whatever the knobs say)."""
    formula: str
    """The byte count's formula, in words."""
    group: int = 0
    """All-to-all only: ranks in the group, ``stride`` apart (0: a ring or p2p transfer)."""
    stride: int = 1
    """All-to-all only: rank distance between consecutive group members."""
    routed: tuple[int, int] | None = None
    """All-to-all only, for a dispatcher that sends a token once to each remote NVLink domain
    holding one of its experts and forwards it there over NVLink (the flex dispatcher's DeepEP
    and HybridEP backends): (routed experts, top-k). None: every copy travels on its own."""
    members: int = 0
    """Ring collectives and p2p rings: ranks in the group (0: an all-to-all)."""
    calls: float = 0.0
    """Calls per step (each pays the link's latency, :mod:`.collectives`)."""
    steps: int = 1
    """Ring steps per call: n - 1 for an all-gather or reduce-scatter, 2 (n - 1) for an
    all-reduce, 1 for a p2p send."""
    p2p: bool = False
    """Point-to-point sends between neighbours (CP's ring, PP's stages): a send that leaves the
    NVLink domain runs over one GPU's NIC."""


def _activation_bytes(job: JobDescription, stage: Stage) -> int:
    """One micro-batch's hidden activations on this GPU's CP slice, before any SP split."""
    return (
        stage.micro_batch_size
        * (job.model.seq_length // job.cp_size)
        * job.model.hidden_size
        * _ACT_BYTES
    )


def tp_transfers(job: JobDescription, stage: Stage) -> list[Transfer]:
    """TP's activation collectives (none at TP 1).

    With SP each layer's attention and MLP all-gather their input (fwd) and reduce-scatter
    their output (fwd); backward reduce-scatters the input grad, all-gathers the output grad
    and all-gathers the input again for the weight grad: 10 ring collectives of `act` bytes per
    layer, each sending (TP-1)/TP x act per GPU; a recomputed layer adds its 4 forward ones and
    a dense MLP recomputed alone (selective ``mlp``) its 2. The output layer adds 3 (gather fwd,
    scatter bwd, re-gather for wgrad), the embedding 2 (scatter fwd, gather bwd). An MoE layer's
    expert MLP traffic is EP's (:func:`ep_transfers`); its attention keeps 5.
    Without SP: 2 all-reduces forward and 2 backward per layer (2 (TP-1)/TP x act each), a
    recomputed layer 2 more and a recomputed dense MLP 1; the embedding and the output layer
    one each.
    """
    tp = job.tp_size
    if tp <= 1:
        return []
    ring = (tp - 1) / tp
    # Collectives of act bytes per micro-batch. A recomputed layer and a recomputed dense MLP
    # add as many either way; SP and all-reduces differ in what a layer and the heads run.
    if job.sequence_parallel:
        layers = 10 * (stage.layers - stage.moe_layers) + 5 * stage.moe_layers
        output, embedding = 3, 2
        collective, formula = (
            "all-gather + reduce-scatter",
            "M x (10/layer + 4/recomputed layer + 2/recomputed MLP + 3 output + 2 embedding) x "
            "(TP-1)/TP x b s/CP h x 2B",
        )
    else:
        layers = 8 * stage.layers
        output = embedding = 2
        collective, formula = (
            "all-reduce",
            "M x 2 x (4/layer + 2/recomputed layer + 1/recomputed MLP + output + embedding) x "
            "(TP-1)/TP x b s/CP h x 2B",
        )
    per_mb = (
        layers
        + 4 * stage.recomputed_layers
        + 2 * stage.recomputed_dense_mlps
        + output * stage.last
        + embedding * stage.first
    )
    act = _activation_bytes(job, stage)
    nbytes = stage.micro_batches * per_mb * ring * act
    return [
        Transfer(
            "tp",
            collective,
            nbytes,
            tp,
            "tp_comm_overlap",
            formula,
            members=tp,
            calls=stage.micro_batches * per_mb,
            steps=(tp - 1) * (1 if job.sequence_parallel else 2),
        )
    ]


def cp_transfers(job: JobDescription, dims: ModelCost, stage: Stage) -> list[Transfer]:
    """CP's sequence exchange (none at CP 1): the K/V ring on the layers that run it, the
    all-to-all over heads on the ``cp_comm_type="a2a"`` ones (:func:`~.attention.a2a_share`).

    TE's ring attention passes each GPU's K/V chunk around the ring: forward sends it CP-1
    times; backward sends K/V again and dK/dV, 2 (CP-1) times; a recomputed forward (full layer
    or core attention) sends it CP-1 more times. It runs under the attention steps.

    TE's ``AttnFuncWithCPAndQKVOA2A`` all-to-alls Q, K and V before the kernel and its output
    after it; backward, the output and its gradient before and dQ, dK, dV after: 2 (q + k)
    widths forward, 3q + 2k backward (q: heads x head_dim, k: query groups x head_dim), each
    tensor b s/CP x width/TP on a GPU, of which (CP-1)/CP leaves it. The kernel waits for them:
    nothing hides them.
    """
    tp, cp = job.tp_size, job.cp_size
    if cp <= 1:
        return []
    layers = stage.layers
    a2a = a2a_share(job.model)
    tokens = stage.micro_batch_size * (job.model.seq_length // cp)
    recomputed = stage.recomputed_layers + stage.recompute_core_attn * layers
    transfers = []
    if a2a < 1:
        kv = 2 * tokens * (dims.kv_width // tp) * _ACT_BYTES
        rounds = (1 - a2a) * (3 * layers + recomputed) * (cp - 1)
        transfers.append(
            Transfer(
                "cp",
                "K/V ring exchange (p2p)",
                stage.micro_batches * rounds * kv,
                tp * cp,
                CP_RING,
                "M x (3 + recompute) x ring layers x (CP-1) x 2 b s/CP kv/TP x 2B",
                members=cp,
                calls=stage.micro_batches * rounds,
                p2p=True,
            )
        )
    if a2a > 0:
        q, k = dims.query_width // tp, dims.kv_width // tp
        widths = a2a * (5 * q + 4 * k) * layers + a2a * 2 * (q + k) * recomputed
        transfers.append(
            Transfer(
                "cp",
                "Q/K/V/O all-to-all (a2a)",
                stage.micro_batches * widths * tokens * (cp - 1) / cp * _ACT_BYTES,
                tp * cp,
                None,
                "M x a2a layers x (5q + 4k + recompute 2(q + k))/TP x b s/CP x (CP-1)/CP x 2B",
                group=cp,
                stride=tp,
            )
        )
    return transfers


def pp_sends(stage: Stage) -> int:
    """Stage-boundary sends per micro-batch: an activation forward and a gradient backward per
    model chunk, less the first stage's first chunk (no gradient to send on) and the last
    stage's last chunk (no activation)."""
    return 2 * stage.vpp - (1 if stage.first else 0) - (1 if stage.last else 0)


def pp_transfers(job: JobDescription, stage: Stage) -> list[Transfer]:
    """PP's stage-boundary sends (none at PP 1).

    Each micro-batch's activation goes forward and its gradient backward across every stage
    boundary, once per model chunk: VPP chunks send VPP times as many messages. The first
    stage's first chunk receives no gradient to send on and the last stage's last chunk sends no
    activation. With SP the message is the SP shard (1/TP).
    """
    if job.pp_size <= 1:
        return []
    pp_msg = _activation_bytes(job, stage) / (job.tp_size if job.sequence_parallel else 1)
    sends = pp_sends(stage)
    return [
        Transfer(
            "pp",
            "send/recv activations + grads",
            stage.micro_batches * sends * pp_msg,
            job.world_size,
            "overlap_p2p_comm",
            "M x (2 VPP - edge) x b s/CP h/(TP if SP) x 2B",
            members=job.pp_size,
            calls=stage.micro_batches * sends,
            p2p=True,
        )
    ]


def bucket_params(bucket_size: object, group: int) -> int:
    """Parameters per gradient bucket: ``bucket_size`` when set, else megatron-core's default
    ``max(40M, 1M x DP group)`` (``distributed_data_parallel.py``)."""
    if isinstance(bucket_size, int) and bucket_size > 0:
        return bucket_size
    return max(40_000_000, 1_000_000 * group)


def _data_parallel(
    job: JobDescription,
    mode: str,
    n: int,
    intra: int,
    params: int,
    span: int,
    bucket_size: object = None,
) -> list[Transfer]:
    """One DP group's gradient (and parameter) collectives over ``n`` replicas of ``params``,
    the ``n`` ranks split into ``num_distributed_optimizer_instances`` consecutive groups of
    ``intra`` (:attr:`JobDescription.optimizer_shards`)."""
    if n <= 1 or params == 0:
        return []
    grad_bytes = 4 if job.grad_reduce_in_fp32 else 2
    instances = job.num_distributed_optimizer_instances
    ring = (intra - 1) / intra
    # Each rank of a group holds 1/intra of the parameters: across groups they reduce that share.
    shard = params / intra
    across = (instances - 1) / instances
    named = f"n = {intra}" + (f" in each of {instances} groups" if instances > 1 else "")
    group_span = span // instances
    buckets = math.ceil(params / bucket_params(bucket_size, n))
    ring_calls = {"members": intra, "calls": buckets, "steps": intra - 1}
    across_calls = {"members": instances, "calls": buckets, "steps": 2 * (instances - 1)}
    out: list[Transfer] = []
    if job.use_megatron_fsdp:
        # Megatron-FSDP with optim_grads_params (megatron_fsdp.py _register_fsdp_hooks): each
        # layer's parameters are gathered before its forward and again before its backward,
        # and its gradients reduce-scattered after every backward, micro-batch by micro-batch.
        m = job.micro_batches
        if intra > 1:
            out += [
                Transfer(
                    mode,
                    FSDP_GATHER,
                    m * 2 * ring * params * _PARAM_BYTES,
                    group_span,
                    FSDP_PREFETCH,
                    f"M x 2 x (n-1)/n x params x {_PARAM_BYTES}B, {named}",
                    **{**ring_calls, "calls": 2 * m * buckets},
                ),
                Transfer(
                    mode,
                    FSDP_REDUCE,
                    m * ring * params * grad_bytes,
                    group_span,
                    FSDP_PREFETCH,
                    f"M x (n-1)/n x params x {grad_bytes}B, {named}",
                    **{**ring_calls, "calls": m * buckets},
                ),
            ]
        if job.hsdp_outer_shard:
            # HSDP with the optimizer sharded over the groups too (mcore_fsdp_adapter's
            # hsdp_outer_dp_shard): the last micro-batch's reduce-scatter continues across
            # the groups, and the updated shards are gathered back after the step.
            out += [
                Transfer(
                    mode,
                    "reduce-scatter (grads) across the groups",
                    across * shard * grad_bytes,
                    span,
                    FSDP_PREFETCH,
                    f"(g-1)/g x params/n x {grad_bytes}B, g = {instances}",
                    **{**across_calls, "steps": instances - 1},
                ),
                Transfer(
                    mode,
                    "all-gather (params) across the groups",
                    across * shard * _PARAM_BYTES,
                    span,
                    FSDP_PREFETCH,
                    f"(g-1)/g x params/n x {_PARAM_BYTES}B, g = {instances}",
                    **{**across_calls, "steps": instances - 1},
                ),
            ]
        elif instances > 1:
            out.append(
                _across_groups(mode, across * shard, grad_bytes, instances, span, True, buckets)
            )
        return out
    if job.use_distributed_optimizer:
        out += [
            Transfer(
                mode,
                "reduce-scatter (grads)",
                ring * params * grad_bytes,
                group_span,
                "overlap_grad_reduce",
                f"(n-1)/n x params x {grad_bytes}B, {named}",
                **ring_calls,
            ),
            Transfer(
                mode,
                "all-gather (params)",
                ring * params * _PARAM_BYTES,
                group_span,
                "overlap_param_gather",
                f"(n-1)/n x params x {_PARAM_BYTES}B, {named}",
                **ring_calls,
            ),
        ]
        if instances > 1:
            # megatron-core's DDP all-reduces each group's reduce-scattered shard over the
            # groups (param_and_grad_buffer: inter_distributed_optimizer_instance_group).
            out.append(
                _across_groups(mode, across * shard, grad_bytes, instances, span, False, buckets)
            )
        return out
    ring = (n - 1) / n
    return [
        Transfer(
            mode,
            "all-reduce (grads)",
            2 * ring * params * grad_bytes,
            span,
            "overlap_grad_reduce",
            f"2 (n-1)/n x params x {grad_bytes}B, n = {n}",
            members=n,
            calls=buckets,
            steps=2 * (n - 1),
        )
    ]


def _across_groups(
    mode: str,
    share: float,
    grad_bytes: int,
    instances: int,
    span: int,
    fsdp: bool,
    buckets: int,
) -> Transfer:
    """The all-reduce of each group's gradient shard over the distributed-optimizer groups."""
    return Transfer(
        mode,
        "all-reduce (grads) across the groups",
        2 * share * grad_bytes,
        span,
        FSDP_PREFETCH if fsdp else "overlap_grad_reduce",
        f"2 (g-1)/g x params/n x {grad_bytes}B, g = {instances}",
        members=instances,
        calls=buckets,
        steps=2 * (instances - 1),
    )


def dp_transfers(
    job: JobDescription, *, dense_params: int, expert_params: int, bucket_size: object = None
) -> list[Transfer]:
    """DP's gradient and parameter collectives: dense over DP x CP, experts over expert-DP.

    CP ranks hold the same weights, so dense gradients reduce over DP x CP ranks. Distributed
    optimizer: grads reduce-scattered ((n-1)/n x P x grad bytes: 4 in fp32, 2 in bf16) and bf16
    params all-gathered ((n-1)/n x P x 2B), n the ranks of one distributed-optimizer instance,
    whose shards then all-reduce across the instances; Megatron-FSDP: the same collectives per
    layer in every micro-batch (the gather twice); otherwise one all-reduce (2 (n-1)/n x P x
    grad bytes).
    """
    tp, cp, pp, dp = job.tp_size, job.cp_size, job.pp_size, job.dp_size
    dense_intra, expert_intra = job.optimizer_shards
    transfers = _data_parallel(
        job, "dp", dp * cp, dense_intra, dense_params, tp * cp * dp, bucket_size
    )
    if job.model.moe:
        etp = job.etp_size
        edp = job.expert_data_parallel_size or job.world_size // (etp * job.ep_size * pp)
        transfers += _data_parallel(
            job, "dp-expert", edp, expert_intra, expert_params, etp * job.ep_size * edp, bucket_size
        )
    return transfers


def ep_transfers(job: JobDescription, stage: Stage) -> list[Transfer]:
    """EP's token all-to-alls (none for a dense model or at EP 1).

    Each MoE layer dispatches every token to its top-k experts and combines the results:
    forward and backward, 4 all-to-alls of tokens x topk x h x 2B, of which (EP-1)/EP leaves the
    GPU under uniform routing; a layer whose MoE forward is recomputed (full recompute, or
    selective recompute of ``moe``) adds its 2 forward ones.
    """
    ep = job.ep_size
    if not (job.model.moe and ep > 1):
        return []
    m = job.model
    # DeepEP's internode dispatch (csrc/kernels/internode.cu: one RDMA send per destination
    # node, with the bitmap of that node's NVLink ranks that need the token) and HybridEP's
    # hierarchical RDMA-then-NVLink design both cross the network once per remote node.
    routed = (m.num_moe_experts, m.moe_router_topk) if m.flex_backend else None
    seq, mbs = job.model.seq_length, stage.micro_batch_size
    local_tokens = mbs * seq // (job.cp_size * (job.tp_size if job.sequence_parallel else 1))
    a2a = local_tokens * job.model.moe_router_topk * job.model.hidden_size * _ACT_BYTES
    moe_layers = stage.moe_layers
    count = 4 * moe_layers + 2 * stage.moe_forward_recomputed * moe_layers
    return [
        Transfer(
            "ep",
            "all-to-all dispatch + combine",
            stage.micro_batches * count * (ep - 1) / ep * a2a,
            job.etp_size * ep,
            "overlap_moe_expert_parallel_comm",
            "M x 4/MoE layer x (EP-1)/EP x tokens x topk x h x 2B"
            + ("; the network carries one copy per remote NVLink domain" if routed else ""),
            group=ep,
            stride=job.etp_size,
            routed=routed,
        )
    ]


def _remote_domain_share(group: int, local: int, routed: tuple[int, int]) -> float:
    """Network bytes of a node-deduplicating all-to-all over those of one copy per expert.

    Under uniform routing a token's top-k experts fall on a remote NVLink domain (of the
    group's ceil(group / local)) with probability 1 - C(E - E/D, k) / C(E, k); the token crosses
    the network once per such domain instead of once per expert there, k (group - local) / group
    copies on average.
    """
    experts, topk = routed
    domains = math.ceil(group / local)
    per_domain = experts // domains
    hit = 1 - math.comb(experts - per_domain, topk) / math.comb(experts, topk)
    return (domains - 1) * hit / (topk * (group - local) / group)


def price(
    transfers: list[Transfer], *, plan: OverlapPlan, gpu: GpuSpec, nvlink_domain: int
) -> tuple[list[CommEntry], list[str]]:
    """Each transfer as a :class:`CommEntry` on its link, and the knobs the plan left off.

    A transfer whose group spans at most ``nvlink_domain`` consecutive ranks runs on NVLink,
    otherwise on the network. A ring collective or p2p ring takes :func:`~.collectives.ring_seconds`:
    at peak, its bytes over the slower of NVLink and the NICs its group's members in one domain
    drive; achieved, at NCCL's measured bus shares plus its latency per call. An EP all-to-all
    takes its bytes over the link's peak, and achieved, that over the share of peak it reaches
    (:data:`~.efficiency.ALLTOALL_ACHIEVED`).
    An all-to-all spanning more sends to its peers inside the domain over NVLink and to the
    others over the network at the same time: its time is the slower of the two shares, and it
    is placed on the network.
    It is hidden when its knob is on in ``plan`` (CP's ring always is). Empty transfers are
    dropped; the knobs come back in the order their first transfer appears.
    """

    def on(knob: str) -> bool:
        try:
            return bool(plan.value(knob))
        except KeyError:
            return False

    entries: list[CommEntry] = []
    knobs_off: list[str] = []
    for t in transfers:
        if t.nbytes <= 0:
            continue
        where: Link = "nvlink" if t.span <= nvlink_domain else "network"
        share = ALLTOALL_ACHIEVED.of
        bandwidth = (gpu.nvlink_gb_per_s if where == "nvlink" else gpu.network_gb_per_s) * 1e9
        seconds = t.nbytes / bandwidth
        achieved = seconds / share(where)
        if t.members > 1:
            # Rings and p2p rings: NCCL's bus efficiency, latency per call and the NICs the
            # group spans (:mod:`.collectives`).
            stride = max(1, t.span // t.members)
            per_domain = min(t.members, max(1, nvlink_domain // stride))
            if t.p2p and per_domain < t.members:
                per_domain = 1
            links = {
                "calls": t.calls,
                "steps": t.steps,
                "members": t.members,
                "per_domain": per_domain,
                "nvlink_bytes_per_s": gpu.nvlink_gb_per_s * 1e9,
                "network_bytes_per_s": gpu.network_gb_per_s * 1e9,
            }
            seconds = ring_seconds(t.nbytes, at_peak=True, **links)
            achieved = ring_seconds(t.nbytes, **links)
        elif t.group > 1 and where == "network":
            local = min(t.group, max(1, nvlink_domain // t.stride))
            peers = t.group - 1
            remote = t.nbytes * (t.group - local) / peers
            nvlink = t.nbytes * (local - 1) / peers
            if t.routed is not None:
                # Once per remote domain on the network; there, forwarded over NVLink to the
                # experts' GPUs other than the receiving one.
                nvlink += remote * (local - 1) / local
                remote *= _remote_domain_share(t.group, local, t.routed)
            over_network = remote / (gpu.network_gb_per_s * 1e9)
            over_nvlink = nvlink / (gpu.nvlink_gb_per_s * 1e9)
            seconds = max(over_network, over_nvlink)
            achieved = max(over_network / share("network"), over_nvlink / share("nvlink"))
        knob = t.knob
        hidden = (
            knob if knob in (CP_RING, FSDP_PREFETCH) or (knob is not None and on(knob)) else None
        )
        if knob is not None and hidden is None and knob not in knobs_off:
            knobs_off.append(knob)
        entries.append(
            CommEntry(t.mode, t.collective, t.nbytes, where, seconds, hidden, achieved, t.formula)
        )
    return entries, knobs_off
