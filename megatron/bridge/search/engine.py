"""The search: enumerate the layouts, keep those that fit, plan and cost them, rank them
(:func:`search`).

Every layout the layout rules accept (:mod:`.space`), with each overlap choice (:mod:`.overlap`),
is a candidate. A candidate is planned as ``explain`` plans a job (``RecipeSpec.plan``:
``check_layout``, then the overlap rules), its memory estimated (:func:`.fit.memory_of`) and,
when it fits, its step estimated (``estimate_step``). The costed candidates are ranked in bands
of the estimate's measured error, the simpler layout first within a band (:mod:`.rank`).

Two rounds, each best throughput bound first (:mod:`.bound`), keep a large search short:

1. every parallel layout (TP, PP, CP, EP, ETP and pipeline split) is costed once, at the
   smallest micro-batch and with the cheapest recompute, sharding and overlap that fit (the
   order of :data:`_CHEAPEST_FIRST`, each with the overlap choices fastest first); a layout
   whose weights alone exceed the GPU (:func:`.fit.weights_floor_bytes`) is dropped before its
   memory is estimated;
2. the best :data:`REFINED` parallel layouts of round 1 are costed with every micro-batch size,
   recompute, sharding and overlap choice, and every other one within a band of the
   ``top``-th with its other overlap choices (the simpler variants round 1 passed over: it kept
   the smallest micro-batch and the least recompute and sharding that fit).

In each round a layout whose bound is below the bar is skipped: the bar is the ``top``-th best
costed (round 1: the best ``max(REFINED, top)``) lowered by the band width, so that every layout
that could share a band with the rows shown is costed, and the simplest of the band is found.
Round 1 fixes the memory knobs at their cheapest fitting values, so a parallel layout that only a
larger micro-batch (whose grouped GEMMs run fuller) lifts into the top may be missed: the rows
shown are exact among the layouts the two rounds reach.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from megatron.bridge.search.bound import throughput_ceiling
from megatron.bridge.search.candidate import Candidate, plan_key
from megatron.bridge.search.fit import (
    MemoryVerdict,
    memory_floor,
    memory_of,
    weights_floor_bytes,
)
from megatron.bridge.search.overlap import (
    AS_REQUESTED,
    OverlapChoice,
    OverlapMode,
    check_overlap_modes,
    overlap_choices,
)
from megatron.bridge.search.rank import band_width, banded
from megatron.bridge.search.space import (
    RECOMPUTE,
    SHARDING,
    Layout,
    parallel_layouts,
)
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.memory.report import gib
from megatron.bridge.training.hardware import gpu_spec

if TYPE_CHECKING:
    from megatron.bridge.recipes.spec import RecipeSpec
    from megatron.bridge.training.comm_overlap import OverlapPlan, TEStatus
    from megatron.bridge.training.estimate.accuracy import MeasuredAccuracy

__all__ = ["REFINED", "SearchResult", "search"]

#: Parallel layouts of round 1 that round 2 costs with every micro-batch, recompute, sharding
#: and overlap choice.
REFINED = 8

#: Round 1's order: the recompute and sharding a parallel layout is first costed with; the
#: first that fits is kept (no recompute before any, the distributed optimizer before
#: Megatron-FSDP, which shards the weights too, before plain DDP, which shards nothing).
_CHEAPEST_FIRST: tuple[tuple[str, str], ...] = (
    ("none", "distributed_optimizer"),
    ("selective", "distributed_optimizer"),
    ("none", "megatron_fsdp"),
    ("selective", "megatron_fsdp"),
    ("full", "distributed_optimizer"),
    ("full", "megatron_fsdp"),
)

Progress = Callable[[int, int], None]
"""Called with (done, total) as the search goes."""


@dataclass(frozen=True)
class SearchResult:
    """The ranked candidates of a search and what it counted on the way."""

    base: RecipeSpec
    """The job searched: its model, GPU, precision and global batch."""
    world_sizes: tuple[int, ...]
    global_batch_size: int
    ranked: tuple[Candidate, ...]
    """Every costed candidate that fits, in bands, the simpler first within a band
    (:func:`.rank.banded`): ``ranked[0]`` is the top pick."""
    published: Candidate | None
    """The published layout for this GPU, precision and GPU count, costed with the overlap
    choice that predicts the most (None: none is published, or it does not fit by the estimate:
    see :attr:`published_note`)."""
    published_note: str | None
    """Why the published layout is not ranked, when one exists but is not."""
    counts: dict[str, int]
    """``layouts`` (tried, the published one included: each ends in exactly one of the others),
    ``pruned`` (weights above the GPU, before the memory estimate), ``rejected`` (refused by
    ``check_layout``, the overlap rules or the estimate), ``overlap_refused`` (an EP overlap the
    search tried of its own accord, refused by megatron-core's gate: the layout without it is
    tried too), ``no_fit`` (memory estimate above the capacity), ``skipped`` (throughput bound
    below the bar), ``costed`` (step estimated)."""
    band_width: float
    """A band's relative width: the estimate's measured median error for the model's family."""
    accuracy: MeasuredAccuracy
    """The measurement :attr:`band_width` comes from."""
    tp_overlap: OverlapMode = "auto"
    """How TP overlap was searched (:mod:`.overlap`)."""
    ep_overlap: OverlapMode = "auto"
    """How EP overlap was searched."""
    refusals: tuple[tuple[str, int], ...] = ()
    """The messages of the rules that refused layouts, with how many each refused, the most
    frequent first."""

    @property
    def fastest(self) -> Candidate | None:
        """The costed candidate with the highest predicted tokens/s/GPU (the top band's leader)."""
        return max(self.ranked, key=lambda c: c.tokens_per_s_per_gpu, default=None)

    def rank_of(self, candidate: Candidate) -> int:
        """1-based position of ``candidate`` in :attr:`ranked`."""
        return 1 + next(i for i, c in enumerate(self.ranked) if c.key == candidate.key)

    @property
    def published_rank(self) -> int | None:
        """1-based position of the published layout in :attr:`ranked`."""
        return None if self.published is None else self.rank_of(self.published)

    @property
    def published_band(self) -> int | None:
        """The band of the published layout (1: the top band, where it counts as found)."""
        return None if self.published is None else self.published.band

    @property
    def published_gap(self) -> float | None:
        """How far the published layout's tokens/s/GPU is below the top pick's (0.05 = 5%; 0
        when it predicts as much or more)."""
        if self.published is None or not self.ranked:
            return None
        top = self.ranked[0].tokens_per_s_per_gpu
        return max(0.0, 1 - self.published.tokens_per_s_per_gpu / top)


