"""The search: enumerate the layouts, keep those that fit, plan and cost them, rank them
(:func:`search`).

Every layout the layout rules accept (:mod:`.space`) is a candidate. A candidate is planned as
``explain`` plans a job (``RecipeSpec.plan``: ``check_layout``, then the overlap rules), its
memory estimated (:func:`.fit.memory_of`) and, when it fits, its step estimated
(``estimate_step``); candidates are ranked by predicted tokens/s/GPU.

Two rounds, each best throughput bound first (:mod:`.bound`), keep a large search short:

1. every parallel layout (TP, PP, CP, EP, ETP and pipeline split) is costed once, at the
   smallest micro-batch and with the cheapest recompute and sharding that fit (the order of
   :data:`_CHEAPEST_FIRST`); a layout whose weights alone exceed the GPU
   (:func:`.fit.weights_floor_bytes`) is dropped before its memory is estimated;
2. the best :data:`REFINED` parallel layouts of round 1 are costed with every micro-batch size,
   recompute and sharding.

In each round a layout whose bound is below the best already costed (the ``top`` rows, or the
:data:`REFINED` of round 1) is skipped: it could not have entered them. Round 1 fixes the memory
knobs at their cheapest fitting values, so a parallel layout that only a larger micro-batch
(whose grouped GEMMs run fuller) lifts into the top may be missed: the top rows are exact among
the layouts the two rounds reach.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from megatron.bridge.search.bound import throughput_ceiling
from megatron.bridge.search.fit import (
    MemoryVerdict,
    memory_floor,
    memory_of,
    weights_floor_bytes,
)
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
    from megatron.bridge.training.estimate import Estimate

__all__ = ["REFINED", "Candidate", "SearchResult", "search"]

#: Parallel layouts of round 1 that round 2 costs with every micro-batch, recompute and sharding.
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
class Candidate:
    """One costed layout."""

    spec: RecipeSpec
    """The job, as ``explain`` would plan it."""
    plan: OverlapPlan
    """Its overlap plan."""
    memory: MemoryVerdict
    """Its memory per GPU."""
    estimate: Estimate
    """Its step estimate."""
    layout: Layout | None
    """The searched layout; None for a published layout the search does not generate."""
    published: bool = False
    """This is the published layout of the recipe for this GPU, precision and GPU count."""

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Predicted tokens/s/GPU (with the plan's overlap)."""
        assert self.estimate.prediction is not None  # estimate_step always predicts
        return self.estimate.prediction.tokens_per_s_per_gpu

    @property
    def key(self) -> tuple:
        """What makes two candidates the same job."""
        return _job_key(self.spec)


@dataclass(frozen=True)
class SearchResult:
    """The ranked candidates of a search and what it counted on the way."""

    base: RecipeSpec
    """The job searched: its model, GPU, precision and global batch."""
    world_sizes: tuple[int, ...]
    global_batch_size: int
    ranked: tuple[Candidate, ...]
    """Every costed candidate that fits, fastest first."""
    published: Candidate | None
    """The published layout for this GPU, precision and GPU count, costed (None: none is
    published, or it does not fit by the estimate: see :attr:`published_note`)."""
    published_note: str | None
    """Why the published layout is not ranked, when one exists but is not."""
    counts: dict[str, int]
    """``layouts`` (tried, the published one included: each ends in exactly one of the others),
    ``pruned`` (weights above the GPU, before the memory estimate), ``rejected`` (refused by
    ``check_layout``, the overlap rules or the estimate), ``no_fit`` (memory estimate above the
    capacity), ``skipped`` (throughput bound below the best costed), ``costed`` (step
    estimated)."""
    refusals: tuple[tuple[str, int], ...] = ()
    """The messages of the rules that refused layouts, with how many each refused, the most
    frequent first."""

    @property
    def published_rank(self) -> int | None:
        """1-based rank of the published layout among the ranked candidates."""
        if self.published is None:
            return None
        return 1 + sum(
            c.tokens_per_s_per_gpu > self.published.tokens_per_s_per_gpu for c in self.ranked
        )

    @property
    def published_gap(self) -> float | None:
        """How far the published layout's tokens/s/GPU is below the top one (0.05 = 5%)."""
        if self.published is None or not self.ranked:
            return None
        top = self.ranked[0].tokens_per_s_per_gpu
        return max(0.0, 1 - self.published.tokens_per_s_per_gpu / top)


