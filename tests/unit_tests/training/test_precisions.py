"""Training precisions (megatron/bridge/training/precisions.py): one table, one answer per route.

Every precision reaches the same job description from the recipe spec, the CLI flags and a
mixed-precision preset set up on megatron-core's configs; every route refuses a precision the
GPU cannot train in with the same message (the GPU catalogue's rule, Transformer Engine's).
"""

from __future__ import annotations

import json

import pytest
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, main
from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.recipes import get_recipe, plan_recipe, recipe_spec
from megatron.bridge.training.comm_overlap import check_layout, te_status
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.stage import busiest_stage
from megatron.bridge.training.hardware import GPUS
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.job_configs import describe_model
from megatron.bridge.training.mixed_precision import (
    MIXED_PRECISION_PRESETS,
    MixedPrecisionConfig,
    bf16_with_mxfp8_mixed,
    bf16_with_nvfp4_mixed,
    get_mixed_precision_config,
)
from megatron.bridge.training.precisions import (
    PRECISION_ALIASES,
    PRECISIONS,
    canonical_precision,
    published_precision,
)
from megatron.bridge.training.resolve import resolve_config

# What each precision trains in, written out: megatron-core's fields and the preset family.
EXPECTED = {
    "bf16": (None, "delayed", None, "bf16"),
    "fp16": (None, "delayed", None, "fp16"),
    "fp8_ds": ("hybrid", "delayed", None, "fp8"),
    "fp8_cs": ("hybrid", "tensorwise", None, "fp8"),
    "fp8_sc": ("hybrid", "blockwise", None, "fp8"),
    "fp8_mx": ("e4m3", "mxfp8", None, "fp8"),
    "nvfp4": (None, "delayed", "e2m1", "fp8"),
}

# Transformer Engine's rule (quantization.py, _compute_*_support), GPU by GPU: the precisions
# each catalogue GPU cannot train in.
REFUSED = {
    "a100": {"fp8_ds", "fp8_cs", "fp8_sc", "fp8_mx", "nvfp4"},
    "h100": {"fp8_mx", "nvfp4"},
    "h200": {"fp8_mx", "nvfp4"},
    "b200": set(),
    "gb200": set(),
    "b300": set(),
    "gb300": set(),
}
REFUSED_PAIRS = sorted((gpu, p) for gpu, ps in REFUSED.items() for p in ps)


def test_the_table_holds_every_precision_named_by_upstream_scripts():
    # scripts/performance/argument_parser.py --compute_dtype, plus fp16 and fp8_ds.
    assert set(PRECISIONS) == set(EXPECTED)
    assert {"bf16", "fp8_cs", "fp8_mx", "fp8_sc", "nvfp4"} <= set(PRECISIONS)


# ---------------------------------------------------------------------------- routes


@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_the_preset_sets_up_what_the_table_says(precision):
    fp8, recipe, fp4, family = EXPECTED[precision]
    provider = GPTModelProvider(num_layers=4, hidden_size=256, num_attention_heads=8)
    mixed = get_mixed_precision_config(PRECISIONS[precision].mixed_precision)
    mixed.setup(provider, OptimizerConfig(), DistributedDataParallelConfig())
    model = describe_model(provider)
    assert (model.fp8, model.fp8_recipe, model.fp4) == (fp8, recipe, fp4)
    assert model.compute_dtype == precision
    assert model.precision == family
    provider.finalize()  # megatron-core's own validation accepts every precision's preset


@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_spec_flags_and_container_reach_one_description(precision, capsys):
    spec = recipe_spec("llama3_70b", gpu="b200", precision=precision)
    assert spec.precision == precision
    assert spec.job.compute_dtype == precision
    assert spec.job.precision == PRECISIONS[precision].preset_family
    # The flags: the same job in the --json document.
    argv = ["explain", "--json", "--recipe", "llama3_70b", "--gpu", "b200"]
    assert main([*argv, "--precision", precision]) == EXIT_OK
    layout = json.loads(capsys.readouterr().out)["layout"]
    assert (layout["compute_dtype"], layout["precision"]) == (precision, spec.job.precision)
    # The container, resolved as at model-build time.
    cfg = get_recipe("llama3_70b", gpu="b200", precision=precision)
    resolved = resolve_config(cfg, world_size=spec.num_gpus, te=te_status("assume"))
    assert resolved.job.compute_dtype == precision
    assert resolved.job == spec.job_on()