@dataclass(frozen=True)
class _Planned:
    """A layout planned, with its throughput bound; its memory not yet estimated."""

    spec: RecipeSpec
    plan: OverlapPlan
    ceiling: float
    layout: Layout | None


class _Search:
    """The state of one search: the base job, the counters, what was costed."""

    def __init__(
        self,
        base: RecipeSpec,
        *,
        te: TEStatus | str,
        global_batch_size: int,
        width: float,
        modes: tuple[OverlapMode, OverlapMode],
    ) -> None:
        self.base = base
        self.te = te
        self.gbs = global_batch_size
        self.width = width
        self.modes = modes
        # The GPU's bytes, as the memory estimate takes them (None: no GPU named, which the
        # memory estimate refuses).
        self.capacity: int | None = (
            None if base.job.gpu is None else gpu_spec(base.job.gpu).memory_bytes
        )
        self.counts = dict.fromkeys(
            ("layouts", "pruned", "rejected", "overlap_refused", "no_fit", "skipped", "costed"), 0
        )
        self.costed: dict[tuple, Candidate] = {}
        self.refusals: collections.Counter[str] = collections.Counter()

    def choices(self, tp_size: int, ep_size: int) -> tuple[OverlapChoice, ...]:
        """The overlap choices of a layout of these sizes, fastest first."""
        return overlap_choices(
            tp_size=tp_size,
            ep_size=ep_size,
            moe=self.base.job.model.moe,
            tp=self.modes[0],
            ep=self.modes[1],
        )

    def _refused(self, exc: ValueError) -> None:
        """Count a layout a rule refused, and the rule's message."""
        self.counts["rejected"] += 1
        self.refusals[str(exc)] += 1

    def _floor_exceeds(self, layout: Layout, world_size: int) -> bool:
        """The layout's weights alone exceed the GPU (checked before planning)."""
        if self.capacity is None:
            return False
        dp = world_size // (layout.tp * layout.cp * layout.pp)
        shards = dp * layout.cp if layout.sharding == "megatron_fsdp" else 1
        floor = weights_floor_bytes(
            self.base.job.model,
            tp=layout.tp,
            pp=layout.pp,
            ep=layout.ep,
            etp=layout.etp,
            dp_shards=shards,
        )
        return floor > self.capacity

    def plan_spec(
        self, spec: RecipeSpec, layout: Layout | None, choice: OverlapChoice
    ) -> _Planned | None:
        """Plan ``spec`` (a layout with the overlap ``choice``) and bound its throughput; None
        (counted) when a rule refuses it. The refusal of an EP overlap the search tries of its
        own accord (``--ep-overlap auto``) is counted apart: the layout without it is tried too."""
        try:
            plan = spec.plan(te=self.te)
            ceiling = throughput_ceiling(plan)
        except ValueError as exc:
            if choice.ep and self.modes[1] == "auto":
                self.counts["overlap_refused"] += 1
            else:
                self._refused(exc)
            return None
        return _Planned(spec, plan, ceiling, layout)

    def _pruned(self, layout: Layout, world_size: int) -> bool:
        """The layout's weights alone exceed the GPU (counted)."""
        if self._floor_exceeds(layout, world_size):
            self.counts["pruned"] += 1
            return True
        return False

    def plan(self, layout: Layout, world_size: int, *, prune: bool = True) -> _Planned | None:
        """:meth:`plan_spec` of a layout on ``world_size`` GPUs, after the weights floor
        (``prune``)."""
        self.counts["layouts"] += 1
        if prune and self._pruned(layout, world_size):
            return None
        spec = self.base.changed(
            world_size=world_size,
            global_batch_size=self.gbs,
            **layout.changes(),
            **layout.overlap.changes(self.base.overlap),
        )
        return self.plan_spec(spec, layout, layout.overlap)

    def probe(self, layout: Layout, world_size: int) -> _Planned | None:
        """Round 1's first look at a parallel layout: planned with its fastest overlap choice the
        rules accept (each refused one counted); its bound ranks the layout."""
        for choice in self.choices(layout.tp, layout.ep):
            # Not pruned by its weights here: a sharding first_fit tries may hold them.
            planned = self.plan(
                dataclasses.replace(layout, overlap=choice), world_size, prune=False
            )
            if planned is not None:
                return planned
        return None

    def cost_published(self, published: RecipeSpec) -> bool:
        """Cost the published layout with each overlap choice the search tries on its sizes
        (each variant is marked published; the result reports the fastest); whether any is
        costed."""
        costed = False
        for choice in self.choices(published.job.tp_size, published.job.ep_size):
            self.counts["layouts"] += 1
            spec = published.changed(**choice.changes(published.overlap))
            planned = self.plan_spec(spec, None, choice)
            memory = None if planned is None else self.fit(planned)[0]
            if memory is not None and self.cost(planned, memory, published=True) is not None:
                costed = True
        return costed

    def fit(self, planned: _Planned) -> tuple[MemoryVerdict | None, bool]:
        """The memory of a planned layout (None, counted, when it does not fit), and whether the
        job fits without the plan's userbuffers. That memory comes first: most layouts that do
        not fit stop there, before the plan's estimate and its fixes."""
        try:
            floor = memory_floor(planned.spec.job)
            memory = memory_of(planned.plan) if floor.fits else floor
        except ValueError as exc:
            self._refused(exc)
            return None, True
        if not memory.fits:
            self.counts["no_fit"] += 1
            return None, floor.fits
        return memory, True

    def first_fit(self, probe: _Planned) -> tuple[_Planned, MemoryVerdict] | None:
        """Round 1: the layout at the cheapest recompute, sharding and overlap that fit. ``probe``
        is the layout already planned (its bound ranks it); a trial with its knobs is not
        planned again, so each layout tried is planned, and counted, once. Overlap choices the
        probe passed over (refused) are not tried again at its recompute and sharding."""
        assert probe.layout is not None
        world_size = probe.spec.job.world_size
        choices = self.choices(probe.layout.tp, probe.layout.ep)
        for recompute, sharding in _CHEAPEST_FIRST:
            knobs = dataclasses.replace(probe.layout, recompute=recompute, sharding=sharding)
            same_knobs = knobs == probe.layout
            start = choices.index(probe.layout.overlap) if same_knobs else 0
            if self._floor_exceeds(knobs, world_size):
                # One layout pruned (the probe's was counted as tried when it was planned); the
                # floor holds for every overlap choice.
                self.counts["layouts"] += 0 if same_knobs else 1
                self.counts["pruned"] += 1
                continue
            for choice in choices[start:]:
                trial = dataclasses.replace(knobs, overlap=choice)
                planned = probe if trial == probe.layout else self.plan(trial, world_size)
                if planned is None:
                    continue
                memory, floor_fits = self.fit(planned)
                if memory is not None:
                    return planned, memory
                if not floor_fits:
                    break  # no overlap choice lowers the memory without userbuffers
        return None

    def cost(
        self, planned: _Planned, memory: MemoryVerdict, *, published: bool = False
    ) -> Candidate | None:
        """The step estimate of a planned layout that fits; None (counted) when the estimate
        refuses it."""
        key = plan_key(planned.plan)
        if key in self.costed:
            # The same job tried again (the published layout, generated by the search too):
            # one layout tried, costed once; the search's layout is kept for round 2.
            self.counts["layouts"] -= 1
            known = self.costed[key]
            if known.layout is None and planned.layout is not None:
                known = dataclasses.replace(known, layout=planned.layout)
                self.costed[key] = known
            return known
        try:
            estimate = estimate_step(planned.plan)
        except ValueError as exc:
            self._refused(exc)
            return None
        self.counts["costed"] += 1
        # The step's lanes (one interval per segment and stream) are for a step picture; a
        # search keeps thousands of candidates and draws none of them.
        assert estimate.prediction is not None
        estimate = dataclasses.replace(
            estimate,
            prediction=dataclasses.replace(estimate.prediction, timeline=(), link_intervals=()),
            without_overlap=None,
        )
        candidate = Candidate(
            spec=planned.spec,
            plan=planned.plan,
            memory=memory,
            estimate=estimate,
            layout=planned.layout,
            published=published,
        )
        self.costed[key] = candidate
        return candidate

    def best_first(
        self,
        planned: list[_Planned],
        keep: int,
        settle: Callable[[_Planned], tuple[_Planned, MemoryVerdict] | None],
    ) -> list[Candidate]:
        """Cost ``planned`` best bound first (``settle`` finds each one's memory, or a variant
        that fits), skipping what cannot reach a band of the best ``keep`` of all costed."""
        best = _Best(keep, self.width)
        for candidate in self.costed.values():
            best.add(candidate.tokens_per_s_per_gpu)
        out = []
        for item in sorted(planned, key=lambda p: -p.ceiling):
            if item.ceiling < best.bar:
                self.counts["skipped"] += 1
                continue
            settled = settle(item)
            if settled is None:
                continue
            if settled[0].ceiling < best.bar:
                self.counts["skipped"] += 1
                continue
            candidate = self.cost(*settled)
            if candidate is not None:
                best.add(candidate.tokens_per_s_per_gpu)
                out.append(candidate)
        return out

    def bar(self, keep: int) -> float:
        """What a layout's bound must reach to share a band with the best ``keep`` costed."""
        best = _Best(keep, self.width)
        for candidate in self.costed.values():
            best.add(candidate.tokens_per_s_per_gpu)
        return best.bar


