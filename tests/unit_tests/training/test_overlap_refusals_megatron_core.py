"""Every refusal of the overlap rules is megatron-core's, or one the migration section lists.

The property: for a generated layout that megatron-core builds and a generated request, when
``plan_comm_overlap`` raises ``ValueError``, megatron-core refuses the same request too (its
``TransformerConfig``, ``DistributedDataParallelConfig`` and ``OptimizerConfig`` checks, and the
checks of the pipeline schedule ``get_forward_backward_func`` picks), or the error is one of the
refusals listed under "Refusals megatron-core's config checks do not make" in
``docs/training/communication-overlap.md``, whose rule names are held to that list here.

megatron-core gets the request's knobs as the user set them and the others False (a knob off is
never what megatron-core refuses; ``wgrad_deferral_limit`` unset is its default). Patched, because
they cannot exist on a CPU machine: Transformer Engine's version (megatron-core reads it), and the
process groups the schedules read before their checks (stand-ins; a schedule that gets past its
checks stops at the first CUDA tensor or at the real process group it needs).
"""

from __future__ import annotations

import re
import types
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from megatron.core import utils as mcore_utils
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.enums import ModelType
from megatron.core.optimizer import OptimizerConfig
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.transformer.transformer_config import TransformerConfig
from packaging.version import Version

from megatron.bridge.training.comm_overlap import CommOverlapConfig, check_layout, plan_comm_overlap
from megatron.bridge.training.job import JobDescription, ModelDescription
from tests.unit_tests.conftest import core_config, layout_fields
from tests.unit_tests.jobs import OPTIONAL_BOOL_KNOBS, bool_knob_requests
from tests.unit_tests.training.test_model_rules_mirror import transformer_config_fields

DOC = Path(__file__).resolve().parents[3] / "docs" / "training" / "communication-overlap.md"
REFUSALS_HEADING = "### Refusals megatron-core's config checks do not make"

#: Our refusals that megatron-core's config and schedule checks do not make: a pattern of the
#: error, and the rule the migration section names for it (with the runtime failure behind it).
DOCUMENTED_REFUSALS = {
    r"overlap_param_gather=True needs the distributed optimizer": (
        "comm_overlap.rules.dp.check_overlap_param_gather"
    ),
    r"overlap_param_gather_with_optimizer_step=True needs the distributed optimizer": (
        "comm_overlap.rules.dp.check_param_gather_with_optimizer_step"
    ),
    r"tp_comm_overlap needs .* divisible by": "comm_overlap.rules.tp._check_tp_token_divisibility",
    r"delay_wgrad_compute=True .*needs Transformer Engine >= 2\.7": (
        "comm_overlap.rules.ep.decide_ep"
    ),
}


def documented_refusal_rules() -> set[str]:
    """The rule names of the bullets under the refusals heading of the migration section."""
    text = DOC.read_text()
    start = text.index(REFUSALS_HEADING)
    end = text.find("\n#", start + len(REFUSALS_HEADING))
    block = text[start : end if end != -1 else len(text)]
    return set(
        re.findall(r"`([\w.]+)`", " ".join(re.findall(r"Rules?:\s+((?:`[\w.]+`,?\s*)+)", block)))
    )


# ---------------------------------------------------------------------------- generated jobs


@st.composite
def jobs(draw) -> JobDescription:
    """A layout megatron-core builds (8 layers split evenly, experts over EP, SP with EP x TP)."""
    tp, pp, ep, dp = (
        draw(st.sampled_from([1, 2])),
        draw(st.sampled_from([1, 2, 4])),
        draw(st.sampled_from([1, 2])),
        draw(st.sampled_from([1, 2])),
    )
    vpp = draw(st.sampled_from([None, 1, 2])) if pp > 1 else None
    experts = 4 if ep > 1 else draw(st.sampled_from([None, 4]))
    model = ModelDescription(
        **layout_fields(tp_size=tp, pp_size=pp, vpp_size=vpp, cp_size=1, ep_size=ep),
        num_layers=8,
        hidden_size=256,
        num_attention_heads=8,
        seq_length=draw(st.sampled_from([4096, 4097])),
        sequence_parallel=tp > 1 and (ep > 1 or draw(st.booleans())),
        add_bias_linear=False,
        bf16=draw(st.sampled_from([True, True, False])),
        num_moe_experts=experts,
        moe_token_dispatcher_type=draw(st.sampled_from(["alltoall", "flex", "allgather"])),
        moe_flex_dispatcher_backend="deepep",
        gradient_accumulation_fusion=draw(st.booleans()),
        mtp_num_layers=draw(st.sampled_from([None, None, 1])),
    )
    return JobDescription(
        model=model,
        world_size=tp * pp * dp,
        te_available=True,
        te_version=draw(st.sampled_from(["2.5.0", "2.14.0"])),
        use_distributed_optimizer=draw(st.booleans()),
        micro_batch_size=1,
    )


@st.composite
def requests(draw) -> CommOverlapConfig:
    return CommOverlapConfig(
        tp_comm_overlap=draw(st.sampled_from([False, True, "auto"])),
        wgrad_deferral_limit=draw(st.sampled_from([None, 0, 4])),
        **draw(bool_knob_requests),
    )


# ---------------------------------------------------------------------------- megatron-core


