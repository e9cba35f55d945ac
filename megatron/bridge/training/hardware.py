"""The GPU catalogue: every fact the library knows about a GPU model, in one table.

The preset lookup (which userbuffers preset family a GPU uses), the launch environment (whether
a GPU is Blackwell, SM100, or newer), the precision check (whether a GPU has FP8 tensor cores)
and the CLI's ``--gpu`` choices all read :data:`GPUS`. A new GPU, or a new fact about one, is a
single edit here.

Pure data: importing this module loads no torch. :func:`live_gpu_sm100_or_newer` imports torch
when it is called, to read the visible device.
"""

from __future__ import annotations

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

    @property
    def sm100_or_newer(self) -> bool:
        """Blackwell (SM100) or newer: drives CUDA_DEVICE_MAX_CONNECTIONS."""
        return self.compute_capability[0] >= 10


#: Every GPU model the library plans for. H200 is the H100 chip (SM90) with more memory and
#: GB200 the B200 chip (SM100), so each shares its sibling's presets.
GPUS: Mapping[str, GpuSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            GpuSpec(name="a100", compute_capability=(8, 0), preset_family=None, fp8=False),
            GpuSpec(name="h100", compute_capability=(9, 0), preset_family="h100", fp8=True),
            GpuSpec(name="h200", compute_capability=(9, 0), preset_family="h100", fp8=True),
            GpuSpec(name="b200", compute_capability=(10, 0), preset_family="b200", fp8=True),
            GpuSpec(name="gb200", compute_capability=(10, 0), preset_family="b200", fp8=True),
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
    return major >= 10
