"""The order of a search's rows: bands of predictions the estimate cannot tell apart, and the
simpler layout first within a band (:func:`banded`).

**Bands.** The step estimate's error is measured on NVIDIA's published rows, per family of
models (``estimate.accuracy.measured_accuracy``: the median of |predicted / published - 1|, the
figure every estimate prints). Two layouts whose predictions differ by less than that are not
ranked by the estimate: it cannot tell them apart. The bands are formed greedily from the top:
the fastest row not yet banded leads a band, and every row within the error of it (tokens/s/GPU
at least ``(1 - error)`` times the leader's) joins it.

**Simplicity.** Within a band the simpler layout comes first, by :data:`SIMPLICITY`, criterion after
criterion: what an engineer would not add unless it paid (a TP group across NVLink domains, whose
every layer's collectives cross the network at its latency per ring step and without TP overlap,
which Transformer Engine's userbuffers run only inside a domain:
:func:`~megatron.bridge.training.comm_overlap.rules.tp.tp_group_domain_crossed`; a parallel
dimension, an interleaved or uneven pipeline, recompute, an overlap's machinery, sharding beyond the
distributed optimizer, a wider model-parallel group, a larger micro-batch). A more complex layout
comes first only from a better band, that is, where it pays more than the estimate's error. Equal in
all of them, the faster first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from megatron.bridge.search.candidate import SEARCHED_KNOBS, Candidate, knob_on
from megatron.bridge.training.comm_overlap.rules.tp import tp_group_domain_crossed
from megatron.bridge.training.estimate.accuracy import MeasuredAccuracy, measured_accuracy
from megatron.bridge.training.job import ModelDescription

__all__ = ["SIMPLICITY", "band_width", "banded", "simplicity_key"]


def band_width(model: ModelDescription) -> tuple[float, MeasuredAccuracy]:
    """The relative width of a band for ``model`` (its family's measured median error; 0 where
    no published row measures the family: only equal predictions share a band), and the
    measurement it comes from."""
    accuracy = measured_accuracy(model)
    return accuracy.median_abs_error or 0.0, accuracy


def _tp_across_domains(c: Candidate) -> int:
    return int(tp_group_domain_crossed(c.spec.job) is not None)


def _parallel_dims(c: Candidate) -> int:
    job = c.spec.job
    return sum(size > 1 for size in (job.tp_size, job.pp_size, job.cp_size, job.ep_size))


def _interleaved(c: Candidate) -> int:
    return int(bool(c.spec.job.vpp_size and c.spec.job.vpp_size > 1))


def _uneven_split(c: Candidate) -> int:
    m = c.spec.job.model
    return int(
        m.pipeline_model_parallel_layout is not None
        or m.num_layers_in_first_pipeline_stage is not None
        or m.num_layers_in_last_pipeline_stage is not None
        or m.account_for_embedding_in_pipeline_split
        or m.account_for_loss_in_pipeline_split
    )


def _recompute(c: Candidate) -> int:
    return {None: 0, "selective": 1, "full": 2}[c.spec.job.model.recompute_granularity]


def _overlaps(c: Candidate) -> int:
    return sum(knob_on(c.plan, knob) for knob in SEARCHED_KNOBS)


def _sharding(c: Candidate) -> int:
    job = c.spec.job
    if job.use_megatron_fsdp:
        return 2
    return 0 if job.use_distributed_optimizer else 1


def _model_parallel(c: Candidate) -> int:
    job = c.spec.job
    return job.tp_size * job.pp_size * job.cp_size * job.ep_size


def _micro_batch(c: Candidate) -> int:
    return c.spec.job.micro_batch_size or 0


#: The simplicity order within a band, first criterion first: each one's words and its value
#: (lower is simpler).
SIMPLICITY: tuple[tuple[str, Callable[[Candidate], int]], ...] = (
    ("every TP group inside one NVLink domain", _tp_across_domains),
    ("fewer parallel dimensions (TP, PP, CP, EP above 1)", _parallel_dims),
    ("no interleaved pipeline (VPP)", _interleaved),
    ("an even pipeline split", _uneven_split),
    ("less recompute (none, selective, full)", _recompute),
    ("fewer overlaps to run (TP userbuffers, EP combined 1F1B)", _overlaps),
    ("the distributed optimizer before plain DDP before Megatron-FSDP", _sharding),
    ("a smaller model-parallel group (TP x PP x CP x EP)", _model_parallel),
    ("a smaller micro-batch", _micro_batch),
)


def simplicity_key(candidate: Candidate) -> tuple[int, ...]:
    """The candidate's values of :data:`SIMPLICITY`, in order: the smaller, the simpler."""
    return tuple(value(candidate) for _words, value in SIMPLICITY)


def banded(candidates: Iterable[Candidate], width: float) -> list[Candidate]:
    """``candidates`` in bands of relative ``width`` from the top (each with its ``band``, 1
    the fastest), the simpler first within a band (:func:`simplicity_key`), then the faster."""
    by_speed = sorted(candidates, key=lambda c: -c.tokens_per_s_per_gpu)
    out: list[Candidate] = []
    band: list[Candidate] = []
    floor = 0.0
    number = 0

    def close() -> None:
        band.sort(key=lambda c: (simplicity_key(c), -c.tokens_per_s_per_gpu))
        out.extend(replace(c, band=number) for c in band)
        band.clear()

    for candidate in by_speed:
        speed = candidate.tokens_per_s_per_gpu
        if not band or speed < floor:
            if band:
                close()
            number += 1
            floor = speed * (1 - width)
        band.append(candidate)
    if band:
        close()
    return out
