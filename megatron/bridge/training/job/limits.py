"""The bounds a job description is checked against before anything is planned or simulated.

:func:`check_limits` holds every field of a job that has a bound in
:data:`~megatron.bridge.training.validators.LIMITS` to it; :func:`check_micro_batch_chunks`
bounds the micro-batch chunks one step lays out, which the step estimate checks before it
simulates.
"""

from __future__ import annotations

import dataclasses

from megatron.bridge.training.job.description import JobDescription
from megatron.bridge.training.validators import LIMITS, LimitError, check_limit
from megatron.bridge.training.value_types import check_value

__all__ = ["CLUSTER_FIELDS", "check_cluster_field", "check_limits", "check_micro_batch_chunks"]

CLUSTER_FIELDS = ("gpus_per_node", "nvlink_domain")
"""The job's fields that describe the cluster beyond its GPU, which a ``ConfigContainer`` and
``PerfEnvPlugin`` carry under the same names."""

_JOB_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(JobDescription))

# (bound's name, whether the field is the model's, field, minimum, maximum) of each bound of
# LIMITS a job field has, in LIMITS's order: every plan checks them, so the names are split once.
_BOUNDED_FIELDS = tuple(
    (name, bool(dot), field if dot else name, limit.minimum, limit.maximum)
    for name, limit in LIMITS.items()
    for _, dot, field in (name.partition("."),)
    if dot or name in _JOB_FIELD_NAMES
)


def check_limits(job: JobDescription) -> None:
    """``LimitError`` naming the first field of ``job`` outside its bounds in :data:`LIMITS`
    (below the minimum or above the maximum), the value and the bound.

    Runs before any planning (``check_job``), so every route to a plan (flags, ``KEY=VALUE``,
    YAML, ``RecipeSpec.changed``, a ``ConfigContainer`` at ``runtime_config_update``) meets the
    same bounds: only the bounds, the layout and the batch split arithmetic are read, nothing is
    unrolled or simulated.
    """
    model = job.model
    for name, of_model, field, minimum, maximum in _BOUNDED_FIELDS:
        value = getattr(model, field, None) if of_model else getattr(job, field)
        # An int within its bounds, the common case, needs no call; check_limit reads the rest.
        if value is not None and not (type(value) is int and minimum <= value <= maximum):
            check_limit(name, value)


def check_micro_batch_chunks(job: JobDescription) -> None:
    """``LimitError`` for a step whose estimate would lay out more micro-batch chunks than
    ``LIMITS["micro_batches_x_chunks"]``: run by the step estimate before it simulates (the plan
    itself has no such bound)."""
    try:
        micro_batches = job.micro_batches
        chunks = (job.vpp_size or 1) * (micro_batches or 1)
    except LimitError:
        raise
    except (ValueError, ZeroDivisionError, TypeError):
        return  # the layout check says why the batch does not split
    limit = LIMITS["micro_batches_x_chunks"]
    if chunks > limit.maximum:
        raise LimitError(
            f"global_batch_size={job.global_batch_size} with micro_batch_size="
            f"{job.micro_batch_size}, DP {job.dp_size} and VPP {job.vpp_size or 1} gives "
            f"{micro_batches} micro-batches x {job.vpp_size or 1} model chunks = {chunks} per "
            f"step, above the bound {limit.maximum} ({limit.why}). Lower the global batch size, "
            "or raise the micro-batch size or the data-parallel size."
        )


def check_cluster_field(name: str, value: object, where: str) -> int | None:
    """``value`` of the cluster field ``name`` (:data:`CLUSTER_FIELDS`) set outside a job
    description: None, or an int within ``LIMITS[name]``; else ``ConfigValueError`` (a
    ``TypeError`` and a ``ValueError``) or ``LimitError`` naming ``where``."""
    value = check_value(value, int | None, where)
    if value is not None:
        check_limit(name, value, label=where)
    return value