@pytest.mark.parametrize(("alias", "name"), sorted(PRECISION_ALIASES.items()))
def test_aliases_resolve_on_every_route(alias, name, capsys):
    assert canonical_precision(alias) == name
    assert recipe_spec("llama3_70b", gpu="b200", precision=alias).precision == name
    assert plan_recipe("llama3_70b", gpu="b200", precision=alias).job.compute_dtype == name
    assert get_mixed_precision_config(alias) == get_mixed_precision_config(name)
    argv = ["explain", "--json", "--gpu", "b200", "--precision", alias]
    assert main(argv) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["layout"]["compute_dtype"] == name


def test_fp8_stays_delayed_scaling():
    # The precision recipes offered before this table: FP8 with delayed scaling.
    job = recipe_spec("gpt3_175b", precision="fp8").job
    assert (job.model.fp8, job.model.fp8_recipe, job.compute_dtype) == (
        "hybrid",
        "delayed",
        "fp8_ds",
    )


def test_unknown_precision_lists_the_choices():
    with pytest.raises(ValueError, match=r"precision must be one of \['bf16', 'fp16', 'fp8_ds'"):
        canonical_precision("fp4")
    with pytest.raises(ValueError, match="mxfp8"):
        recipe_spec("llama3_70b", precision="int8")


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("BF16", "bf16"),
        ("FP8", "fp8_cs"),
        ("FP8-CS", "fp8_cs"),
        ("FP8-MX", "fp8_mx"),
        ("MXFP8", "fp8_mx"),
        ("NVFP4", "nvfp4"),
    ],
)
def test_published_table_labels(label, name):
    assert published_precision(label) == name


def test_unknown_published_label_is_refused():
    with pytest.raises(ValueError, match="published precision must be one of"):
        published_precision("FP6")


# ---------------------------------------------------------------------------- presets


@pytest.mark.parametrize("name", sorted(MIXED_PRECISION_PRESETS))
def test_hyphen_spelling_of_every_preset(name):
    assert get_mixed_precision_config(name.replace("_", "-")) == get_mixed_precision_config(name)


def test_upstream_presets_are_there():
    # Upstream's general presets (training/mixed_precision.py), the NVFP4 one among them.
    for name in (
        "bf16_with_nvfp4_mixed",
        "fp16_with_mxfp8_mixed",
        "fp16_with_fp8_subchannel_scaling_mixed",
    ):
        assert name in MIXED_PRECISION_PRESETS
    assert get_mixed_precision_config("bf16-mixed").bf16 is True


def test_nvfp4_preset_lands_in_megatron_configs():
    model = GPTModelProvider(num_layers=4, hidden_size=256, num_attention_heads=8)
    optimizer, ddp = OptimizerConfig(), DistributedDataParallelConfig()
    bf16_with_nvfp4_mixed().setup(model, optimizer, ddp)
    assert (model.fp4, model.fp4_recipe, model.fp4_param, model.fp8) == (
        "e2m1",
        "nvfp4",
        True,
        None,
    )
    assert ddp.fp4_param_gather is True
    assert optimizer.fp8_recipe is None


def test_mxfp8_preset_gathers_parameters_in_the_gradient_buffer():
    # Upstream's preset: without both, megatron-core's OptimizerConfig warns of extra memory.
    model = GPTModelProvider(num_layers=4, hidden_size=256, num_attention_heads=8)
    optimizer, ddp = OptimizerConfig(), DistributedDataParallelConfig()
    bf16_with_mxfp8_mixed().setup(model, optimizer, ddp)
    assert (ddp.fp8_param_gather, ddp.reuse_grad_buf_for_mxfp8_param_ag) == (True, True)
    assert optimizer.fp8_recipe == "mxfp8"


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"fp8": "e4m3", "fp4": "e2m1"}, "fp8='e4m3' and fp4='e2m1'"),
        ({"fp4_param_gather": True}, "fp4_param_gather=True needs FP4"),
        ({"fp4": "e3m0"}, "fp4 must be one of"),
    ],
)
def test_fp4_settings_megatron_core_refuses(fields, match):
    with pytest.raises(ValueError, match=match):
        MixedPrecisionConfig(bf16=True, **fields).finalize()


# ---------------------------------------------------------------------------- the GPU rule


@pytest.mark.parametrize(("gpu", "precision"), REFUSED_PAIRS)
def test_spec_refuses_a_precision_the_gpu_cannot_train_in(gpu, precision):
    with pytest.raises(ValueError, match=rf"precision {precision} .*{gpu} \(SM\d+\)"):
        recipe_spec("llama3_70b", gpu=gpu, precision=precision)


@pytest.mark.parametrize(("gpu", "precision"), REFUSED_PAIRS)
def test_cli_flags_exit_two_naming_precision_gpu_and_fix(gpu, precision, capsys):
    assert main(["explain", "--gpu", gpu, "--precision", precision]) == EXIT_INVALID
    err = capsys.readouterr().err
    assert f"precision {precision}" in err and gpu in err
    assert "pick a gpu from" in err and "b200" in err