def _job_key(spec: RecipeSpec) -> tuple:
    job = spec.job
    return (
        job.world_size,
        job.micro_batch_size,
        job.use_distributed_optimizer,
        job.use_megatron_fsdp,
        job.model,
    )


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
        self, base: RecipeSpec, *, te: TEStatus | str, global_batch_size: int, options: dict
    ) -> None:
        self.base = base
        self.te = te
        self.gbs = global_batch_size
        self.options = options
        # The GPU's bytes, as the memory estimate takes them (None: no GPU named, which the
        # memory estimate refuses).
        self.capacity: int | None = (
            None if base.job.gpu is None else gpu_spec(base.job.gpu).memory_bytes
        )
        self.counts = dict.fromkeys(
            ("layouts", "pruned", "rejected", "no_fit", "skipped", "costed"), 0
        )
        self.costed: dict[tuple, Candidate] = {}
        self.refusals: collections.Counter[str] = collections.Counter()

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

    def plan_spec(self, spec: RecipeSpec, layout: Layout | None) -> _Planned | None:
        """Plan ``spec`` and bound its throughput; None (counted) when a rule refuses it."""
        try:
            plan = spec.plan(te=self.te)
            ceiling = throughput_ceiling(plan, **self.options)
        except ValueError as exc:
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
            world_size=world_size, global_batch_size=self.gbs, **layout.changes()
        )
        return self.plan_spec(spec, layout)

    def fit(self, planned: _Planned) -> MemoryVerdict | None:
        """The memory of a planned layout; None (counted) when it does not fit. The job's
        memory without the plan's userbuffers comes first: most layouts that do not fit stop
        there, before the plan's estimate and its fixes."""
        try:
            floor = memory_floor(planned.spec.job)
            memory = memory_of(planned.plan) if floor.fits else floor
        except ValueError as exc:
            self._refused(exc)
            return None
        if not memory.fits:
            self.counts["no_fit"] += 1
            return None
        return memory

    def first_fit(self, probe: _Planned) -> tuple[_Planned, MemoryVerdict] | None:
        """Round 1: the layout at the cheapest recompute and sharding that fit. ``probe`` is the
        layout already planned (its bound ranks it); a trial with its knobs is not planned
        again, so each layout tried is planned, and counted, once."""
        assert probe.layout is not None
        world_size = probe.spec.job.world_size
        for recompute, sharding in _CHEAPEST_FIRST:
            trial = dataclasses.replace(probe.layout, recompute=recompute, sharding=sharding)
            if trial == probe.layout:
                planned = None if self._pruned(trial, world_size) else probe
            else:
                planned = self.plan(trial, world_size)
            memory = None if planned is None else self.fit(planned)
            if memory is not None:
                return planned, memory
        return None

    def cost(
        self, planned: _Planned, memory: MemoryVerdict, *, published: bool = False
    ) -> Candidate | None:
        """The step estimate of a planned layout that fits; None (counted) when the estimate
        refuses it."""
        key = _job_key(planned.spec)
        if key in self.costed:
            # The same job tried again (the published layout, generated by the search too):
            # one layout tried, costed once.
            self.counts["layouts"] -= 1
            return self.costed[key]
        try:
            estimate = estimate_step(planned.plan, **self.options)
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
        that fits), skipping what cannot enter the best ``keep`` of all costed so far."""
        best = _Best(keep)
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


class _Best:
    """The ``size`` best throughputs seen; :attr:`bar` is what a layout must beat to enter."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.heap: list[float] = []

    def add(self, value: float) -> None:
        if len(self.heap) < self.size:
            heapq.heappush(self.heap, value)
        elif value > self.heap[0]:
            heapq.heapreplace(self.heap, value)

    @property
    def bar(self) -> float:
        return self.heap[0] if len(self.heap) == self.size else 0.0


