"""Fine-grained activation offloading in the memory estimate (``offloaded_layer_bytes``), its
model rules, its published-run form and its flags.

The hand-worked job: 4 layers of attention + MoE (``*E``), hidden 1024, 8 experts of width 512
(not gated), top-2, EP8 over 8 GPUs, TP1, sequence 4096, micro-batch 1, bf16. An expert rank
receives 2 copies of each of its 4096 tokens: 8192 routed tokens. Inside the fused grouped MLP
each layer saves the expert input (8192 x 1024 = 8,388,608 elements, 2 bytes), fc1's output and
the activation's output (8192 x 512 = 4,194,304 elements each, 2 bytes); the attention norm's
input is 4096 x 1024 = 4,194,304 elements (2 bytes).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, EXIT_REFUSED, main
from megatron.bridge.recipes.published import offload_fields, published_runs
from megatron.bridge.training.estimate.memory import memory_of_job, offloaded_layer_bytes
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.model_rules import check_model
from tests.unit_tests.conftest import size_fields

MOE = ModelDescription(
    **size_fields(layers=4, hidden=1024, heads=8, ffn=4096, seq=4096, vocab=32000),
    num_moe_experts=8,
    moe_router_topk=2,
    moe_ffn_hidden_size=512,
    expert_model_parallel_size=8,
    bf16=True,
    hidden_dropout=0.0,
)
EXPERT_INPUT = 8192 * 1024 * 2  # bytes of the expert input of one layer
FC1_OUTPUT = 8192 * 512 * 2  # and of fc1's output, and of the activation's output
NORM_INPUT = 4096 * 1024 * 2


def _job(**model) -> JobDescription:
    fields = {
        "fine_grained_activation_offloading": True,
        "offload_modules": ("fused_group_mlp",),
        "use_transformer_engine_op_fuser": True,
    } | model
    return JobDescription(
        model=dataclasses.replace(MOE, **fields),
        world_size=8,
        gpu="h100",
        micro_batch_size=1,
        global_batch_size=8,
    )


def _chunk(job: JobDescription) -> tuple[str, ...]:
    return tuple(ModelCost(job.model).layer_blocks())


def test_the_hand_worked_chunk_has_four_attention_and_moe_layers():
    assert _chunk(_job()) == ("*E",) * 4


def test_only_tensors_of_the_threshold_and_more_move_and_the_last_group_stays():
    # 5,000,000 elements: only the expert input (8,388,608) is large enough.
    job = _job(min_offloaded_tensor_size=5_000_000)
    assert offloaded_layer_bytes(job, _chunk(job)) == [EXPERT_INPUT] * 3 + [0.0]


def test_a_tensor_of_exactly_the_threshold_moves():
    job = _job(min_offloaded_tensor_size=4_194_304)
    per_layer = EXPERT_INPUT + 2 * FC1_OUTPUT
    assert offloaded_layer_bytes(job, _chunk(job)) == [per_layer] * 3 + [0.0]
    job = _job(min_offloaded_tensor_size=4_194_305)
    assert offloaded_layer_bytes(job, _chunk(job)) == [EXPERT_INPUT] * 3 + [0.0]


def test_moe_act_recompute_drops_the_activation_output_from_what_moves():
    job = _job(
        min_offloaded_tensor_size=0,
        recompute_granularity="selective",
        recompute_modules=("moe_act",),
    )
    assert offloaded_layer_bytes(job, _chunk(job)) == [EXPERT_INPUT + FC1_OUTPUT] * 3 + [0.0]


def test_the_fraction_keeps_the_later_groups_on_the_gpu():
    # Three groups move anything (the fourth is the last); int(3 x 0.5) = 1 stays: the latest.
    job = _job(min_offloaded_tensor_size=5_000_000, activation_offload_fraction=0.5)
    assert offloaded_layer_bytes(job, _chunk(job)) == [EXPERT_INPUT] * 2 + [0.0, 0.0]
    job = _job(min_offloaded_tensor_size=5_000_000, activation_offload_fraction=0.0)
    assert offloaded_layer_bytes(job, _chunk(job)) == [0.0] * 4


def test_each_module_keeps_its_own_last_group():
    job = _job(offload_modules=("attn_norm", "expert_fc1"), min_offloaded_tensor_size=0)
    moved = offloaded_layer_bytes(job, _chunk(job))
    assert moved == [NORM_INPUT + EXPERT_INPUT] * 3 + [0.0]


def test_nothing_moves_without_fine_grained_offloading():
    job = _job(fine_grained_activation_offloading=False, min_offloaded_tensor_size=0)
    assert offloaded_layer_bytes(job, _chunk(job)) == [0.0] * 4


def test_full_recompute_leaves_nothing_to_offload():
    job = _job(
        min_offloaded_tensor_size=0,
        recompute_granularity="full",
        recompute_method="uniform",
        recompute_num_layers=1,
    )
    assert memory_of_job(job).offloaded_bytes == 0


def test_the_estimate_takes_the_moved_bytes_off_the_gpu_but_one_layer_in_flight():
    # PP1: one micro-batch in flight. Three layers' expert inputs go to the host; one of them is
    # back on the GPU ahead of its backward.
    plain = memory_of_job(_job(fine_grained_activation_offloading=False))
    job = _job(min_offloaded_tensor_size=5_000_000)
    offloaded = memory_of_job(job)
    assert offloaded.offloaded_bytes == 3 * EXPERT_INPUT
    drop = plain.part("activations") - offloaded.part("activations")
    assert drop == pytest.approx(2 * EXPERT_INPUT, abs=2)
    assert offloaded.to_dict()["offloaded_bytes"] == 3 * EXPERT_INPUT
    assert "offloaded to the host" in "\n".join(offloaded.render())
    assert plain.offloaded_bytes == 0
    assert not any("offloaded" in line for line in plain.render())
    assert any("fine-grained activation offloading" in a for a in offloaded.assumptions)
    assert not any("fine-grained activation offloading" in a for a in plain.assumptions)


# --- megatron-core's rules -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"offload_modules": ()}, "offload_modules"),
        ({"offload_modules": ("bogus",)}, "'bogus'"),
        ({"offload_modules": ("attn_proj",)}, "core_attn"),
        ({"use_transformer_engine_op_fuser": False}, "use_transformer_engine_op_fuser"),
        ({"offload_modules": ("fused_group_mlp", "moe_act")}, "fused_group_mlp with moe_act"),
        ({"cpu_offloading": True}, "cpu_offloading"),
        ({"min_offloaded_tensor_size": -1}, "min_offloaded_tensor_size"),
        ({"activation_offload_fraction": 1.5}, "activation_offload_fraction"),
        (
            {"recompute_granularity": "selective", "recompute_modules": ("moe",)},
            "recompute_modules has moe",
        ),
        ({"cuda_graph_impl": "full_iteration"}, "fine_grained_offloading_max_inflight_offloads"),
    ],
)
def test_megatron_core_refusals_name_the_field(fields, named):
    with pytest.raises(ValueError, match=named):
        check_model(_job(**fields).model)


def test_the_published_ultra_settings_pass_the_rules():
    for published in published_runs("nemotron_3_ultra"):
        model = {
            k.removeprefix("model."): v
            for k, v in published.changes.items()
            if k.startswith("model.") and ("offload" in k or k.endswith("op_fuser"))
        }
        check_model(dataclasses.replace(MOE, **model))


# --- the published runs' form ----------------------------------------------------------------


def test_the_table_forms_of_offloading():
    assert offload_fields("")["fine_grained_activation_offloading"] is False
    assert offload_fields("")["cpu_offloading"] is False
    layer_wise = offload_fields("20")
    assert (layer_wise["cpu_offloading"], layer_wise["cpu_offloading_num_layers"]) == (True, 20)
    fine = offload_fields("fine:core_attn+attn_proj:1000")
    assert fine["fine_grained_activation_offloading"] is True
    assert fine["offload_modules"] == ("core_attn", "attn_proj")
    assert fine["min_offloaded_tensor_size"] == 1000
    # The op fuser is the run's own column (fuser), not implied by what it offloads.
    assert "use_transformer_engine_op_fuser" not in offload_fields("fine:fused_group_mlp:5")


@pytest.mark.parametrize("text", ["fine", "fine::5", "fine:moe_act:", "fine:moe_act:x", "-1", "x"])
def test_other_table_text_is_refused(text):
    with pytest.raises(ValueError, match="fine:M1\\+M2:SIZE"):
        offload_fields(text)


@pytest.mark.parametrize(("gpu", "size"), [("gb300", 500_000_000), ("gb200", 350_000_000)])
def test_both_ultra_runs_offload_the_fused_expert_mlp(gpu, size):
    (published,) = [r for r in published_runs("nemotron_3_ultra") if r.gpu.lower().startswith(gpu)]
    assert published.changes["model.fine_grained_activation_offloading"] is True
    assert published.changes["model.offload_modules"] == ("fused_group_mlp",)
    assert published.changes["model.min_offloaded_tensor_size"] == size
    # megatron-core runs fused_group_mlp only inside the op fuser, which both runs turn on.
    assert published.changes["model.use_transformer_engine_op_fuser"] is True


# --- explain ---------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["gb300", "gb200"])
def test_explain_says_ultra_fits_with_its_offloaded_activations(gpu, capsys):
    capsys.readouterr()
    assert main(["explain", "--json", "--recipe", "nemotron_3_ultra", "--gpu", gpu]) == EXIT_OK
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["fits"], memory
    assert memory["offloaded_bytes"] > 0


def test_explain_without_offloading_says_ultra_on_gb300_does_not_fit(capsys):
    argv = ["explain", "--json", "--recipe", "nemotron_3_ultra", "--gpu", "gb300"]
    assert main([*argv, "--no-fine-grained-activation-offloading"]) == EXIT_REFUSED
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert not memory["fits"] and memory["offloaded_bytes"] == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--offload-modules", "bogus"],
        ["--activation-offload-fraction", "2"],
        ["--min-offloaded-tensor-size", "-5"],
        ["--no-use-transformer-engine-op-fuser"],
    ],
)
def test_explain_refuses_bad_offloading_flags(argv, capsys):
    assert main(["explain", "--recipe", "nemotron_3_ultra", *argv]) == EXIT_INVALID
    assert "Traceback" not in capsys.readouterr().err
