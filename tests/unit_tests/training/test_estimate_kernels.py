"""The MoE and hybrid kernel terms of the step estimate, each worked by hand."""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.recipes import plan_recipe
from megatron.bridge.training.estimate import estimate_step, kernels
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.job import ModelDescription
from tests.unit_tests.conftest import mamba_fields, size_fields
from tests.unit_tests.repo_scripts import load_script

PREDICT_PUBLISHED = load_script("benchmarks/predict_published.py")


def _moe(**fields) -> ModelDescription:
    base = {
        **size_fields(layers=4, hidden=1024, heads=8, vocab=1024, seq=1024),
        "num_moe_experts": 64,
        "moe_router_topk": 4,
        "moe_ffn_hidden_size": 512,
        "gated_linear_unit": True,
    }
    base.update(fields)
    return ModelDescription(**base)


def test_generation_follows_the_compute_capability():
    assert kernels.generation(gpu_spec("h100")) == "hopper"
    assert kernels.generation(gpu_spec("gb200")) == "blackwell"
    assert kernels.generation(gpu_spec("gb300")) == "blackwell"
    assert kernels.generation(gpu_spec("a100")) == "ampere"


@pytest.mark.parametrize(
    ("rows", "multiple", "padded"),
    [
        (100, 128, 128),
        (128, 128, 128),
        (129, 128, 256),
        (0.2, 128, 128),
        (33.5, 0, 34),
        (17, 16, 32),
    ],
)
def test_padded_rows_round_up_to_the_multiple(rows, multiple, padded):
    assert kernels.padded_rows(rows, multiple) == padded


def test_quantization_alignment_is_megatron_cores():
    off = _moe(fp8="e4m3", fp8_recipe="mxfp8")
    assert kernels.quantization_row_alignment(off) == 0
    on = {"moe_router_padding_for_quantization": True}
    assert kernels.quantization_row_alignment(_moe(fp8="e4m3", fp8_recipe="mxfp8", **on)) == 32
    assert kernels.quantization_row_alignment(_moe(fp8="e4m3", fp8_recipe="tensorwise", **on)) == 16
    assert kernels.quantization_row_alignment(_moe(fp4="e2m1", **on)) == 128
    assert kernels.quantization_row_alignment(_moe(**on)) == 0


def test_rows_per_expert_spread_the_ep_groups_copies():
    # 4096 tokens x EP 8 x top-4 over 64 experts = 2048 rows.
    assert kernels.rows_per_expert(_moe(), tokens=4096, ep_size=8) == 2048
    assert kernels.rows_per_expert(_moe(num_moe_experts=None), tokens=4096, ep_size=8) == 0


def test_roofline_efficiency_by_hand():
    # 1024 x 1024 by 1024 x 1024 in FP8: 2.147e9 FLOPs at 1e15/s = 2.147 us; bytes
    # 1 x (1M + 1M) + 2 x 1M = 4 MiB = 4.194e6 at 4e12/s = 1.049 us; share 0.6719.
    eff = kernels.gemm_roofline_efficiency(
        1024, 1024, 1024, flop_rate=1e15, hbm_bytes_per_s=4e12, operand_bytes=1.0
    )
    flops = 2 * 1024**3 / 1e15
    nbytes = (2 * 1024**2 + 2 * 1024**2) / 4e12
    assert eff == pytest.approx(flops / (flops + nbytes))
    assert eff == pytest.approx(0.6719, abs=1e-4)


def test_grouped_gemm_efficiency_by_hand():
    """fc1 (100 rows, padded to 128) 1024 -> 1024 (gated 512), fc2 512 -> 1024, BF16."""
    rate, hbm = 1e15, 4e12
    model = _moe()
    eff = kernels.grouped_gemm_efficiency(
        model, rows=100, etp_size=1, flop_rate=rate, hbm_bytes_per_s=hbm, tensor_cores="bf16"
    )
    useful = spent = 0.0
    for k, n in ((1024, 1024), (512, 1024)):
        useful += 2 * 100 * k * n / rate
        compute = 2 * 128 * k * n / rate
        nbytes = 2 * (128 * k + k * n) + 2 * 128 * n
        spent += compute + nbytes / hbm
    assert eff == pytest.approx(useful / spent)
    # More rows per expert run nearer the dense rate.
    more = kernels.grouped_gemm_efficiency(
        model, rows=8192, etp_size=1, flop_rate=rate, hbm_bytes_per_s=hbm, tensor_cores="bf16"
    )
    assert eff < more < 1.0


