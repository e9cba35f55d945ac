"""The GPU catalogue: every fact the library knows about a GPU model, in one table.

The preset lookup (which userbuffers preset family a GPU uses), the launch environment (whether
a GPU is Blackwell, SM100, or newer), the precision check (whether a GPU has FP8 tensor cores)
and the CLI's ``--gpu`` choices all read :data:`GPUS`. A new GPU, or a new fact about one, is a
single edit here.

Pure data: importing this module loads no torch. :func:`live_gpu_sm100_or_newer` imports torch
when it is called, to read the visible device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "GPUS",
    "GpuSpec",
    "check_precision_on_gpu",
    "gpu_spec",
    "live_gpu_sm100_or_newer",
]


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """What the library knows about one GPU model."""

    name: str
    """Lower-case model name, as recipes and the CLI spell it."""
    compute_capability: tuple[int, int]
    """CUDA compute capability (major, minor)."""
    preset_family: str | None
    """Family whose published TE userbuffers presets fit this GPU (None: none are published)."""
    fp8: bool
    """Whether the tensor cores compute in FP8 (Hopper and newer)."""
    peak_bf16_tflops: float = 0.0
    """Peak dense (no 2:4 sparsity) BF16 tensor-core TFLOP/s of one GPU, from NVIDIA's datasheet."""
    peak_fp8_tflops: float | None = None
    """Peak dense FP8 tensor-core TFLOP/s of one GPU (None: no FP8 tensor cores)."""
    nvlink_gb_per_s: float = 0.0
    """Peak NVLink bandwidth of one GPU, GB/s per direction (the datasheet's bidirectional / 2)."""
    network_gb_per_s: float = 0.0
    """Peak scale-out (InfiniBand/RoCE) bandwidth of one GPU's NIC, GB/s per direction."""
    nvlink_domain: int | None = None
    """GPUs sharing one NVLink domain beyond a node (GB200 NVL72: 72); None: NVLink spans a node."""

    def peak_tflops(self, *, fp8: bool) -> float:
        """Peak dense tensor-core TFLOP/s for the training precision (FP8 or BF16)."""
        if fp8 and self.peak_fp8_tflops is not None:
            return self.peak_fp8_tflops
        return self.peak_bf16_tflops

    @property
    def sm100_or_newer(self) -> bool:
        """Blackwell (SM100) or newer: drives CUDA_DEVICE_MAX_CONNECTIONS."""
        return blackwell_or_newer(self.compute_capability[0])


#: Every GPU model the library plans for. H200 is the H100 chip (SM90) with more memory and
#: GB200 the B200 chip (SM100), so each shares its sibling's presets.
#:
#: Peak figures are NVIDIA's datasheet numbers; datasheets quote FP8/BF16 "with sparsity", the
#: dense figures here are half of those. Bandwidths are per GPU and per direction:
#: - A100 SXM: 312 TFLOP/s BF16 dense; NVLink3 600 GB/s bidirectional; DGX A100 has one 200 Gb/s
#:   HDR InfiniBand NIC per GPU (NVIDIA A100 datasheet, DGX A100 datasheet).
#: - H100 SXM: 989 BF16 / 1979 FP8 TFLOP/s dense (1979 / 3958 with sparsity); NVLink4 900 GB/s
#:   bidirectional; DGX H100 has one 400 Gb/s ConnectX-7 NIC per GPU (H100 and DGX H100
#:   datasheets).
#: - H200 SXM: the H100's tensor cores and NVLink4 (989 / 1979 dense; 900 GB/s); HGX/DGX H200
#:   pair each GPU with a 400 Gb/s NIC (H200 datasheet).
#: - B200 (HGX/DGX B200, 1000 W): 2.25 PF BF16 / 4.5 PF FP8 dense (4.5 / 9 PF with sparsity;
#:   DGX B200 "72 PF FP8 training" for 8 GPUs); NVLink5 1.8 TB/s bidirectional; 400 Gb/s
#:   ConnectX-7 per GPU (HGX B200 and DGX B200 datasheets).
#: - GB200 (NVL72, 1200 W): 2.5 PF BF16 / 5 PF FP8 dense (rack: 360 PF BF16 / 720 PF FP8 with
#:   sparsity over 72 GPUs); NVLink5 1.8 TB/s bidirectional across a 72-GPU domain; 400 Gb/s
#:   ConnectX-7 per GPU for scale-out (GB200 NVL72 datasheet).
_A100 = GpuSpec(
    name="a100",
    compute_capability=(8, 0),
    preset_family=None,
    fp8=False,
    peak_bf16_tflops=312.0,
    peak_fp8_tflops=None,
    nvlink_gb_per_s=300.0,
    network_gb_per_s=25.0,
)
_H100 = GpuSpec(
    name="h100",
    compute_capability=(9, 0),
    preset_family="h100",
    fp8=True,
    peak_bf16_tflops=989.0,
    peak_fp8_tflops=1979.0,
    nvlink_gb_per_s=450.0,
    network_gb_per_s=50.0,
)
_B200 = GpuSpec(
    name="b200",
    compute_capability=(10, 0),
    preset_family="b200",
    fp8=True,
    peak_bf16_tflops=2250.0,
    peak_fp8_tflops=4500.0,
    nvlink_gb_per_s=900.0,
    network_gb_per_s=50.0,
)

GPUS: Mapping[str, GpuSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            _A100,
            _H100,
            # The H100 chip with more memory: the same tensor cores, NVLink and NIC.
            dataclasses.replace(_H100, name="h200"),
            _B200,
            # The B200 chip at a higher power limit, in a 72-GPU NVLink domain.
            dataclasses.replace(
                _B200,
                name="gb200",
                peak_bf16_tflops=2500.0,
                peak_fp8_tflops=5000.0,
                nvlink_domain=72,
            ),
        )
    }
)


def gpu_spec(name: object) -> GpuSpec:
    """The catalogue entry for ``name`` (case-insensitive); ``ValueError`` listing the known GPUs."""
    spec = GPUS.get(name.lower()) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"gpu must be one of {sorted(GPUS)}, got {name!r}.")
    return spec


def check_precision_on_gpu(*, gpu: str, fp8: bool) -> None:
    """Refuse FP8 training on a GPU without FP8 tensor cores, naming the fix."""
    spec = gpu_spec(gpu)
    if fp8 and not spec.fp8:
        raise ValueError(
            f"precision fp8 needs FP8 tensor cores, which {spec.name} (SM{spec.compute_capability[0]}"
            f"{spec.compute_capability[1]}) does not have; train in bf16 on it, or pick a Hopper or "
            "newer gpu."
        )


def live_gpu_sm100_or_newer() -> bool | None:
    """Whether the visible GPU is Blackwell (SM100) or newer; None when no GPU is visible."""
    import torch

    if not torch.cuda.is_available():
        return None
    major, _minor = torch.cuda.get_device_capability()
    return blackwell_or_newer(major)


def blackwell_or_newer(major: int) -> bool:
    """Whether a compute capability's major version is Blackwell's (SM100) or newer."""
    return major >= 10