@pytest.mark.parametrize("gpu", sorted(GPUS))
@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_every_route_gives_the_gpu_rule(gpu, precision):
    refused = precision in REFUSED[gpu]
    assert (GPUS[gpu].precision_refusal(precision) is not None) is refused
    # The torch-free description route (what the resolver checks at model-build time).
    job = recipe_spec("llama3_70b", gpu="b200", precision=precision).job.replace(gpu=gpu)
    if refused:
        with pytest.raises(ValueError, match=f"precision {precision}"):
            check_layout(job)
    else:
        check_layout(job)


def test_mxfp8_override_on_hopper_exits_two(capsys):
    # The container route: a mixed-precision override on a recipe that runs on H100.
    argv = ["explain", "--recipe", "llama3_70b", "mixed_precision=bf16_with_mxfp8_mixed"]
    assert main(argv) == EXIT_INVALID
    err = capsys.readouterr().err
    assert "precision fp8_mx (MXFP8)" in err and "h100 (SM90)" in err
    assert "pick a gpu from ['b200', 'gb200', 'b300', 'gb300']" in err


def test_nvfp4_container_on_hopper_is_refused_at_resolve():
    cfg = get_recipe("llama3_70b")
    cfg.mixed_precision = "nvfp4"
    with pytest.raises(ValueError, match=r"precision nvfp4 \(NVFP4\) needs FP4 tensor cores"):
        resolve_config(cfg, world_size=64, te=te_status("assume"))


# ---------------------------------------------------------------------------- preset family, peak


def test_every_precision_has_a_published_preset_family():
    # Upstream runs FP8 current scaling, MXFP8 and NVFP4 on the userbuffers_fp8_* presets.
    families = {name: setting.preset_family for name, setting in PRECISIONS.items()}
    assert families == {name: family for name, (*_, family) in EXPECTED.items()}


def test_blackwell_fp8_recipes_find_the_fp8_preset(capsys):
    for precision in ("fp8_cs", "fp8_mx", "nvfp4"):
        plan = plan_recipe("llama3_70b", gpu="b200", precision=precision, tp_size=2)
        assert plan.preset_name == "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192"
    assert (
        main(["explain", "--recipe", "llama3_70b", "--gpu", "gb300", "--precision", "nvfp4"]) == 0
    )
    assert "nvfp4 (fp8 presets)" in capsys.readouterr().out


def _busiest(plan):
    # The plan's model costs and its busiest pipeline stage, as the estimate picks it by FLOPs.
    dims = ModelCost(plan.job.model)
    stage = busiest_stage(
        plan.job,
        dims,
        micro_batch_size=plan.job.micro_batch_size,
        micro_batches=plan.job.micro_batches,
    )
    return dims, stage


def _seconds_at_peak(
    gpu: str, precision: str, *, recipe="llama3_70b", fp8_attention=False
) -> float:
    # One layout at each precision: the spec changed, not the run published for it.
    spec = recipe_spec(recipe).changed(
        gpu=gpu, precision=precision, **{"model.fp8_dot_product_attention": fp8_attention}
    )
    return estimate_step(spec.plan()).step.compute_seconds_at_peak


@pytest.mark.parametrize("recipe", ["llama3_70b", "nemotron_3_nano"])
@pytest.mark.parametrize("gpu", ["b200", "gb200", "b300", "gb300"])
def test_the_gemms_run_at_each_precisions_peak_and_attention_scans_and_heads_at_16_bits(
    gpu, recipe
):
    spec = GPUS[gpu]
    s16, s8, s4 = (_seconds_at_peak(gpu, p, recipe=recipe) for p in ("bf16", "fp8_mx", "nvfp4"))
    # Seconds = GEMM FLOPs / the precision's peak + core-attention, Mamba-scan and output-head
    # FLOPs / the BF16 peak: the FP8 and FP4 runs give the GEMM FLOPs, the BF16 run the rest.
    gemm = (s8 - s4) / (1 / spec.peak_fp8_tflops - 1 / spec.peak_fp4_tflops)
    rest = s16 * spec.peak_bf16_tflops - gemm
    assert s8 == pytest.approx(gemm / spec.peak_fp8_tflops + rest / spec.peak_bf16_tflops)
    plan = recipe_spec(recipe).changed(gpu=gpu, precision="bf16").plan()
    dims, stage = _busiest(plan)
    per_layer = dims.core_attention_flops_per_token() + dims.scan_flops_per_token()
    # The busiest stage here is the last one: it holds the main output head (and, in these
    # recipes without MTP, no other).
    assert stage.last and dims.mtp_layers == 0
    heads = dims.logit_flops_per_token(plan.job.tp_size)
    assert rest / (gemm + rest) == pytest.approx(
        (stage.layers * per_layer + heads) / stage.flops_per_token
    )
    assert (dims.scan_flops_per_token() > 0) == (recipe == "nemotron_3_nano")