def test_cross_entropy_bytes_by_hand():
    # Logits write 2, cast 6, max 4, subtract 8, exp 8, sum 4, normalize 8, gradient 8, cast 6,
    # two GEMM reads 4: 58 bytes per logit, over the TP rank's share of the vocabulary.
    assert kernels.cross_entropy_bytes_per_token(128_000) == 58 * 128_000
    assert kernels.cross_entropy_bytes_per_token(128_000, tp_size=4) == 58 * 32_000


def test_the_loss_is_priced_on_the_stage_with_the_output_layer():
    plan = plan_recipe("llama3_8b", gpu="b200", precision="fp8_cs")
    (line,) = [a for a in estimate_step(plan).assumptions if "cross-entropy" in a]
    assert "58 bytes per logit" in line


def test_ssd_flops_by_hand():
    # Q 128, N 128, P 64, 64 heads, 8 groups: forward 8 x 2 x 128 x 128 + 64 x (4 x 128 x 64
    # + 2 x 128 x 64) = 262144 + 3145728; training three times that.
    model = ModelDescription(
        **size_fields(layers=2, hidden=2048, heads=16, vocab=1024, seq=1024),
        hybrid_layer_pattern="M*",
        **mamba_fields(state=128, head_dim=64, groups=8, heads=64),
    )
    assert kernels.ssd_flops_per_token(model) == 3 * (262144 + 3145728)


@pytest.mark.parametrize(
    ("rate_of", "table", "fitted_on"),
    [
        (kernels.ssm_scan_rate, kernels.SSM_SCAN, "Nemotron_3_Nano"),
        (kernels.sparse_attention_rate, kernels.SPARSE_ATTENTION, "DeepSeekV4 Flash"),
    ],
    ids=["ssm-scan", "sparse-attention"],
)
def test_each_bf16_share_rate_is_the_generations_fitted_share_or_says_whose_it_takes(
    rate_of, table, fitted_on
):
    gb300 = gpu_spec("gb300")
    rate, source = rate_of(gb300)
    assert rate == pytest.approx(gb300.peak_bf16_tflops * 1e12 * table["blackwell"].value)
    assert fitted_on in source
    h100 = gpu_spec("h100")
    rate, source = rate_of(h100)
    assert "no fitted row for hopper" in source
    assert rate == pytest.approx(h100.peak_bf16_tflops * 1e12 * table["blackwell"].value)
    assert rate_of(h100, fraction=0.5) == (h100.peak_bf16_tflops * 1e12 * 0.5, "bisection")


@pytest.mark.parametrize(
    "row",
    [
        *kernels.SSM_FIT_ROWS.values(),
        *kernels.UNFUSED_FIT_ROWS.values(),
        *kernels.SPARSE_ATTENTION_FIT_ROWS.values(),
    ],
    ids=lambda row: f"{row.model}-{row.gpu}-{row.release}",
)
def test_each_kernel_constant_reproduces_the_row_it_was_fitted_on(row):
    # Planned as the row ran (its release's layout and fused grouped MLP), as the fit plans it.
    plan = PREDICT_PUBLISHED.published_plan(row)
    predicted = estimate_step(plan).prediction.tokens_per_s_per_gpu
    assert predicted == pytest.approx(row.tokens_per_s_per_gpu, rel=0.01)