def _parallel_layouts(
    base: RecipeSpec, world_size: int, gbs: int
) -> list[tuple[Layout, list[int]]]:
    """Each parallel layout (grid and pipeline split) at its smallest micro-batch, with the
    micro-batch sizes it can run."""
    return list(parallel_layouts(base.job.model, world_size=world_size, global_batch_size=gbs))


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
    **estimate_options: int | None,
) -> SearchResult:
    """Search the layouts of ``base``'s model on its GPU and precision for each of
    ``world_sizes`` at ``global_batch_size`` samples per step; rank those that fit.

    The ``top`` best are exact among the layouts generated: every layout the search skips has
    a throughput bound (:func:`.bound.throughput_ceiling`) below them. ``published`` is a layout
    to cost and rank beside the search's (the recipe's published run, whose custom pipeline
    layout and recompute modules the search does not generate). ``estimate_options`` go to
    ``estimate_step`` (``gpus_per_node``, ``nvlink_domain``). ``progress`` is called with
    (done, total) as the search goes.
    """
    state = _Search(base, te=te, global_batch_size=global_batch_size, options=estimate_options)
    published_candidate, note = None, None
    if published is not None:
        state.counts["layouts"] += 1
        planned = state.plan_spec(published, None)
        memory = None if planned is None else state.fit(planned)
        found = None if memory is None else state.cost(planned, memory, published=True)
        if found is None:
            note = _why_not(published, state)
        else:
            published_candidate = found
    work = [
        (w, layout, sizes)
        for w in world_sizes
        for layout, sizes in _parallel_layouts(base, w, global_batch_size)
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
        # Not pruned by its weights here: a sharding first_fit tries may hold them.
        planned = state.plan(layout, world_size, prune=False)
        if planned is not None:
            firsts.append(planned)
            sizes_of[(world_size, _parallel_part(layout))] = sizes
        step()

    def cheapest(item: _Planned) -> tuple[_Planned, MemoryVerdict] | None:
        return state.first_fit(item)

    round1 = state.best_first(firsts, max(refined, top), cheapest)

    # Round 2: the best parallel layouts with every micro-batch, recompute and sharding.
    chosen = heapq.nlargest(refined, round1, key=lambda c: c.tokens_per_s_per_gpu)
    trials: list[_Planned] = []
    for candidate in chosen:
        assert candidate.layout is not None
        world_size = candidate.spec.job.world_size
        for mbs in sizes_of[(world_size, _parallel_part(candidate.layout))]:
            for recompute in RECOMPUTE:
                for sharding in SHARDING:
                    trial = dataclasses.replace(
                        candidate.layout,
                        micro_batch_size=mbs,
                        recompute=recompute,
                        sharding=sharding,
                    )
                    if trial == candidate.layout:
                        continue  # costed in round 1
                    planned = state.plan(trial, world_size)
                    if planned is not None:
                        trials.append(planned)
        step()

    def fitted(item: _Planned) -> tuple[_Planned, MemoryVerdict] | None:
        memory = state.fit(item)
        return None if memory is None else (item, memory)

    state.best_first(trials, top, fitted)
    if progress is not None:
        progress(total, total)

    ranked = sorted(state.costed.values(), key=lambda c: -c.tokens_per_s_per_gpu)
    if published_candidate is not None:
        published_candidate = dataclasses.replace(published_candidate, published=True)
        ranked = [published_candidate if c.key == published_candidate.key else c for c in ranked]
    return SearchResult(
        base=base,
        world_sizes=tuple(world_sizes),
        global_batch_size=global_batch_size,
        ranked=tuple(ranked),
        published=published_candidate,
        published_note=note,
        counts=state.counts,
        refusals=tuple(state.refusals.most_common()),
    )


def _parallel_part(layout: Layout) -> Layout:
    """The layout with the memory knobs at round 1's defaults: what identifies its grid and split."""
    return dataclasses.replace(
        layout, micro_batch_size=0, recompute="none", sharding="distributed_optimizer"
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