def test_the_mtp_heads_run_at_16_bits_on_the_stage_that_builds_them():
    # DeepSeek-V3 with one MTP layer at PP1: the one stage holds the main head and the MTP head,
    # and both run at the BF16 peak in an MXFP8 run; FP8 output projection is not a job field.
    spec = recipe_spec("deepseek_v3").changed(gpu="gb300", precision="fp8_mx")
    spec = spec.changed(
        **{
            "model.pipeline_model_parallel_size": 1,
            "model.virtual_pipeline_model_parallel_size": None,
            "model.pipeline_model_parallel_layout": None,
        }
    )
    plan = spec.plan()
    dims, stage = _busiest(plan)
    assert dims.mtp_layers == 1 and stage.last
    gpu = GPUS["gb300"]
    fp8, bf16 = gpu.peak_fp8_tflops * 1e12, gpu.peak_bf16_tflops * 1e12
    core = stage.layers * dims.core_attention_flops_per_token()
    heads = 2 * dims.logit_flops_per_token(plan.job.tp_size)
    executed = stage.flops_per_token + stage.recompute_flops_per_token
    # Worked: the GEMM FLOPs at the FP8 peak, core attention and both heads at the BF16 peak,
    # over every executed FLOP (the recomputed ones at the same mix).
    mix = ((stage.flops_per_token - core - heads) / fp8 + (core + heads) / bf16) / (
        stage.flops_per_token
    )
    tokens = plan.job.global_batch_size * plan.job.model.seq_length / plan.job.dp_size
    expected = executed * tokens * mix
    assert estimate_step(plan).step.compute_seconds_at_peak == pytest.approx(expected)


@pytest.mark.parametrize("gpu", ["b200", "gb200", "b300", "gb300"])
def test_fp8_dot_product_attention_runs_core_attention_at_the_fp8_peak(gpu):
    spec = GPUS[gpu]
    s16 = _seconds_at_peak(gpu, "bf16", fp8_attention=True)
    s8 = _seconds_at_peak(gpu, "fp8_mx", fp8_attention=True)
    # Everything but the output head (the busiest, last stage's) at the FP8 peak: the BF16 run's
    # seconds split into the head's share and the rest.
    plan = recipe_spec("llama3_70b").changed(gpu=gpu, precision="bf16").plan()
    dims, stage = _busiest(plan)
    head = dims.logit_flops_per_token(plan.job.tp_size) / stage.flops_per_token
    expected = s16 * ((1 - head) * spec.peak_bf16_tflops / spec.peak_fp8_tflops + head)
    assert stage.last and s8 == pytest.approx(expected)
    assert s8 < _seconds_at_peak(gpu, "fp8_mx")


def test_the_description_of_a_custom_recipe_names_no_compute_dtype():
    model = ModelDescription(bf16=True, fp8="hybrid", fp8_recipe="custom")
    assert model.compute_dtype is None and model.precision == "fp8"


@pytest.mark.parametrize("name", ["fp8_param", "fp4_param"])
def test_a_param_flag_set_on_the_model_is_replaced_with_a_warning(name, caplog):
    # Mixed precision owns the quantized-parameter flags; a True it replaces is said, not dropped.
    model = GPTModelProvider(num_layers=4, hidden_size=256, num_attention_heads=8)
    setattr(model, name, True)
    with caplog.at_level("WARNING", logger="megatron.bridge.training.mixed_precision"):
        get_mixed_precision_config("bf16_mixed").setup(model)
    assert getattr(model, name) is False
    assert f"cfg.model.{name}=True is replaced" in caplog.text


def test_the_fp8_dot_product_attention_flag_reaches_the_estimate(capsys):
    documents = []
    for extra in ([], ["--fp8-dot-product-attention"]):
        argv = ["explain", "--recipe", "llama3_70b", "--gpu", "gb300", "--precision", "fp8_mx"]
        assert main([*argv, *extra, "--json"]) == EXIT_OK
        documents.append(json.loads(capsys.readouterr().out))
    said = [
        any("core attention at the BF16 peak" in a for a in d["estimate"]["assumptions"])
        for d in documents
    ]
    assert said == [True, False]
    seconds = [d["estimate"]["step"]["compute_seconds_at_peak"] for d in documents]
    assert seconds[1] < seconds[0]