def megatron_core_refusal(co: CommOverlapConfig, job: JobDescription) -> Exception | None:
    """What megatron-core raises for the request on the job's layout, or None."""
    asked = {name: bool(getattr(co, name)) for name in OPTIONAL_BOOL_KNOBS}
    model_fields = transformer_config_fields(job.model)
    model_fields.update(
        tp_comm_overlap=co.tp_comm_overlap is True,
        overlap_p2p_comm=asked["overlap_p2p_comm"],
        batch_p2p_comm=asked["batch_p2p_comm"],
        defer_embedding_wgrad_compute=asked["defer_embedding_wgrad_compute"],
        overlap_moe_expert_parallel_comm=asked["overlap_moe_expert_parallel_comm"],
        delay_wgrad_compute=asked["delay_wgrad_compute"],
    )
    if co.wgrad_deferral_limit is not None:
        model_fields["wgrad_deferral_limit"] = co.wgrad_deferral_limit
    dist_opt = job.use_distributed_optimizer
    with (
        warnings.catch_warnings(),
        mock.patch.object(mcore_utils, "_te_version", Version(job.te_version)),
    ):
        warnings.simplefilter("ignore")
        try:
            config = TransformerConfig(**model_fields)
            DistributedDataParallelConfig(
                use_distributed_optimizer=dist_opt,
                overlap_grad_reduce=asked["overlap_grad_reduce"],
                overlap_param_gather=asked["overlap_param_gather"],
                align_param_gather=asked["align_param_gather"],
            )
            OptimizerConfig(
                bf16=job.model.bf16,
                use_distributed_optimizer=dist_opt,
                overlap_param_gather=asked["overlap_param_gather"],
                overlap_param_gather_with_optimizer_step=asked[
                    "overlap_param_gather_with_optimizer_step"
                ],
            )
        except (AssertionError, ValueError, TypeError, NotImplementedError) as exc:
            return exc
    return schedule_refusal(config)


def schedule_refusal(config: TransformerConfig) -> ValueError | None:
    """The ``ValueError`` the schedule megatron-core picks for ``config`` raises, or None."""
    pp = config.pipeline_model_parallel_size
    vpp = config.virtual_pipeline_model_parallel_size
    schedule = get_forward_backward_func(pp_size=pp, vp_size=vpp)
    chunks = 1 if vpp is None or pp == 1 else vpp
    model = []
    for _ in range(chunks):
        chunk = torch.nn.Module()
        chunk.config = config
        chunk.model_type = ModelType.encoder_or_decoder
        model.append(chunk)
    # Stand-ins for the process groups: the schedules read only these before their checks.
    groups = types.SimpleNamespace(tp=None, cp=types.SimpleNamespace(size=lambda: 1))
    p2p = types.SimpleNamespace(config=config, pp_group=None)
    try:
        schedule(
            forward_step_func=None,
            data_iterator=[None] * chunks,
            model=model,
            num_microbatches=2 * pp,
            seq_length=16,
            micro_batch_size=1,
            p2p_communicator=p2p,
            pg_collection=groups,
        )
    except ValueError as exc:
        return exc
    except (RuntimeError, TypeError, AssertionError):
        # Past the checks: the first CUDA tensor (no driver here), or a real process group.
        return None
    raise AssertionError(f"{schedule.__name__} ran to the end on a CPU machine")


# ---------------------------------------------------------------------------- the property


def layout_accepted(job: JobDescription) -> bool:
    """Whether our layout check and megatron-core accept the job with nothing overlapped."""
    try:
        check_layout(job)
    except ValueError:
        return False
    return megatron_core_refusal(CommOverlapConfig(tp_comm_overlap=False), job) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(co=requests(), job=jobs())
def test_every_refusal_is_megatron_cores_or_a_documented_one(co, job) -> None:
    # The layout itself is one megatron-core builds, so its refusal below is the request's.
    assume(layout_accepted(job))
    try:
        plan_comm_overlap(co, job)
    except ValueError as ours:
        theirs = megatron_core_refusal(co, job)
        if theirs is not None:
            return
        matched = [
            rule for pattern, rule in DOCUMENTED_REFUSALS.items() if re.search(pattern, str(ours))
        ]
        assert matched, (
            f"refused, but megatron-core accepts it and the migration section lists no such "
            f"refusal: {ours}\n{co}\n{job.model}"
        )


def test_the_documented_refusals_are_the_migration_sections() -> None:
    listed = documented_refusal_rules()
    assert set(DOCUMENTED_REFUSALS.values()) <= listed, set(DOCUMENTED_REFUSALS.values()) - listed


@pytest.mark.parametrize(
    ("pp", "vpp", "overlap", "batch", "refused"),
    [
        (2, None, True, False, "does not support overlapping p2p"),
        (2, 2, True, True, "Can not use both"),
        (2, 1, True, False, None),
        (2, 2, False, True, None),
        (1, None, True, True, None),
    ],
)
def test_the_schedule_checks_are_megatron_cores(pp, vpp, overlap, batch, refused) -> None:
    # The helper above runs megatron-core's schedules; this pins what they decide, so a stand-in
    # that stopped reaching the checks would fail here.
    config = core_config(
        num_layers=8, pp=pp, vpp=vpp, bf16=True, overlap_p2p_comm=overlap, batch_p2p_comm=batch
    )
    exc = schedule_refusal(config)
    if refused is None:
        assert exc is None
    else:
        assert exc is not None and refused in str(exc)
