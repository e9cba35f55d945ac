"""One step of the busiest pipeline stage, placed on megatron-core's schedule.

:func:`simulate` lays the stage's micro-batch forwards and backwards out in the order
megatron-core's schedules run them (``pipeline_parallel/schedules.py``: no pipelining, 1F1B
``forward_backward_pipelining_without_interleaving`` and the interleaved
``forward_backward_pipelining_with_interleaving``; with ``overlap_moe_expert_parallel_comm``
the combined 1F1B of ``pipeline_parallel/combined_1f1b.py``) and places each communication
stream in the compute window that schedule gives it:

- **in-layer streams** (TP, CP, PP, EP) travel with the segment they belong to. TP with
  ``tp_comm_overlap`` hides under the segment's GEMMs except the first of its TP ring chunks
  (1/TP of it); CP's K/V ring hides under core attention; PP's send/recv with
  ``overlap_p2p_comm`` under the segment; EP's all-to-alls with
  ``overlap_moe_expert_parallel_comm`` only in a combined forward-backward pair, slot by slot
  as ``TransformerLayerSchedulePlan.run`` pairs them (comm: combine-bwd | dispatch-fwd,
  dispatch-bwd | combine-fwd; compute: attention-fwd | MLP-bwd, MLP-fwd | attention-bwd), the
  stream's ``hideable`` share of what the slots allow.
  Streams on one link share it: together they hide at most the segment's compute.
- **gradient reduction** (DP reduce-scatter or all-reduce) with ``overlap_grad_reduce``:
  megatron-core enables grad sync only for each model chunk's last micro-batch, so the buckets
  of a chunk become ready through that micro-batch's backward and run on their link in the
  capacity the in-layer streams leave; what is still running when compute ends is exposed (at
  least the last bucket). Without the knob, it all runs after the backward.
- **parameter all-gather** with ``overlap_param_gather``: without ``align_param_gather`` each
  chunk gathers bucket by bucket from its first forward (the first bucket exposed, each next one
  under the previous bucket's layers); with it (interleaved) chunks 0 and 1 are dispatched at the
  start and chunk k+1 at chunk k's first forward; with
  ``overlap_param_gather_with_optimizer_step`` they are dispatched in the optimizer step (whose
  time the estimate does not model: chunk 0's gather counts as hidden there). Without the knob
  the gather follows the optimizer step, exposed.
- **the pipeline bubble**: (PP-1) x (forward + backward of one micro-batch of one chunk), which
  is (PP-1)/(VPP x m) of the ideal step, plus the 2 (PP-1) stage-boundary sends the first
  micro-batch's forward and the last one's backward wait for (their latency and bytes at
  achieved bandwidth, whatever VPP: so a deeper interleave shrinks the compute part of the
  bubble and not the sends), idle at the start of the stage's timeline.

Pure arithmetic over seconds; what the estimate leaves out is listed in its assumptions.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

__all__ = [
    "GradStream",
    "LayerStream",
    "ParamStream",
    "ScheduleInput",
    "StreamTime",
    "schedule_order",
    "simulate",
]


@dataclass(frozen=True)
class LayerStream:
    """A stream that travels with each forward and backward segment (TP, CP, PP, EP)."""

    key: int
    """Index of the stream in the estimate's communication list."""
    link: str
    """nvlink or network."""
    forward_seconds: float
    """Its time on the link in one forward segment (one micro-batch of one chunk)."""
    backward_seconds: float
    """Its time on the link in one backward segment."""
    hideable: float
    """Share of it that may hide (0: exposed; TP under userbuffers: (TP-1)/TP; EP: the measured
    share of what its slots allow)."""
    window: str
    """What it hides under: gemm, core (core attention), all (the segment), a2a (EP slots)."""


@dataclass(frozen=True)
class GradStream:
    """A gradient reduction (reduce-scatter or all-reduce) of one DP group."""

    key: int
    link: str
    seconds: float
    """Its whole time on the link per step."""
    buckets_per_chunk: int
    overlap: bool
    """overlap_grad_reduce."""


@dataclass(frozen=True)
class ParamStream:
    """The distributed optimizer's parameter all-gather of one DP group."""

    key: int
    link: str
    seconds: float
    buckets_per_chunk: int
    overlap: bool
    """overlap_param_gather."""
    align: bool
    """align_param_gather (interleaved pipelines)."""
    with_optimizer_step: bool
    """overlap_param_gather_with_optimizer_step."""