class _Best:
    """The ``size`` best throughputs seen; :attr:`bar` is what a layout must reach to share a
    band (of relative ``width``) with one of them.

    The band holding the ``size``-th best row is led by a row at least as fast, so every row of
    it predicts at least ``(1 - width)`` times the ``size``-th best: a layout bounded below that
    cannot enter it, nor a band above it."""

    def __init__(self, size: int, width: float) -> None:
        self.size = size
        self.width = width
        self.heap: list[float] = []

    def add(self, value: float) -> None:
        if len(self.heap) < self.size:
            heapq.heappush(self.heap, value)
        elif value > self.heap[0]:
            heapq.heapreplace(self.heap, value)

    @property
    def bar(self) -> float:
        return self.heap[0] * (1 - self.width) if len(self.heap) == self.size else 0.0


def search(
    base: RecipeSpec,
    *,
    world_sizes: Sequence[int],
    global_batch_size: int,
    top: int = 10,
    te: TEStatus | str = "assume",
    refined: int = REFINED,
    progress: Progress | None = None,
    published: RecipeSpec | None = None,
    tp_overlap: OverlapMode = "auto",
    ep_overlap: OverlapMode = "auto",
) -> SearchResult:
    """Search the layouts of ``base``'s model on its GPU and precision for each of
    ``world_sizes`` at ``global_batch_size`` samples per step; rank those that fit.

    The ``top`` rows are exact among the layouts generated: every layout the search skips has
    a throughput bound (:func:`.bound.throughput_ceiling`) below any band they sit in.
    ``published`` is a layout to cost and rank beside the search's (the recipe's published run,
    whose custom pipeline layout and recompute modules the search does not generate).
    ``tp_overlap`` and ``ep_overlap`` say how TP and EP overlap are searched (:mod:`.overlap`;
    ``ValueError`` for EP overlap ``on`` on a dense model). The cluster's NVLink domain and
    node size are ``base``'s job's (``nvlink_domain``, ``gpus_per_node``), every layout's.
    ``progress`` is called with (done, total) as the search goes.
    """
    check_overlap_modes(tp=tp_overlap, ep=ep_overlap, moe=base.job.model.moe)
    width, accuracy = band_width(base.job.model)
    state = _Search(
        base,
        te=te,
        global_batch_size=global_batch_size,
        width=width,
        modes=(tp_overlap, ep_overlap),
    )
    note = None
    if published is not None and not state.cost_published(published):
        note = _why_not(published, state)
    work = [
        (w, layout, sizes)
        for w in world_sizes
        for layout, sizes in parallel_layouts(
            base.job.model, world_size=w, global_batch_size=global_batch_size
        )
    ]
    total = len(work) + refined * len(world_sizes)
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    # Round 1: each parallel layout, best bound first, at its cheapest fitting memory knobs.
    firsts: list[_Planned] = []
    sizes_of: dict[tuple[int, Layout], list[int]] = {}
    for world_size, layout, sizes in work:
        planned = state.probe(layout, world_size)
        if planned is not None:
            firsts.append(planned)
            sizes_of[(world_size, _parallel_part(layout))] = sizes
        step()

    round1 = state.best_first(firsts, max(refined, top), state.first_fit)

    # Round 2: the best parallel layouts with every micro-batch, recompute, sharding and
    # overlap choice; every other one that may share a band with the rows shown with its other
    # overlap choices (round 1 kept its smallest micro-batch and its least recompute and
    # sharding that fit, the simplest: what can be simpler is the overlap left off).
    bar = state.bar(top)
    chosen = heapq.nlargest(refined, round1, key=lambda c: c.tokens_per_s_per_gpu)
    keys = {c.key for c in chosen}
    banded_too = [c for c in round1 if c.key not in keys and c.tokens_per_s_per_gpu >= bar]
    total = len(work) + len(chosen) + len(banded_too)
    trials: list[_Planned] = []
    for candidate in chosen + banded_too:
        assert candidate.layout is not None
        world_size = candidate.spec.job.world_size
        every = candidate.key in keys
        sizes = sizes_of[(world_size, _parallel_part(candidate.layout))]
        for mbs in sizes if every else [candidate.layout.micro_batch_size]:
            for recompute in RECOMPUTE if every else [candidate.layout.recompute]:
                for sharding in SHARDING if every else [candidate.layout.sharding]:
                    knobs = dataclasses.replace(
                        candidate.layout,
                        micro_batch_size=mbs,
                        recompute=recompute,
                        sharding=sharding,
                    )
                    for choice in state.choices(knobs.tp, knobs.ep):
                        trial = dataclasses.replace(knobs, overlap=choice)
                        if trial == candidate.layout:
                            continue  # costed in round 1
                        planned = state.plan(trial, world_size)
                        if planned is not None:
                            trials.append(planned)
        step()

    def fitted(item: _Planned) -> tuple[_Planned, MemoryVerdict] | None:
        memory = state.fit(item)[0]
        return None if memory is None else (item, memory)

    state.best_first(trials, top, fitted)
    if progress is not None:
        progress(total, total)

    # The published candidate was costed first: a searched layout of the same job is it.
    ranked = banded(state.costed.values(), width)
    # The published layout at its best overlap choice, as it would run.
    published_candidate = max(
        (c for c in ranked if c.published), key=lambda c: c.tokens_per_s_per_gpu, default=None
    )
    return SearchResult(
        base=base,
        world_sizes=tuple(world_sizes),
        global_batch_size=global_batch_size,
        ranked=tuple(ranked),
        published=published_candidate,
        published_note=note,
        counts=state.counts,
        band_width=width,
        accuracy=accuracy,
        tp_overlap=tp_overlap,
        ep_overlap=ep_overlap,
        refusals=tuple(state.refusals.most_common()),
    )


def _parallel_part(layout: Layout) -> Layout:
    """The layout with the memory and overlap knobs at round 1's defaults: what identifies its
    grid and split."""
    return dataclasses.replace(
        layout,
        micro_batch_size=0,
        recompute="none",
        sharding="distributed_optimizer",
        overlap=AS_REQUESTED,
    )


def _why_not(spec: RecipeSpec, state: _Search) -> str:
    """Why the published layout is not ranked: the rule that refuses it, or its memory."""
    try:
        plan = spec.plan(te=state.te)
    except ValueError as exc:
        return f"refused: {exc}"
    memory = memory_of(plan)
    if not memory.fits:
        return (
            f"does not fit by the estimate: {gib(memory.total_bytes)} of "
            f"{gib(memory.capacity_bytes)}"
        )
    return "its step estimate is refused"
