"""The GPU catalogue (megatron/bridge/training/hardware.py): Blackwell Ultra, FP4 peaks, systems.

Each figure is written out here from NVIDIA's datasheets (dense, per GPU, per direction), so a
changed catalogue entry fails a test that states the datasheet value.
"""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.recipes import plan_recipe, recipe_spec
from megatron.bridge.training.hardware import (
    GPUS,
    SYSTEMS,
    check_precision_on_gpu,
    device_gpu,
    gpu_spec,
    system_gpu,
)
from megatron.bridge.training.precisions import PRECISIONS
from megatron.bridge.training.userbuffers import find_userbuffers_preset

# name: (compute capability, BF16, FP8, FP4 dense TFLOP/s, NVLink GB/s, network GB/s,
#        HBM GB/s, NVLink domain, GPUs per node, preset family)
DATASHEET = {
    "a100": ((8, 0), 312.0, None, None, 300.0, 25.0, 2039.0, None, 8, None),
    "h100": ((9, 0), 989.0, 1979.0, None, 450.0, 50.0, 3350.0, None, 8, "h100"),
    "h200": ((9, 0), 989.0, 1979.0, None, 450.0, 50.0, 4800.0, None, 8, "h100"),
    "b200": ((10, 0), 2250.0, 4500.0, 9000.0, 900.0, 50.0, 8000.0, None, 8, "b200"),
    "gb200": ((10, 0), 2500.0, 5000.0, 10000.0, 900.0, 50.0, 8000.0, 72, 4, "b200"),
    # HGX B300: FP4 108 PF dense over 8 GPUs; ConnectX-8 800 Gb/s per GPU.
    "b300": ((10, 3), 2250.0, 4500.0, 13500.0, 900.0, 100.0, 8000.0, None, 8, "b200"),
    # GB300 NVL72: FP4 1,080 PF dense over 72 GPUs; ConnectX-8 800 Gb/s per GPU.
    "gb300": ((10, 3), 2500.0, 5000.0, 15000.0, 900.0, 100.0, 8000.0, 72, 4, "b200"),
}

# Every system in Megatron-Bridge's docs/performance-summary.md and its archive.
PUBLISHED_SYSTEMS = {
    "DGX-H100": ("h100", 8),
    "DGX-B200": ("b200", 8),
    "DGX-B300": ("b300", 8),
    "DGX-GB200": ("gb200", 4),
    "DGX-GB300": ("gb300", 4),
}


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_each_gpu_carries_its_datasheet_figures(name):
    spec = gpu_spec(name)
    assert (
        spec.compute_capability,
        spec.peak_bf16_tflops,
        spec.peak_fp8_tflops,
        spec.peak_fp4_tflops,
        spec.nvlink_gb_per_s,
        spec.network_gb_per_s,
        spec.hbm_gb_per_s,
        spec.nvlink_domain,
        spec.gpus_per_node,
        spec.preset_family,
    ) == DATASHEET[name]


def test_the_catalogue_is_the_datasheet_table():
    assert set(GPUS) == set(DATASHEET)


@pytest.mark.parametrize(("system", "expected"), sorted(PUBLISHED_SYSTEMS.items()))
def test_every_published_system_maps_to_a_catalogue_entry(system, expected):
    name, per_node = expected
    for spelling in (system, system.lower(), system.removeprefix("DGX-")):
        spec = system_gpu(spelling)
        assert (spec.name, spec.gpus_per_node) == (name, per_node)


def test_every_system_name_names_a_catalogue_gpu():
    assert set(SYSTEMS.values()) <= set(GPUS)
    with pytest.raises(ValueError, match="system must be one of"):
        system_gpu("DGX-V100")


@pytest.mark.parametrize(
    ("precision", "peak"),
    [
        ("bf16", "peak_bf16_tflops"),
        ("fp16", "peak_bf16_tflops"),
        ("fp8", "peak_fp8_tflops"),
        ("fp8_ds", "peak_fp8_tflops"),
        ("fp8_cs", "peak_fp8_tflops"),
        ("fp8_sc", "peak_fp8_tflops"),
        ("fp8_mx", "peak_fp8_tflops"),
        ("mxfp8", "peak_fp8_tflops"),
        ("nvfp4", "peak_fp4_tflops"),
    ],
)
@pytest.mark.parametrize("gpu", ["b200", "gb200", "b300", "gb300"])
def test_blackwell_peaks_per_precision(gpu, precision, peak):
    spec = gpu_spec(gpu)
    assert spec.peak_tflops(precision) == getattr(spec, peak)


def test_a_gpu_without_the_format_falls_back_to_its_widest():
    # H100 has no FP4 tensor cores, A100 no FP8 ones (the precision check refuses those runs).
    assert gpu_spec("h100").peak_tflops("nvfp4") == 1979.0
    assert gpu_spec("h100").peak_format("nvfp4") == "FP8"
    assert gpu_spec("a100").peak_tflops("fp8_cs") == 312.0
    assert gpu_spec("b300").peak_format("nvfp4") == "FP4"


@pytest.mark.parametrize("gpu", ["b300", "gb300"])
def test_blackwell_ultra_is_blackwell_for_the_launch_environment(gpu):
    assert gpu_spec(gpu).sm100_or_newer
    env = recipe_spec("llama3_70b", gpu=gpu).launch_env().env
    # The SM100 rule: TP/CP and DP/PP communication need separate hardware queues.
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    hopper = recipe_spec("llama3_70b", gpu="h100").launch_env().env
    assert hopper["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


@pytest.mark.parametrize("gpu", ["b300", "gb300"])
def test_blackwell_ultra_uses_the_b200_presets(gpu):
    name, _ = find_userbuffers_preset(
        precision="fp8", gpu=gpu, hidden_size=8192, tp_size=2, seq_length=8192
    )
    assert name == "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192"
    plan = plan_recipe("llama3_70b", gpu=gpu, precision="fp8_mx", tp_size=2)
    assert plan.preset_name == "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192"


@pytest.mark.parametrize("gpu", ["b300", "gb300"])
@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_blackwell_ultra_trains_in_every_precision(gpu, precision):
    check_precision_on_gpu(gpu=gpu, precision=precision)


def test_mxfp8_stops_below_sm120():
    # TE: "MXFP8 (for all gemm layouts) is not supported on 12.0+ architectures yet".
    future = dataclasses.replace(gpu_spec("b300"), name="sm120", compute_capability=(12, 0))
    assert "below SM120" in future.precision_refusal("fp8_mx")
    assert future.precision_refusal("nvfp4") is None


@pytest.mark.parametrize(
    ("name", "gpu"),
    [("NVIDIA GB200", "gb200"), ("NVIDIA B200", "b200"), ("NVIDIA H100 80GB HBM3", "h100")],
)
def test_device_gpu_takes_the_longest_catalogue_name(name, gpu):
    assert device_gpu(name) == gpu


def test_device_gpu_without_a_catalogue_gpu():
    assert device_gpu("Tesla T4") is None