def test_the_kernel_terms_slow_moe_and_mamba_steps_and_say_so():
    plan = plan_recipe("nemotron_3_nano", gpu="gb300", precision="fp8_mx")
    estimate = estimate_step(plan)
    assert any("grouped expert GEMMs" in a for a in estimate.assumptions)
    assert any("Mamba SSD scan kernels" in a for a in estimate.assumptions)
    faster = estimate_step(plan, ssm_scan_fraction=1.0)
    assert faster.prediction.step_seconds < estimate.prediction.step_seconds


def test_a_dense_model_has_no_moe_or_scan_terms():
    plan = plan_recipe("llama3_8b", gpu="b200", precision="fp8_cs")
    estimate = estimate_step(plan)
    assert not any("grouped expert GEMMs" in a or "Mamba SSD" in a for a in estimate.assumptions)
    same = estimate_step(plan, ssm_scan_fraction=0.5, sparse_attention_fraction=0.5)
    assert same.prediction.step_seconds == estimate.prediction.step_seconds
    assert not any("DeepSeek-V4 attention" in a for a in estimate.assumptions)


# --- DeepSeek-V4's attention kernels ---------------------------------------------------------


def test_deepseek_v4_core_attention_runs_at_the_sparse_attention_rate():
    # DeepSeek-V4 Flash as its GB200 row ran: 128 GPUs, TP1 PP1 CP1, 16 micro-batches of one
    # 4096-token sequence per DP rank, so the one stage runs all 43 layers over 65536 tokens.
    plan = PREDICT_PUBLISHED.published_plan(kernels.SPARSE_ATTENTION_FIT_ROWS["blackwell"])
    job = plan.job
    assert (job.pp_size, job.tp_size, job.cp_size) == (1, 1, 1)
    tokens = job.micro_batches * job.micro_batch_size * job.model.seq_length
    assert tokens == 65536
    core = job.model.num_layers * ModelCost(job.model).core_attention_flops_per_token() * tokens
    peak = gpu_spec("gb200").peak_bf16_tflops * 1e12
    # The core-attention FLOPs at 5 % of the BF16 peak take core / (0.05 peak) s, at 10 % half
    # that: the compute differs by exactly the difference, the rest of the step being alike.
    slow = estimate_step(plan, sparse_attention_fraction=0.05).prediction.compute_seconds
    fast = estimate_step(plan, sparse_attention_fraction=0.10).prediction.compute_seconds
    assert slow - fast == pytest.approx(core / (0.05 * peak) - core / (0.10 * peak), rel=1e-9)
    # At a share above what the compute already prices core attention at, nothing is added.
    at_peak = estimate_step(plan, sparse_attention_fraction=1.0)
    assert not any("DeepSeek-V4 attention" in a for a in at_peak.assumptions)
    fitted = estimate_step(plan)
    assert any("DeepSeek-V4 attention kernels" in a for a in fitted.assumptions)


def test_fewer_rows_per_expert_cost_more_per_flop():
    plan = plan_recipe("qwen3_30b_a3b", gpu="gb300", precision="fp8_mx")
    many = estimate_step(plan)
    few_job = dataclasses.replace(
        plan.job, model=dataclasses.replace(plan.job.model, num_moe_experts=1024)
    )
    few = estimate_step(dataclasses.replace(plan, job=few_job))
    per_flop = [e.prediction.step_seconds / e.executed_flops_per_gpu for e in (many, few)]
    assert per_flop[1] > per_flop[0]


# --- the routed experts outside the fused grouped MLP -------------------------------------------


def test_routed_elements_are_topk_copies_of_the_dispatched_width():
    assert kernels.routed_elements_per_token(_moe()) == 4 * 1024
    # With a latent, the experts take latent-wide tokens.
    assert kernels.routed_elements_per_token(_moe(moe_latent_size=256)) == 4 * 256
    dense = dataclasses.replace(_moe(), num_moe_experts=None)
    assert kernels.routed_elements_per_token(dense) == 0


