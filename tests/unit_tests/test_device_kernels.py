"""``benchmarks/device_kernels.py``: its FLOP count and curves are the step estimate's, and a
quick run on the CPU times every kernel it names or says why one did not run (the device's
GPU is read by ``hardware.device_gpu``, tested with the catalogue).

The timings themselves need a GPU: here the quick run's small shapes on the CPU check the
script's code paths against H100's curves, not the curves."""

from __future__ import annotations

import importlib.util
import json

import pytest

from megatron.bridge.recipes import plan_recipe
from megatron.bridge.training.estimate.model_flops import ModelFlops
from tests.unit_tests.repo_scripts import load_script

device_kernels = load_script("benchmarks/device_kernels.py")


def _gpt_oss_case(window: bool):
    label = "window" if window else "full"
    return next(a for a in device_kernels.ATTENTION if "GPT-OSS" in a.label and label in a.label)


@pytest.mark.parametrize("window", [False, True])
def test_gpt_oss_attention_flops_are_the_estimates(window):
    model = plan_recipe("gpt_oss_120b", gpu="gb200").job.model
    case = _gpt_oss_case(window)
    assert (case.heads, case.groups, case.head_dim, case.seq) == (
        model.num_attention_heads,
        model.num_query_groups,
        model.kv_channels,
        model.seq_length,
    )
    assert case.window == (model.window_size if window else None)
    by_keys = ModelFlops(model).core_attention_by_keys()
    layers = [i for i in range(model.num_layers) if model.uses_window(i) == window]
    per_layer_token = by_keys[case.keys] * model.num_layers / len(layers)
    # The estimate's training FLOPs are 3x the forward's.
    assert 3 * case.forward_flops / (case.batch * case.seq) == pytest.approx(per_layer_token)


def test_curves_move_the_way_the_estimate_prices_kernels():
    h100 = device_kernels.gpu_spec("h100")
    curve = device_kernels.gemm_curve_seconds
    # 4096 x 4224 is 32 x 33 tiles of 128, 8 full waves on H100's 132 SMs; one column more is a
    # 34th tile column and a ninth, part-filled wave.
    aligned = device_kernels.Gemm("aligned", 4096, 4224, 4096)
    ragged = device_kernels.Gemm("ragged", 4096, 4225, 4096)
    rate = [2 * g.m * g.n * g.k / curve(h100, g) for g in (aligned, ragged)]
    assert rate[1] < rate[0] * 0.9
    full, window = (
        device_kernels.attention_curve_seconds(h100, _gpt_oss_case(w)) for w in (False, True)
    )
    full_rate = _gpt_oss_case(False).forward_flops / full[0]
    window_rate = _gpt_oss_case(True).forward_flops / window[0]
    assert window_rate < full_rate  # 128 keys a call against 4096


def test_quick_cpu_run_times_every_kernel_or_says_why(tmp_path):
    out = tmp_path / "kernels.json"
    record = device_kernels.main(["--device", "cpu", "--quick", "--gpu", "h100", "--out", str(out)])
    assert json.loads(out.read_text(encoding="utf-8")) == record
    rows = record["rows"]
    vanilla = [
        a for a in device_kernels.ATTENTION if a.window is None and a.softmax_type == "vanilla"
    ]
    assert len(rows) == len(device_kernels.GEMMS) + 2 * len(vanilla) + 2 * len(
        device_kernels.ATTENTION
    )
    te_installed = importlib.util.find_spec("transformer_engine") is not None
    for row in rows:
        if row["backend"] == "te DotProductAttention" and not te_installed:
            assert row["measured_seconds"] is None
            assert "Transformer Engine is not installed" in row["reason"]
            continue
        assert row["reason"] is None, row
        assert row["measured_seconds"] > 0
        assert row["ratio"] == pytest.approx(row["curve_seconds"] / row["measured_seconds"])
