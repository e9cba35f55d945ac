"""A recipe gets one verdict, with or without KEY=VALUE overrides (which build its container).

The torch-free route plans the recipe's job description; the override route builds the
megatron-core configs, applies the overrides and describes them back. Both end in the same
checks (``check_layout``: the layout and megatron-core's model rules) and the same rules.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, main

MOE_FLAGS = [
    "--num-moe-experts",
    "8",
    "--ep",
    "8",
    "--ep-overlap",
    "--moe-token-dispatcher",
    "alltoall",
]


def _explain(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["explain", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_moe_bias_with_expert_tp_is_refused_by_both_routes_alike(capsys):
    # GPT-3 has biases; experts split over ETP = TP 4 cannot carry them (megatron-core's rule).
    code, doc = _explain(capsys, "--recipe", "gpt3_175b", *MOE_FLAGS)
    with_override, doc_override = _explain(
        capsys, "--recipe", "gpt3_175b", *MOE_FLAGS, "train.global_batch_size=2048"
    )
    assert code == with_override == EXIT_INVALID
    assert "Bias in Moe" not in doc["error"]  # our mirror's message, not megatron-core's assert
    assert "expert_tensor_parallel_size=1" in doc["error"]
    assert doc_override["error"] == doc["error"]


def test_no_bias_with_the_fused_gelu_kernel_is_refused_by_both_routes_alike(capsys):
    # GPT-3 fuses the fc1 bias into its gelu: without biases megatron-core refuses the model.
    flags = ["--recipe", "gpt3_175b", *MOE_FLAGS, "--disable-bias-linear"]
    code, doc = _explain(capsys, *flags)
    with_override, doc_override = _explain(capsys, *flags, "train.global_batch_size=2048")
    assert code == with_override == EXIT_INVALID
    assert "bias_activation_fusion" in doc["error"] and "add_bias_linear" in doc["error"]
    # The route that builds the container stops at the same mirror, before megatron-core.
    assert doc_override["error"] == doc["error"]


def test_the_fix_the_message_names_plans_on_both_routes_alike(capsys):
    flags = [
        "--recipe",
        "gpt3_175b",
        *MOE_FLAGS,
        "--disable-bias-linear",
        "--no-bias-gelu-fusion",
        "--global-batch-size",
        "2048",
        "--gpu",  # a GPU whose memory holds it: a job that does not fit is refused (exit 1)
        "b300",
    ]
    code, doc = _explain(capsys, *flags)
    with_override, doc_override = _explain(capsys, *flags, "train.global_batch_size=2048")
    assert code == with_override == EXIT_OK
    assert doc_override["overlap"] == doc["overlap"]
    assert doc["overlap"]["job"]["model"]["add_bias_linear"] is False


@pytest.fixture
def recompute_recipe(tmp_path, monkeypatch):
    """A user recipe module: a MoE spec with full activation recompute (a provider option)."""
    (tmp_path / "my_moe_recipes.py").write_text(
        textwrap.dedent(
            """
            from megatron.bridge.recipes.gpt3_175b import GPT3_PROVIDER
            from megatron.bridge.recipes.spec import spec_of
            from megatron.bridge.training.job import ModelDescription

            def moe_full_recompute():
                return spec_of(
                    "moe_full_recompute",
                    provider=GPT3_PROVIDER,
                    model=ModelDescription(
                        num_layers=8, hidden_size=1024, num_attention_heads=16,
                        vocab_size=32000, seq_length=2048, add_bias_linear=False,
                        num_moe_experts=8, moe_token_dispatcher_type="alltoall",
                        expert_model_parallel_size=8, tensor_model_parallel_size=2,
                        pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2,
                        recompute_granularity="full", recompute_method="uniform",
                        recompute_num_layers=1,
                    ),
                    world_size=64, gpu="h100", global_batch_size=64,
                    overlap=(("overlap_moe_expert_parallel_comm", True),),
                )
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_moe_recipes:moe_full_recompute"


def test_a_recompute_setting_reaches_the_plan_on_both_routes_alike(recompute_recipe, capsys):
    # EP overlap cannot run with full recompute (megatron-core refuses it): the same error on
    # both routes, and the same plan once the request is withdrawn.
    code, doc = _explain(capsys, "--recipe", recompute_recipe)
    with_override, doc_override = _explain(
        capsys, "--recipe", recompute_recipe, "train.global_batch_size=64"
    )
    assert code == with_override == EXIT_INVALID
    assert "recompute_granularity='full'" in doc["error"]
    assert doc_override["error"] == doc["error"]
    off = "comm_overlap.overlap_moe_expert_parallel_comm=false"
    code, doc = _explain(capsys, "--recipe", recompute_recipe, "train.global_batch_size=64", off)
    assert code == EXIT_OK
    assert doc["overlap"]["job"]["model"]["recompute_granularity"] == "full"
