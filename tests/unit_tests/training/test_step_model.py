"""The step model against measurements: the fitted achievable fraction and upstream's EP A/B."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jsonschema
import pytest
import yaml

from megatron.bridge import schema
from megatron.bridge.recipes import plan_recipe, recipe_spec
from megatron.bridge.training import hardware
from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.estimate import efficiency, estimate_step
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.precisions import PRECISIONS, published_precision
from tests.unit_tests.repo_scripts import load_script

#: Upstream's two measured EP-overlap A/Bs and their jobs (benchmarks/ep_overlap_ab.py).
AB = load_script("benchmarks/ep_overlap_ab.py")

#: The Qwen3-30B-A3B recipe's model as upstream's EP A/Bs ran it, with PR 3862's alltoall
#: dispatcher.
QWEN3_30B_A3B = dataclasses.replace(AB.qwen3_30b_a3b(), **AB.ALLTOALL.dispatch)

#: PR 3862's measured speed-up. Nothing in the estimate is fitted on it: the check of the
#: measured EP-overlap share on another dispatcher with four times the network bytes.
MEASURED_RATIO = AB.ALLTOALL.ratio

#: PR 5094's: the estimate's EP-overlap share is measured on it (efficiency.EP_OVERLAP), so it
#: checks the schedule, not the share.
MEASURED_HYBRIDEP_RATIO = AB.HYBRIDEP.ratio


def _qwen_estimate(ep_overlap: bool, **dispatch: str):
    ab = dataclasses.replace(AB.ALLTOALL, dispatch={**AB.ALLTOALL.dispatch, **dispatch})
    return AB.estimate(ab, ep_overlap=ep_overlap)


def _qwen_step(ep_overlap: bool, **dispatch: str) -> float:
    return _qwen_estimate(ep_overlap, **dispatch).prediction.step_seconds


def test_ep_overlap_speeds_the_qwen3_step_up():
    assert _qwen_step(True) < _qwen_step(False)


def test_ep_overlap_ratio_is_within_15_percent_of_upstreams_measurement():
    ratio = _qwen_step(False) / _qwen_step(True)
    assert ratio == pytest.approx(MEASURED_RATIO, rel=0.15)


def test_hybridep_ep_overlap_ratio_is_within_15_percent_of_upstreams_production_measurement():
    """The share is measured on this A/B, so this bounds the schedule's slots (any share from
    about 0.1 up passes); the alltoall A/B above is what holds the share."""
    hybridep = {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}
    ratio = _qwen_step(False, **hybridep) / _qwen_step(True, **hybridep)
    assert ratio == pytest.approx(MEASURED_HYBRIDEP_RATIO, rel=0.15)


def test_ep_overlap_hides_the_measured_share_of_what_its_slots_allow():
    """With slots that can hide the whole all-to-all (HybridEP's, a quarter of alltoall's network
    bytes), the hidden time is the measured share of it."""
    hybridep = {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}
    saved = _qwen_step(False, **hybridep) - _qwen_step(True, **hybridep)
    estimate = _qwen_estimate(True, **hybridep)
    (ep,) = [c for c in estimate.communication if c.mode == "ep"]
    assert ep.hidden_seconds == pytest.approx(saved, rel=1e-6)
    ep_time = ep.seconds_at_achieved_bandwidth
    assert ep.hidden_seconds <= efficiency.EP_OVERLAP.hidden_share * ep_time
    assert ep.hidden_seconds > 0.95 * efficiency.EP_OVERLAP.hidden_share * ep_time
    assert any("PR 5094" in a for a in estimate.assumptions)
    off = _qwen_estimate(False, **hybridep)
    assert not any("PR 5094" in a for a in off.assumptions)
    (line,) = [x for x in estimate.knob_summary() if "overlap_moe_expert_parallel_comm" in x]
    assert line.endswith("45% of what its slots allow, the measured share)")


PUBLISHED_ROWS = yaml.safe_load(
    (Path(__file__).parents[1] / "recipes" / "data" / "published_rows.yaml").read_text()
)


@pytest.mark.parametrize("key", sorted(efficiency.FIT_ROWS))
def test_each_fraction_reproduces_the_published_row_it_was_fitted_on(key):
    row = efficiency.FIT_ROWS[key]
    assert key == (row.gpu, row.precision)
    published = [
        r
        for r in PUBLISHED_ROWS
        if (r["model"], hardware.system_gpu(r["system"]).name, r["release"])
        == (row.model, row.gpu, row.release)
        and published_precision(r["precision"]) == row.precision
    ]
    assert [r["tokens_per_s_per_gpu"] for r in published] == [row.tokens_per_s_per_gpu]
    plan = plan_recipe(row.model, gpu=row.gpu, precision=row.precision)
    assert (plan.job.world_size, plan.job.global_batch_size) == (
        published[0]["gpus"],
        published[0]["gbs"],
    )
    prediction = estimate_step(plan).prediction
    assert prediction.achievable_fraction == efficiency.ACHIEVABLE[key].fraction
    assert prediction.tokens_per_s_per_gpu == pytest.approx(row.tokens_per_s_per_gpu, rel=0.01)


def test_at_most_one_fitted_row_per_gpu_and_tensor_core_format():
    formats = [(gpu, PRECISIONS[dtype].tensor_cores) for gpu, dtype in efficiency.FIT_ROWS]
    assert len(formats) == len(set(formats))
    assert set(efficiency.ACHIEVABLE) == set(efficiency.FIT_ROWS)


@pytest.mark.parametrize(
    ("gpu", "dtype", "takes", "says"),
    [
        ("gb300", "fp8_cs", ("gb300", "fp8_mx"), "no fitted row for gb300 fp8_cs"),
        ("b200", "fp8_mx", ("b200", "fp8_cs"), "no fitted row for b200 fp8_mx"),
        ("a100", "bf16", None, "no fitted row for a100 bf16"),
        ("h100", "bf16", None, "47 % MFU"),
        ("b300", "fp8_mx", ("h100", "fp8_cs"), "the h100 fp8_cs figure"),
    ],
)
def test_unfitted_pairs_say_where_their_fraction_comes_from(gpu, dtype, takes, says):
    found = efficiency.achievable_fraction(gpu, dtype)
    expected = efficiency.ACHIEVABLE[takes] if takes else efficiency.QUOTED_BF16
    assert found.fraction == expected.fraction and says in found.source


def test_the_fraction_is_read_from_the_compute_dtype():
    plan = plan_recipe("llama3_8b", gpu="b200", precision="fp8_mx")
    prediction = estimate_step(plan).prediction
    assert prediction.achievable_source == efficiency.achievable_fraction("b200", "fp8_mx").source
    assert "fp8_mx" in prediction.achievable_source


def test_estimate_json_validates_against_the_schema():
    defs = schema.explain_schema()["$defs"]
    validator = jsonschema.Draft202012Validator({"$defs": defs, "$ref": "#/$defs/estimate"})
    estimate = estimate_step(recipe_spec("llama3_70b").plan())
    validator.validate(estimate.to_dict())
    prediction = estimate.to_dict()["prediction"]
    assert prediction["step_seconds"] == pytest.approx(
        prediction["compute_seconds"] + prediction["bubble_seconds"] + prediction["exposed_seconds"]
    )


def test_a_megatron_fsdp_job_says_how_its_data_parallel_traffic_is_priced():
    job = JobDescription(
        model=QWEN3_30B_A3B, world_size=16, gpu="h100", micro_batch_size=1, global_batch_size=64
    )
    request = CommOverlapConfig(tp_comm_overlap=False)
    plain = estimate_step(plan_comm_overlap(request, job)).assumptions
    fsdp = estimate_step(
        plan_comm_overlap(
            request, job.replace(use_megatron_fsdp=True, use_distributed_optimizer=True)
        )
    ).assumptions
    assert not any("Megatron-FSDP" in a for a in plain)
    assert any(a.startswith("Megatron-FSDP shards with optim_grads_params") for a in fsdp)