def test_the_unfused_bytes_by_generation_and_their_sources():
    gb200, h100, a100 = gpu_spec("gb200"), gpu_spec("h100"), gpu_spec("a100")
    blackwell, source = kernels.unfused_expert_bytes(gb200)
    assert blackwell == kernels.UNFUSED_EXPERTS["blackwell"].value
    assert "26.04.01, DGX-GB200, Qwen3_30B_a3B" in source
    hopper, source = kernels.unfused_expert_bytes(h100)
    assert hopper == kernels.UNFUSED_EXPERTS["hopper"].value
    assert "DGX-H100" in source
    # A generation without a fitted row takes Hopper's, and says so.
    ampere, source = kernels.unfused_expert_bytes(a100)
    assert ampere == hopper and "no fitted row for ampere" in source
    assert kernels.unfused_expert_bytes(gb200, bytes_per_element=3.0) == (3.0, "bisection")


def _qwen3_30b(fused: bool):
    return plan_recipe(
        "qwen3_30b_a3b",
        gpu="gb200",
        precision="fp8_mx",
        changes={"model.use_transformer_engine_op_fuser": fused},
    )


def test_the_unfused_experts_cost_their_routed_elements_at_the_hbm_peak():
    fused, unfused = estimate_step(_qwen3_30b(True)), estimate_step(_qwen3_30b(False))
    job = _qwen3_30b(False).job
    gpu = gpu_spec("gb200")
    # 8 GPUs, EP 8, TP 1, CP 1: each GPU routes its DP rank's 512 / 8 x 4096 tokens through all
    # 48 MoE layers, top-8 copies of the 2048-wide token each.
    tokens = 512 // 8 * 4096
    elements = tokens * 48 * 8 * 2048
    seconds = elements * kernels.UNFUSED_EXPERTS["blackwell"].value
    seconds /= gpu.hbm_gb_per_s * 1e9
    assert job.ep_size == 8 and job.dp_size == 8
    added = unfused.prediction.compute_seconds - fused.prediction.compute_seconds
    assert added == pytest.approx(seconds, rel=1e-9)
    assert any("outside Transformer Engine's fused grouped MLP" in a for a in unfused.assumptions)
    assert not any("outside Transformer Engine's fused" in a for a in fused.assumptions)
    # The fit's value replaces the fitted one.
    zero = estimate_step(_qwen3_30b(False), unfused_bytes=0.0)
    assert zero.prediction.step_seconds == pytest.approx(fused.prediction.step_seconds)


@pytest.mark.parametrize(
    ("gpu", "precision", "fused"),
    [
        ("gb200", "fp8_mx", True),
        ("gb200", "nvfp4", True),
        # Transformer Engine fuses the grouped MLP only under MXFP8 or NVFP4, on Blackwell.
        ("gb200", "fp8_cs", False),
        ("h100", "fp8_cs", False),
    ],
)
def test_the_op_fuser_runs_the_fused_kernel_only_where_te_fuses(gpu, precision, fused):
    changes = {"model.use_transformer_engine_op_fuser": True}
    plan = plan_recipe("qwen3_30b_a3b", gpu=gpu, precision=precision, changes=changes)
    assert kernels.fused_expert_kernel(plan.job.model, gpu_spec(gpu)) is fused
    estimate = estimate_step(plan)
    assert any("outside Transformer Engine's fused" in a for a in estimate.assumptions) is not fused


def test_bf16_experts_have_no_unfused_expert_term():
    # The unfused path's extra kernels are its quantization ones: a BF16 run has none.
    changes = {"model.use_transformer_engine_op_fuser": False}
    plan = plan_recipe("qwen3_30b_a3b", gpu="gb200", precision="bf16", changes=changes)
    estimate = estimate_step(plan)
    assert estimate_step(plan, unfused_bytes=1e6).prediction == estimate.prediction
    assert not any("outside Transformer Engine's fused" in a for a in estimate.assumptions)


def test_a_dense_model_has_no_unfused_expert_term():
    plan = plan_recipe("llama3_8b", gpu="b200", precision="fp8_cs")
    estimate = estimate_step(plan)
    assert estimate_step(plan, unfused_bytes=1e6).prediction == estimate.prediction
