"""What the plan says about where a setting came from: an automatic preset choice, one name per
preset, a preset of another precision, a flex backend that is not used."""

from __future__ import annotations

import json

import pytest

from megatron.bridge.cli.entry import main
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.userbuffers import PUBLISHED_PRESETS, preset_names_of


def _explain(capsys, *argv: str) -> dict:
    assert main(["explain", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_recipes_automatic_preset_is_labelled_as_chosen_automatically():
    plan = recipe_spec("llama3_70b").plan()
    decided = plan.decision("tp_comm_overlap_cfg")
    assert decided.source == "derived"
    assert decided.reason.startswith("chosen automatically")
    assert "h100 bf16, hidden 8192, TP4" in decided.reason


def test_a_named_preset_is_the_users():
    name = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    plan = recipe_spec("llama3_70b").changed(preset=name).plan()
    decided = plan.decision("tp_comm_overlap_cfg")
    assert (decided.source, decided.reason) == ("user", f"set in CommOverlapConfig: {name}")


def test_one_preset_object_shows_the_one_name_that_describes_the_run():
    # The fp8 H100 TP4 preset and the fp8 B200 TP2 preset are one object.
    preset = PUBLISHED_PRESETS["userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"]
    assert len(preset_names_of(preset)) > 1
    model = ModelDescription(
        tensor_model_parallel_size=4, sequence_parallel=True, hidden_size=8192, fp8="hybrid"
    )
    job = JobDescription(model=model, world_size=8, gpu="h100")
    plan = plan_comm_overlap(
        CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg=preset), job
    )
    reason = plan.decision("tp_comm_overlap_cfg").reason
    assert reason == "set in CommOverlapConfig: userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"
    assert not plan.warnings


def test_an_fp8_preset_on_a_bf16_run_does_not_match_the_model(capsys):
    doc = _explain(
        capsys,
        "--recipe",
        "llama3_70b",
        "--preset",
        "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192",
    )
    assert doc["preset"]["matches_model"] is False
    assert any("precision or GPU differs" in w for w in doc["overlap"]["warnings"])


@pytest.mark.parametrize("backend", ["deepep", "hybridep"])
def test_a_flex_backend_without_the_flex_dispatcher_is_reported(capsys, backend):
    moe = [
        "--num-moe-experts",
        "8",
        "--ep",
        "2",
        "--etp",
        "1",
        "--moe-token-dispatcher",
        "alltoall",
        "--num-layers",  # few enough layers to fit: a job that does not fit is exit 1
        "8",
    ]
    doc = _explain(capsys, *moe, "--moe-flex-backend", backend)
    said = [w for w in doc["warnings"] if "has no effect" in w]
    assert len(said) == 1 and backend in said[0]


def test_a_flex_backend_with_the_flex_dispatcher_is_not_reported(capsys):
    # Few enough layers to fit the GPU: a job that does not fit is refused (exit 1).
    moe = ["--num-moe-experts", "8", "--ep", "2", "--etp", "1", "--moe-token-dispatcher", "flex"]
    moe += ["--num-layers", "8"]
    doc = _explain(capsys, *moe, "--moe-flex-backend", "hybridep")
    assert not [w for w in doc["warnings"] if "has no effect" in w]


def test_an_automatic_preset_follows_a_changed_gpu_and_precision():
    spec = recipe_spec("gpt3_175b")
    request = spec.request()  # chosen for H100 bf16
    for changed, name in (
        ({"gpu": "b200"}, "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048"),
        ({"precision": "fp8"}, "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048"),
    ):
        job = spec.changed(**changed).job_on()
        plan = plan_comm_overlap(request, job)
        assert plan.preset_name == name
        assert plan.decision("tp_comm_overlap_cfg").source == "derived"
        assert any("chosen again" in n for n in plan.notes)


def test_perf_env_plugin_from_recipe_takes_the_gpu():
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

    on_b200 = PerfEnvPlugin.from_recipe("llama3_70b", gpu="b200")
    on_h100 = PerfEnvPlugin.from_recipe("llama3_70b")
    assert (on_b200.gpu, on_h100.gpu) == ("b200", "h100")
    # The generation follows the GPU: Blackwell's 32 connections, Hopper's 1 at TP4.
    assert on_b200.launch_env_plan().env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    assert on_h100.launch_env_plan().env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