@dataclass(frozen=True)
class ScheduleInput:
    """The stage's compute per segment and the schedule's shape."""

    forward: float
    """Seconds of one micro-batch's forward through one model chunk."""
    backward: float
    """Seconds of its backward (recomputed forwards included)."""
    attention_share: float
    """Share of a segment's compute in the attention block (EP's pre-dispatch part)."""
    core_attention_share: float
    """Share of a segment's compute in core attention (CP's window; the rest are GEMMs)."""
    micro_batches: int
    vpp: int
    pp: int
    rank: int
    ep_overlap: bool
    """overlap_moe_expert_parallel_comm: forward and backward run as combined pairs."""
    layer_streams: tuple[LayerStream, ...] = ()
    grad_streams: tuple[GradStream, ...] = ()
    param_streams: tuple[ParamStream, ...] = ()
    pipeline_hop: float = 0.0
    """Seconds of one stage-boundary send at achieved bandwidth, latency included: the bubble's
    first forward and last backward cross PP - 1 boundaries each, waiting for every send."""


@dataclass
class StreamTime:
    """Where one stream's time went."""

    hidden: float = 0.0
    exposed: float = 0.0
    window: float = 0.0
    intervals: list[tuple[float, float]] = field(default_factory=list)
    """(start, seconds) it occupies its link, for the picture."""


@dataclass
class Timeline:
    """The simulated step."""

    step: float
    compute: float
    bubble: float
    compute_end: float
    segments: list[tuple[str, float, float]]
    """(kind, start, seconds): bubble, forward, backward, 1f1b (compute only), stall (waiting
    on communication: a parameter all-gather, or the in-layer TP/CP/EP time a segment leaves
    exposed), tail (exposed communication after the last compute)."""
    streams: dict[int, StreamTime]


@dataclass
class _Segment:
    kind: str
    start: float
    compute: float
    duration: float
    free: dict[str, float]
    """Share of the segment's duration each link is free for background transfers."""


def _order(inp: ScheduleInput) -> tuple[list[int], list[int], int]:
    """Forward and backward chunk ids in schedule order, and the warmup forwards."""
    return schedule_order(
        micro_batches=inp.micro_batches,
        vpp=inp.vpp,
        pp=inp.pp,
        rank=inp.rank,
        ep_overlap=inp.ep_overlap,
    )


