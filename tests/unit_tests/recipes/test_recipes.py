"""The recipes (megatron/bridge/recipes/*.py): published shapes, resolved plans, presets, launch.

Everything runs on the real ``ConfigContainer`` / megatron-core configs and real NeMo-Run
executors. Only Transformer Engine is patched (``comm_overlap.HAVE_TE``): TE needs CUDA to build
and to import, so it cannot exist on a CPU machine, while the recipes target GPUs where it does.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
from pathlib import Path
from unittest import mock

import nemo_run as run
import pytest
import torch.nn.functional as F

from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.recipes import RECIPES, get_recipe, recipe_function, recipe_layout
from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
from megatron.bridge.recipes.spec import RecipeSpec
from megatron.bridge.training.comm_overlap import (
    DEFAULT_BUCKET_SIZE,
    PUBLISHED_PRESETS,
    preset_shapes_of,
)
from megatron.bridge.training.estimate.memory.report import FRAGMENTATION_FRACTION, gib
from megatron.bridge.training.resolve import runtime_config_update

SPEC_LOGGER = "megatron.bridge.recipes.spec"
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "launch_gpt3_175b.py"


def recipe_module(name):
    """The module of a shipped recipe, as the registry names it."""
    return importlib.import_module(RECIPES[name].partition(":")[0])


def resolve(cfg, world_size):
    """runtime_config_update as on the GPU cluster, where Transformer Engine imports."""
    with mock.patch("megatron.bridge.training.comm_overlap.HAVE_TE", True):
        return runtime_config_update(cfg, world_size=world_size)


# name, published GPU count, expected DP size, preset name, (TP, PP, VPP, CP)
PUBLISHED = [
    pytest.param(*row, id=row[0])
    for row in [
        ("gpt3_175b", 1024, 32, "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048", (4, 8, 6, 1)),
        ("llama3_70b", 64, 2, "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192", (4, 4, 5, 2)),
        (
            "llama31_405b",
            1024,
            8,
            "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192",
            (8, 8, 8, 2),
        ),
    ]
]


# --------------------------------------------------------------------- published runs


@pytest.mark.parametrize(("name", "num_gpus", "dp", "preset", "sizes"), PUBLISHED)
def test_recipe_resolves_at_its_published_gpu_count(name, num_gpus, dp, preset, sizes):
    cfg = get_recipe(name)
    assert recipe_function(name).__module__.rsplit(".", 1)[-1] == name
    assert recipe_module(name).SPEC.num_gpus == num_gpus

    plan = resolve(cfg, num_gpus)

    assert plan is cfg.overlap_plan
    assert plan.warnings == ()
    assert cfg.data_parallel_size == dp
    m, ddp, opt = cfg.model, cfg.ddp, cfg.optimizer
    assert (
        m.tensor_model_parallel_size,
        m.pipeline_model_parallel_size,
        m.virtual_pipeline_model_parallel_size,
        m.context_parallel_size,
    ) == sizes
    # TP overlap survived, with the published preset for this hidden and TP size.
    assert plan.value("tp_comm_overlap") is True and m.tp_comm_overlap is True
    assert preset in plan.preset_names
    assert m.tp_comm_overlap_cfg == PUBLISHED_PRESETS[preset].to_ub_cfgs()
    assert any(
        s.hidden_size == m.hidden_size and s.tp_size == m.tensor_model_parallel_size
        for s in preset_shapes_of(cfg.comm_overlap.tp_comm_overlap_cfg)
    )
    # Interleaved pipeline: p2p overlap, no batching.
    assert (m.overlap_p2p_comm, m.batch_p2p_comm) == (True, False)
    # DP > 1 with the distributed optimizer and VPP: every DP overlap on, 128 Mi-parameter buckets.
    assert ddp.use_distributed_optimizer and opt.use_distributed_optimizer
    assert (ddp.overlap_grad_reduce, ddp.overlap_param_gather, ddp.align_param_gather) == (
        True,
        True,
        True,
    )
    assert ddp.bucket_size == DEFAULT_BUCKET_SIZE
    assert opt.overlap_param_gather_with_optimizer_step is False
    assert (m.defer_embedding_wgrad_compute, m.wgrad_deferral_limit) == (False, -1)
    assert (m.overlap_moe_expert_parallel_comm, m.delay_wgrad_compute) == (False, False)
    # The recipe's request is left as written (the DP knobs stay None: the rules decided them).
    assert cfg.comm_overlap.overlap_grad_reduce is None and cfg.comm_overlap.bucket_size is None


@pytest.mark.parametrize(("name", "num_gpus", "dp", "preset", "sizes"), PUBLISHED)
def test_resolving_twice_gives_the_same_plan(name, num_gpus, dp, preset, sizes):
    cfg = get_recipe(name)
    first = resolve(cfg, num_gpus)
    second = resolve(cfg, num_gpus)
    assert first.to_dict() == second.to_dict()


@pytest.mark.parametrize(
    ("name", "world_size", "product"),
    [("gpt3_175b", 1000, 32), ("llama3_70b", 48, 32), ("llama31_405b", 1000, 128)],
)
def test_gpu_count_that_does_not_divide_is_a_clear_error(name, world_size, product):
    cfg = get_recipe(name)
    with pytest.raises(
        ValueError, match=rf"World size {world_size} .*not divisible .*= {product}\b"
    ):
        resolve(cfg, world_size)


def test_gpt3_175b_published_shape():
    m = get_recipe("gpt3_175b").model
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size) == (
        96,
        12288,
        96,
        49152,
    )
    assert (m.seq_length, m.position_embedding_type, m.normalization) == (
        2048,
        "learned_absolute",
        "LayerNorm",
    )
    cfg = get_recipe("gpt3_175b")
    assert (cfg.train.micro_batch_size, cfg.train.global_batch_size) == (1, 2048)


@pytest.mark.parametrize(
    ("name", "dims"),
    [
        ("llama3_70b", (80, 8192, 64, 8, 28672)),
        ("llama31_405b", (126, 16384, 128, 8, 53248)),
    ],
)
def test_llama_published_shape_and_architecture(name, dims):
    m = get_recipe(name).model
    assert (
        m.num_layers,
        m.hidden_size,
        m.num_attention_heads,
        m.num_query_groups,
        m.ffn_hidden_size,
    ) == dims
    assert (m.seq_length, m.vocab_size) == (8192, 128256)
    assert m.position_embedding_type == "rope" and m.rotary_base == 500_000
    assert m.gated_linear_unit is True and m.activation_func is F.silu
    assert m.normalization == "RMSNorm"
    assert m.add_bias_linear is False and m.share_embeddings_and_output_weights is False
    assert m.rope_scaling is (name == "llama31_405b")


def test_llama31_405b_counts_embedding_and_loss_as_pipeline_layers():
    cfg = get_recipe("llama31_405b")
    m = cfg.model
    assert m.account_for_embedding_in_pipeline_split and m.account_for_loss_in_pipeline_split
    # 126 layers + embedding + loss = 128 = PP8 x VPP8 x 2 layers per chunk.
    chunks = m.pipeline_model_parallel_size * m.virtual_pipeline_model_parallel_size
    assert (m.num_layers + 2) % chunks == 0 and m.num_layers % chunks != 0
    resolve(cfg, 1024)  # megatron-core's TransformerConfig checks accept the split


def test_llama31_405b_rejects_a_vpp_the_layers_do_not_split_into():
    cfg = get_recipe("llama31_405b", vpp_size=3)
    with pytest.raises(ValueError, match="virtual_pipeline_model_parallel_size"):
        resolve(cfg, 1024)


# --------------------------------------------------------------------- overrides and presets


@pytest.mark.parametrize(
    ("name", "overrides", "num_gpus", "preset"),
    [
        ("gpt3_175b", {"gpu": "b200"}, 1024, "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048"),
        ("gpt3_175b", {"gpu": "gb200"}, 1024, "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048"),
        (
            "gpt3_175b",
            {"precision": "fp8"},
            1024,
            "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048",
        ),
        ("gpt3_175b", {"gpu": "h200"}, 1024, "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"),
        ("llama3_70b", {"precision": "fp8"}, 64, "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"),
        # The published B200 run: TP2 x PP4 (VPP5) x CP2.
        ("llama3_70b", {"gpu": "b200"}, 64, "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192"),
        ("llama3_70b", {"cp_size": 1}, 64, "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"),
        (
            "llama31_405b",
            {"precision": "fp8"},
            1024,
            "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192",
        ),
        (
            "llama31_405b",
            {"gpu": "b200", "tp_size": 4},
            512,
            "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192",
        ),
    ],
)
def test_overrides_pick_the_matching_published_preset(name, overrides, num_gpus, preset, caplog):
    caplog.set_level(logging.INFO, logger=SPEC_LOGGER)
    cfg = get_recipe(name, **overrides)
    assert cfg.comm_overlap.tp_comm_overlap_cfg is PUBLISHED_PRESETS[preset]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    plan = resolve(cfg, num_gpus)
    assert preset in plan.preset_names and plan.warnings == ()
    if overrides.get("precision") == "fp8":
        assert cfg.model.fp8 == "hybrid" and cfg.ddp.fp8_param_gather is True
    layout = recipe_layout(name, **overrides)
    assert layout["preset"] == preset


def test_llama3_70b_uses_the_cp_less_preset_at_cp2_and_says_so(caplog):
    caplog.set_level(logging.INFO, logger=SPEC_LOGGER)
    cfg = get_recipe("llama3_70b")
    assert (
        cfg.comm_overlap.tp_comm_overlap_cfg
        is PUBLISHED_PRESETS["userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"]
    )
    assert any(
        "published without a CP size" in r.getMessage() and "CP=2" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.parametrize(
    ("name", "overrides", "num_gpus"),
    [
        ("llama31_405b", {"gpu": "b200"}, 1024),  # B200 presets for h16384 are TP4, not TP8
        ("llama3_70b", {"gpu": "b200", "tp_size": 4}, 64),  # B200 presets for h8192 are TP2
        ("gpt3_175b", {"seq_length": 4096}, 1024),
        ("gpt3_175b", {"micro_batch_size": 2}, 1024),
        ("gpt3_175b", {"gpu": "a100"}, 1024),  # no presets are published for A100
    ],
)
def test_no_published_preset_warns_and_uses_te_defaults(name, overrides, num_gpus, caplog):
    caplog.set_level(logging.WARNING, logger=SPEC_LOGGER)
    cfg = get_recipe(name, **overrides)
    assert cfg.comm_overlap.tp_comm_overlap_cfg is None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "No published userbuffers preset" in warned[0]
    assert "Transformer Engine's defaults" in warned[0]
    plan = resolve(cfg, num_gpus)
    # TP overlap still runs, on TE's defaults; the plan says so as a note, not a warning.
    assert plan.value("tp_comm_overlap") is True and cfg.model.tp_comm_overlap_cfg is None
    assert plan.warnings == ()
    assert any("default userbuffer settings" in n for n in plan.notes)
    assert recipe_layout(name, **overrides)["preset"] == "none"


def test_tp_comm_overlap_can_be_turned_off(caplog):
    caplog.set_level(logging.WARNING, logger=SPEC_LOGGER)
    cfg = get_recipe("gpt3_175b", tp_comm_overlap=False)
    # No preset is looked up for an overlap that is off, so nothing warns about one.
    assert cfg.comm_overlap.tp_comm_overlap_cfg is None
    assert not caplog.records
    plan = resolve(cfg, 1024)
    assert cfg.model.tp_comm_overlap is False and plan.value("tp_comm_overlap") is False
    assert plan.warnings == ()


def test_no_vpp_override_turns_p2p_overlap_into_batching():
    cfg = get_recipe("gpt3_175b", vpp_size=None)
    resolve(cfg, 1024)
    m = cfg.model
    assert m.virtual_pipeline_model_parallel_size is None
    assert (m.overlap_p2p_comm, m.batch_p2p_comm) == (False, True)
    assert (cfg.ddp.overlap_param_gather, cfg.ddp.align_param_gather) == (True, False)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"gpu": "v100"},
            r"gpu must be one of \['a100', 'b200', 'b300', 'gb200', 'gb300', 'h100', 'h200'\]",
        ),
        ({"precision": "fp4"}, r"precision must be one of \['bf16', 'fp16', 'fp8_ds', .*'mxfp8'\]"),
        # The GPU catalogue's answer, the same as the CLI's: no FP8 before Hopper.
        ({"gpu": "a100", "precision": "fp8"}, r"precision fp8_ds .* needs FP8 tensor cores.*a100"),
    ],
)
def test_bad_gpu_or_precision_lists_the_choices(overrides, match):
    for name in RECIPES:
        with pytest.raises(ValueError, match=match):
            get_recipe(name, **overrides)


def test_each_call_returns_independent_objects():
    a, b = get_recipe("gpt3_175b"), get_recipe("gpt3_175b")
    assert a.model is not b.model and a.comm_overlap is not b.comm_overlap
    a.mixed_precision.grad_reduce_in_fp32 = False
    a.comm_overlap.bucket_size = 1
    assert b.mixed_precision.grad_reduce_in_fp32 is True and b.comm_overlap.bucket_size is None


# --------------------------------------------------------------------- registry


def test_unknown_recipe_lists_the_names():
    with pytest.raises(
        ValueError, match="deepseek_v3, deepseek_v4_flash, gpt3_175b, gpt_oss_120b, kimi_k2"
    ):
        get_recipe("gpt4")
    with pytest.raises(ValueError, match="known recipes"):
        recipe_layout("llama2_70b")


def test_registry_entries_are_importable_recipes():
    assert set(RECIPES) == {
        "deepseek_v3",
        "deepseek_v4_flash",
        "gpt3_175b",
        "gpt_oss_120b",
        "kimi_k2",
        "llama3_8b",
        "llama3_70b",
        "llama31_405b",
        "nemotron_3_5_lightning",
        "nemotron_3_nano",
        "nemotron_3_super",
        "nemotron_3_ultra",
        "qwen3_235b_a22b",
        "qwen3_30b_a3b",
    }
    for name in RECIPES:
        assert callable(recipe_function(name))
        module = recipe_module(name)
        # The published run is the recipe's torch-free spec itself; its launch plugin comes
        # from that spec at the published GPU count.
        assert isinstance(module.SPEC, RecipeSpec) and module.spec() == module.SPEC
        assert PerfEnvPlugin.from_recipe(name).num_gpus == module.SPEC.num_gpus


@pytest.mark.parametrize(("name", "num_gpus", "dp", "preset", "sizes"), PUBLISHED)
def test_recipe_layout_has_the_keys_the_cli_reads(name, num_gpus, dp, preset, sizes):
    layout = recipe_layout(name)
    cfg = get_recipe(name)
    tp, pp, vpp, cp = sizes
    assert layout == {
        "tp": tp,
        "pp": pp,
        "vpp": vpp,
        "cp": cp,
        "ep": 1,
        "dp": dp,
        "world_size": num_gpus,
        "gpu": "h100",
        "precision": "bf16",
        "seq_length": cfg.model.seq_length,
        "micro_batch_size": 1,
        "hidden_size": cfg.model.hidden_size,
        "sequence_parallel": True,
        "distributed_optimizer": True,
        "num_moe_experts": None,
        "moe_token_dispatcher": None,
        "preset": preset,
    }


@pytest.mark.parametrize(("name", "num_gpus", "dp", "preset", "sizes"), PUBLISHED)
def test_bridge_overlap_explain_recipe_json(name, num_gpus, dp, preset, sizes, capsys):
    assert main(["explain", "--recipe", name, "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["recipe"] == name
    # The one warning a published run may carry: headroom under the allocator's fragmentation.
    memory = doc["memory"]
    thin = memory["headroom_bytes"] < memory["capacity_bytes"] * FRAGMENTATION_FRACTION
    assert [w.split(" headroom, ")[0].split(" memory with ")[1] for w in doc["warnings"]] == (
        [gib(memory["headroom_bytes"])] if thin else []
    )
    assert doc["overlap"]["warnings"] == []
    assert (doc["layout"]["world_size"], doc["layout"]["dp"]) == (num_gpus, dp)
    assert doc["preset"]["name"] == preset and doc["preset"]["matches_model"] is True
    values = {d["knob"]: d["value"] for d in doc["overlap"]["decisions"]}
    assert values["tp_comm_overlap"] is True
    assert (values["overlap_p2p_comm"], values["align_param_gather"]) == (True, True)
    env = {e["name"]: e["value"] for e in doc["launch_env"]}
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_bridge_overlap_explain_recipe_text(capsys):
    assert main(["explain", "--recipe", "gpt3_175b"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "Recipe: gpt3_175b" in out
    assert "1024 x H100  TP4 PP8 VPP6 CP1 EP1 -> DP32" in out
    assert "WARNING" not in out


# --------------------------------------------------------------------- launch


@pytest.mark.parametrize(
    ("name", "gpu", "expected"),
    [
        ("gpt3_175b", "h100", "1"),
        ("gpt3_175b", "b200", "32"),
        ("llama3_70b", "h200", "1"),
        ("llama31_405b", "gb200", "32"),
    ],
)
def test_perf_env_plugin_from_a_recipe_sets_connections(name, gpu, expected):
    cfg = get_recipe(name, gpu=gpu)
    module = recipe_module(name)
    plugin = PerfEnvPlugin.from_config(
        cfg, num_gpus=module.SPEC.num_gpus, gpu=gpu, layernorm_sm_margin=20
    )
    assert isinstance(plugin, PerfEnvPlugin)
    layout = recipe_layout(name)
    assert (plugin.tp_size, plugin.pp_size, plugin.cp_size) == (
        layout["tp"],
        layout["pp"],
        layout["cp"],
    )
    assert (plugin.num_gpus, plugin.dp_size) == (module.SPEC.num_gpus, layout["dp"])
    executor = run.LocalExecutor()
    plugin.setup(run.Script(path="/opt/pretrain.py", entrypoint="python"), executor)
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == expected
    assert executor.env_vars["NVTE_FWD_LAYERNORM_SM_MARGIN"] == "20"


def test_perf_env_plugin_rejects_a_gpu_count_the_layout_does_not_divide():
    cfg = get_recipe("llama31_405b")
    with pytest.raises(ValueError, match="num_gpus=1000 is not divisible"):
        PerfEnvPlugin.from_config(cfg, num_gpus=1000, gpu="h100")
    with pytest.raises(TypeError, match="gpu="):
        PerfEnvPlugin.from_config(cfg, num_gpus=1024, gpu="h100", gpu_sm100_or_newer=True)


def test_example_launcher_dry_run(tmp_path):
    spec = importlib.util.spec_from_file_location("launch_gpt3_175b", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    lines = example.sbatch_for(gpu="h100", job_dir=tmp_path, nsys=True).splitlines()
    assert "#SBATCH --nodes=128" in lines
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in lines
    assert "export NVTE_BWD_LAYERNORM_SM_MARGIN=20" in lines
    srun = next(line for line in lines if line.startswith("srun --output"))
    assert " nsys profile " in srun
    # The job runs this repository's own entry point, not a script outside it.
    assert srun.rstrip().endswith(
        "python -m megatron.bridge.check --recipe gpt3_175b --gpu h100 --json"
    )
    assert "/opt/" not in srun and "train.manual_gc" not in srun