def schedule_order(
    *, micro_batches: int, vpp: int, pp: int, rank: int, ep_overlap: bool
) -> tuple[list[int], list[int], int]:
    """The model chunk of each forward and of each backward of pipeline ``rank``, in the order
    megatron-core's schedules run them, and the forwards before the first backward (warmup).

    ``pipeline_parallel/schedules.py``: 1F1B warms up with PP - rank - 1 forwards; the
    interleaved schedule with (PP - rank - 1) x 2 + (VPP - 1) x PP, taking PP micro-batches
    through a chunk before the next (``microbatch_group_size_per_vp_stage`` = PP); the combined
    1F1B of EP overlap runs one forward more before its first pair. After the warmup each
    forward is followed by one backward.
    """
    m, v, p, r = micro_batches, vpp, pp, rank
    total = m * v
    fwd = [(k // p) % v if v > 1 else 0 for k in range(total)]
    bwd = [v - 1 - (k // p) % v if v > 1 else 0 for k in range(total)]
    if p == 1:
        warmup = 1 if ep_overlap else 0
    elif v > 1:
        warmup = (p - r - 1) * 2 + (v - 1) * p + (1 if ep_overlap else 0)
    else:
        warmup = p - r - 1
    return fwd, bwd, min(warmup, total)


def simulate(inp: ScheduleInput) -> Timeline:
    """Lay one step of the stage out on its schedule; see the module docstring."""
    f, b = inp.forward, inp.backward
    streams = {
        s.key: StreamTime() for s in (*inp.layer_streams, *inp.grad_streams, *inp.param_streams)
    }
    segments: list[_Segment] = []
    drawn: list[tuple[str, float, float]] = []
    bubble = (inp.pp - 1) * (f + b + 2 * inp.pipeline_hop)
    t = 0.0
    if bubble > 0:
        drawn.append(("bubble", 0.0, bubble))
        t = bubble
    fwd, bwd, warmup = _order(inp)
    total = len(fwd)

    # Parameter all-gather: when each chunk's gather is dispatched and where it runs.
    first_forward_seen: set[int] = set()
    ag_link_free: dict[str, float] = {}
    dispatch: dict[tuple[int, int], float] = {}

    def param_stall(chunk: int, start: float) -> float:
        stall = 0.0
        for s in inp.param_streams:
            st = streams[s.key]
            t_c = s.seconds / inp.vpp
            nb = s.buckets_per_chunk
            if not s.overlap or t_c <= 0:
                continue
            if s.with_optimizer_step or (s.align and inp.vpp > 1):
                if s.with_optimizer_step:
                    when = -math.inf
                elif chunk <= 1:
                    when = segments[0].start if segments else start
                else:
                    when = dispatch.get((s.key, chunk - 1), start)
                if s.with_optimizer_step and chunk == 0:
                    begin = start - t_c  # gathered under the optimizer step
                else:
                    begin = max(when, ag_link_free.get(s.link, -math.inf))
                    begin = begin if begin > -math.inf else start
                ag_link_free[s.link] = begin + t_c
                # Bucket j done at begin + (j+1) t_c/nb, needed at start + j f/nb.
                late = max(begin + (j + 1) * t_c / nb - (start + j * f / nb) for j in (0, nb - 1))
                exposed = min(t_c, max(0.0, late))
                window_start = begin
            else:
                # On demand: bucket 0 when the forward reaches it, each next one under the
                # previous bucket's layers.
                exposed = t_c / nb + (nb - 1) * max(0.0, (t_c - f) / nb)
                window_start = start
                ag_link_free[s.link] = start + t_c + max(0.0, exposed - t_c / nb)
            st.exposed += exposed
            st.hidden += t_c - exposed
            st.window += max(t_c - exposed, start + exposed + f - window_start)
            st.intervals.append((max(window_start, 0.0), t_c))
            stall = max(stall, exposed)
        return stall

    # What the in-layer streams hide and expose under one segment depends only on whether it runs
    # a forward and a backward: computed once per kind of segment.
    layer_effects: dict[str, tuple[float, list, float, dict[str, float]]] = {}

    def _layer_effects(
        has_fwd: bool, has_bwd: bool
    ) -> tuple[float, list[tuple[int, float, float, float]], float, dict[str, float]]:
        d = (f if has_fwd else 0.0) + (b if has_bwd else 0.0)
        paired = has_fwd and has_bwd and inp.ep_overlap
        by_link: dict[str, list[tuple[LayerStream, float, float, float]]] = {}
        for s in inp.layer_streams:
            secs = (s.forward_seconds if has_fwd else 0.0) + (
                s.backward_seconds if has_bwd else 0.0
            )
            if secs <= 0:
                continue
            if s.window == "a2a":
                if paired:
                    a_f, a_b = s.forward_seconds, s.backward_seconds
                    att_f, att_b = f * inp.attention_share, b * inp.attention_share
                    mlp = (f + b) * (1 - inp.attention_share)
                    slots = ((a_b / 2, att_f), ((a_f + a_b) / 2, mlp), (a_f / 2, att_b))
                    hideable = sum(min(c, w) for c, w in slots) * s.hideable
                else:
                    hideable = 0.0
                window = d
            else:
                window = {
                    "gemm": d * (1 - inp.core_attention_share),
                    "core": d * inp.core_attention_share,
                    "all": d,
                }[s.window]
                hideable = min(s.hideable * secs, window)
            by_link.setdefault(s.link, []).append((s, secs, hideable, window))
        exposed_total = 0.0
        rows: list[tuple[int, float, float, float]] = []
        busy: dict[str, float] = {}
        for link, items in by_link.items():
            want = sum(h for _s, _secs, h, _w in items)
            scale = min(1.0, d / want) if want > 0 else 0.0
            for s, secs, h, w in items:
                hid = h * scale
                rows.append((s.key, secs, hid, w))
                exposed_total += secs - hid
            busy[link] = sum(secs for _s, secs, _h, _w in items)
        duration = d + exposed_total
        free = (
            {link: max(0.0, 1 - used / duration) for link, used in busy.items()} if duration else {}
        )
        return d, rows, duration, free

    def place(kind: str, fwd_chunk: int | None, has_bwd: bool) -> None:
        nonlocal t
        stall = 0.0
        if fwd_chunk is not None and fwd_chunk not in first_forward_seen:
            first_forward_seen.add(fwd_chunk)
            for s in inp.param_streams:
                dispatch[(s.key, fwd_chunk)] = t
            stall = param_stall(fwd_chunk, t)
            if stall > 0:
                drawn.append(("stall", t, stall))
                t += stall
        effects = layer_effects.get(kind)
        if effects is None:
            effects = layer_effects[kind] = _layer_effects(fwd_chunk is not None, has_bwd)
        d, _rows, duration, free = effects
        segments.append(_Segment(kind, t, d, duration, free))
        drawn.append((kind, t, d))
        if duration > d:
            # The in-layer communication this segment leaves exposed (TP, CP, EP) holds the
            # compute lane without computing: drawn as a stall after the segment's compute.
            drawn.append(("stall", t + d, duration - d))
        t += duration

    for i in range(warmup):
        place("forward", fwd[i], False)
    for i in range(total - warmup):
        if inp.ep_overlap:
            place("1f1b", fwd[warmup + i], True)
        else:
            place("forward", fwd[warmup + i], False)
            place("backward", None, True)
    for _ in range(total - warmup, total):
        place("backward", None, True)
    _add_layer_time(streams, layer_effects, segments)
    compute_end = t
    compute = sum(s.compute for s in segments)

    # Gradient reduction: the buckets of each chunk, ready through the backward segment of its
    # last micro-batch, run on their link in the capacity the in-layer streams leave.
    backward_segments = [s for s in segments if s.kind in ("backward", "1f1b")]
    last_of_chunk: dict[int, _Segment] = {}
    for seg, chunk in zip(backward_segments, bwd, strict=True):
        last_of_chunk[chunk] = seg
    pieces: list[tuple[float, int, float]] = []
    for s in inp.grad_streams:
        nb = s.buckets_per_chunk
        for chunk in range(inp.vpp):
            seg = last_of_chunk[chunk]
            for j in range(nb):
                ready = seg.start + (j + 1) / nb * seg.duration if s.overlap else compute_end
                pieces.append((ready, s.key, s.seconds / inp.vpp / nb))
    pieces.sort(key=lambda p: p[0])
    links = {s.key: s.link for s in inp.grad_streams}
    # Segments are laid out one after another, so their ends never decrease: a bucket's run
    # starts at the first segment ending after it (a search, not a walk from the step's start).
    ends = [seg.start + seg.duration for seg in segments]
    link_free: dict[str, float] = {}
    end = compute_end
    for ready, key, secs in pieces:
        link = links[key]
        start = max(ready, link_free.get(link, 0.0))
        finish = _run_on(link, start, secs, segments, ends, compute_end)
        link_free[link] = finish
        st = streams[key]
        exposed = min(secs, max(0.0, finish - max(start, compute_end)))
        st.exposed += exposed
        st.hidden += secs - exposed
        st.intervals.append((start, finish - start))
        end = max(end, finish)
    for s in inp.grad_streams:
        first = min((p[0] for p in pieces if p[1] == s.key), default=compute_end)
        streams[s.key].window = max(streams[s.key].hidden, compute_end - first)
    if end > compute_end:
        drawn.append(("tail", compute_end, end - compute_end))
    # A parameter gather without overlap follows the optimizer step.
    for s in inp.param_streams:
        if not s.overlap and s.seconds > 0:
            st = streams[s.key]
            st.exposed += s.seconds
            st.intervals.append((end, s.seconds))
            drawn.append(("tail", end, s.seconds))
            end += s.seconds
    return Timeline(
        step=end,
        compute=compute,
        bubble=bubble,
        compute_end=compute_end,
        segments=drawn,
        streams=streams,
    )


def _add_layer_time(
    streams: dict[int, StreamTime],
    effects: dict[
        str, tuple[float, list[tuple[int, float, float, float]], float, dict[str, float]]
    ],
    segments: list[_Segment],
) -> None:
    """Add each in-layer stream's hidden, exposed and window time and its link intervals, segment
    by segment in schedule order (``effects``: what each kind of segment adds)."""
    by_stream: dict[int, dict[str, tuple[float, float, float, float]]] = {}
    for key, (_d, rows, _duration, _free) in effects.items():
        for stream_key, secs, hid, w in rows:
            by_stream.setdefault(stream_key, {})[key] = (secs, hid, secs - hid, w)
    for stream_key, by_kind in by_stream.items():
        st = streams[stream_key]
        hidden, exposed, window, intervals = st.hidden, st.exposed, st.window, st.intervals
        for seg in segments:
            row = by_kind.get(seg.kind)
            if row is not None:
                secs, hid, exp, w = row
                hidden += hid
                exposed += exp
                window += w
                intervals.append((seg.start, secs))
        st.hidden, st.exposed, st.window = hidden, exposed, window


def _run_on(
    link: str,
    start: float,
    seconds: float,
    segments: list[_Segment],
    ends: list[float],
    compute_end: float,
) -> float:
    """When a background transfer of ``seconds`` started at ``start`` finishes on ``link``
    (``ends``: each segment's end, in order)."""
    t, left = start, seconds
    if left <= 0:
        return t
    for index in range(bisect.bisect_right(ends, t), len(segments)):
        seg, seg_end = segments[index], ends[index]
        rate = seg.free.get(link, 1.0)
        span = seg_end - max(t, seg.start)
        if rate * span >= left:
            return max(t, seg.start) + left / rate
        left -= rate * span
        t = seg_end
    return max(t, compute_end) + left
