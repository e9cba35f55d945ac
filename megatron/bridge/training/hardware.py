"""The GPU catalogue: every fact the library knows about a GPU model, in one table.

The preset lookup (which userbuffers preset family a GPU uses), the launch environment (whether
a GPU is Blackwell, SM100, or newer), the precision check (whether a GPU trains in a precision),
the step estimate (peaks, bandwidths, GPUs per node) and the CLI's ``--gpu`` choices all read
:data:`GPUS`; the systems of NVIDIA's published performance tables map onto it through
:func:`system_gpu`. A new GPU, or a new fact about one, is a single edit here.

Pure data: importing this module loads no torch. :func:`live_gpu_sm100_or_newer` imports torch
when it is called, to read the visible device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from megatron.bridge.training.precisions import PRECISIONS, canonical_precision

__all__ = [
    "GPUS",
    "REPORTED_SHARE",
    "SYSTEMS",
    "GpuSpec",
    "check_precision_on_gpu",
    "device_gpu",
    "gpu_spec",
    "live_gpu_sm100_or_newer",
    "nvlink_ranks",
    "system_gpu",
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
    peak_bf16_tflops: float = 0.0
    """Peak dense (no 2:4 sparsity) BF16 tensor-core TFLOP/s of one GPU, from NVIDIA's datasheet."""
    peak_fp8_tflops: float | None = None
    """Peak dense FP8 tensor-core TFLOP/s of one GPU (None: no FP8 tensor cores)."""
    peak_fp4_tflops: float | None = None
    """Peak dense FP4 (NVFP4) tensor-core TFLOP/s of one GPU (None: no FP4 tensor cores)."""
    nvlink_gb_per_s: float = 0.0
    """Peak NVLink bandwidth of one GPU, GB/s per direction (the datasheet's bidirectional / 2)."""
    network_gb_per_s: float = 0.0
    """Peak scale-out (InfiniBand/RoCE) bandwidth of one GPU's NIC, GB/s per direction."""
    hbm_gb_per_s: float
    """Peak HBM bandwidth of one GPU, GB/s (read and write together), from NVIDIA's datasheet."""
    nvlink_domain: int | None = None
    """GPUs sharing one NVLink domain beyond a node (GB200 NVL72: 72); None: NVLink spans a node."""
    gpus_per_node: int = 8
    """GPUs in one node (a DGX/HGX board: 8; a Grace Blackwell compute tray: 4)."""
    streaming_multiprocessors: int = 0
    """SMs a kernel's thread blocks are spread over (0: not known): a GEMM's tiles run in waves
    of this many."""
    memory_gb: float = 0.0
    """HBM capacity of one GPU as NVIDIA's datasheet states it, in GB; the memory estimate plans
    against what the device reports of it (:attr:`memory_bytes`)."""

    @property
    def memory_bytes(self) -> int:
        """The capacity the device reports, in bytes: the datasheet's GB are binary (an H100's
        five 16 GiB HBM3 stacks make its "80GB"), of which the device reports
        :data:`REPORTED_SHARE`."""
        return int(self.memory_gb * 2**30 * REPORTED_SHARE)

    def peak_format(self, precision: str | None) -> str:
        """The tensor-core format whose peak a precision's GEMMs reach: "BF16", "FP8" or "FP4".

        ``precision`` is a compute dtype or alias: bf16 and fp16 run at the 16-bit peak, every
        FP8 recipe (MXFP8 included) at the FP8 peak, NVFP4 at the FP4 peak. None (a custom
        quantization recipe, whose formats the job does not say) counts at the 16-bit peak. A
        GPU without the precision's tensor cores falls back to the widest format it has (the
        check that refuses such a run is :func:`check_precision_on_gpu`).
        """
        cores = (
            "bf16" if precision is None else PRECISIONS[canonical_precision(precision)].tensor_cores
        )
        if cores == "fp4" and self.peak_fp4_tflops is not None:
            return "FP4"
        if cores in ("fp4", "fp8") and self.peak_fp8_tflops is not None:
            return "FP8"
        return "BF16"

    def peak_tflops(self, precision: str | None) -> float:
        """Peak dense tensor-core TFLOP/s of one GPU for a training precision (:meth:`peak_format`)."""
        return {
            "FP4": self.peak_fp4_tflops,
            "FP8": self.peak_fp8_tflops,
            "BF16": self.peak_bf16_tflops,
        }[self.peak_format(precision)]

    def precision_refusal(self, precision: str) -> str | None:
        """Why this GPU cannot train in ``precision`` (a compute dtype or alias); None if it can."""
        name = canonical_precision(precision)
        setting = PRECISIONS[name]
        low, high = setting.min_compute_capability, setting.below_compute_capability
        if self.compute_capability >= low and (high is None or self.compute_capability < high):
            return None
        needs = f"{_sm(low)} or newer"
        if high is not None:
            needs = f"{_sm(low)} or newer, below {_sm(high)}"
        return (
            f"precision {name} ({setting.title}) needs {setting.tensor_cores.upper()} tensor cores "
            f"of compute capability {needs}, which {self.name} ({_sm(self.compute_capability)}) "
            "does not have"
        )

    @property
    def sm100_or_newer(self) -> bool:
        """Blackwell (SM100) or newer: drives CUDA_DEVICE_MAX_CONNECTIONS."""
        return blackwell_or_newer(self.compute_capability[0])


#: Share of the datasheet's binary capacity a GPU reports as its total memory (``nvidia-smi``'s
#: Memory-Usage total, what PyTorch's allocator can reach): H100 SXM 81,559 MiB of 81,920
#: (99.56%), B200 183,359 MiB of 184,320 (99.48%), as public ``nvidia-smi`` output of those GPUs
#: shows. The lower share is taken for every GPU (no public total was found for GB200, B300 and
#: GB300).
REPORTED_SHARE = 183_359 / 184_320


def _sm(capability: tuple[int, int]) -> str:
    return f"SM{capability[0]}{capability[1]}"


def _gpu(
    name: str,
    capability: tuple[int, int],
    preset_family: str | None,
    *,
    peaks: tuple[float, float | None, float | None],
    links: tuple[float, float],
    hbm_gb_per_s: float,
    memory_gb: float,
    nvlink_domain: int | None = None,
    gpus_per_node: int = 8,
    sms: int = 0,
) -> GpuSpec:
    """One catalogue entry: ``peaks`` are the dense BF16, FP8 and FP4 TFLOP/s (None: no such
    tensor cores), ``links`` the NVLink and scale-out GB/s per direction, ``hbm_gb_per_s`` the
    HBM bandwidth, ``memory_gb`` the HBM capacity."""
    bf16, fp8, fp4 = peaks
    nvlink, network = links
    return GpuSpec(
        name=name,
        compute_capability=capability,
        preset_family=preset_family,
        peak_bf16_tflops=bf16,
        peak_fp8_tflops=fp8,
        peak_fp4_tflops=fp4,
        nvlink_gb_per_s=nvlink,
        network_gb_per_s=network,
        hbm_gb_per_s=hbm_gb_per_s,
        memory_gb=memory_gb,
        nvlink_domain=nvlink_domain,
        gpus_per_node=gpus_per_node,
        streaming_multiprocessors=sms,
    )


def _nvl72(
    chip: GpuSpec, name: str, peaks: tuple[float, float, float], *, memory_gb: float
) -> GpuSpec:
    """``chip`` in an NVL72 rack at a higher power limit: its own dense peaks and HBM capacity,
    the chip's presets, links and HBM bandwidth, one 72-GPU NVLink domain, 4 GPUs a tray."""
    return _gpu(
        name,
        chip.compute_capability,
        chip.preset_family,
        peaks=peaks,
        links=(chip.nvlink_gb_per_s, chip.network_gb_per_s),
        hbm_gb_per_s=chip.hbm_gb_per_s,
        memory_gb=memory_gb,
        nvlink_domain=72,
        gpus_per_node=4,
        sms=chip.streaming_multiprocessors,
    )


#: Every GPU model the library plans for. H200 is the H100 chip (SM90) with more memory and
#: GB200 the B200 chip (SM100), so each shares its sibling's presets. B300 and GB300 (Blackwell
#: Ultra, SM103) have no presets of their own: upstream's performance recipes run them on the
#: b200 presets (Megatron-Bridge ``src/megatron/bridge/perf_recipes/llama/b300/llama3.py`` and
#: ``.../gb300/llama3.py`` import ``userbuffers_*_b200_*``; ``training/comm_overlap.py`` publishes
#: no b300 preset), so they use the b200 family.
#:
#: Peak figures are NVIDIA's datasheet numbers; datasheets quote FP4/FP8/BF16 "with sparsity", the
#: dense figures here are half of those (Blackwell Ultra's datasheets quote dense FP4 itself).
#: Bandwidths are per GPU and per direction:
#: - A100 SXM: 312 TFLOP/s BF16 dense; NVLink3 600 GB/s bidirectional; DGX A100 has one 200 Gb/s
#:   HDR InfiniBand NIC per GPU (NVIDIA A100 datasheet, DGX A100 datasheet).
#: - H100 SXM: 989 BF16 / 1979 FP8 TFLOP/s dense (1979 / 3958 with sparsity); NVLink4 900 GB/s
#:   bidirectional; DGX H100 has one 400 Gb/s ConnectX-7 NIC per GPU (H100 and DGX H100
#:   datasheets).
#: - H200 SXM: the H100's tensor cores and NVLink4 (989 / 1979 dense; 900 GB/s); HGX/DGX H200
#:   pair each GPU with a 400 Gb/s NIC (H200 datasheet).
#: - B200 (HGX/DGX B200, 1000 W): 2.25 PF BF16 / 4.5 PF FP8 / 9 PF FP4 dense (HGX B200 for 8
#:   GPUs: 36 PF BF16, 72 PF FP8, 144 PF FP4 with sparsity); NVLink5 1.8 TB/s bidirectional;
#:   400 Gb/s ConnectX-7 per GPU (HGX B200 and DGX B200 datasheets).
#: - GB200 (NVL72, 1200 W): 2.5 PF BF16 / 5 PF FP8 / 10 PF FP4 dense (rack: 360 PF BF16, 720 PF
#:   FP8, 1,440 PF FP4 with sparsity over 72 GPUs); NVLink5 1.8 TB/s bidirectional across a
#:   72-GPU domain; 400 Gb/s ConnectX-7 per GPU for scale-out; 4 GPUs per compute tray (GB200
#:   NVL72 datasheet).
#: - B300 (HGX/DGX B300, Blackwell Ultra): 2.25 PF BF16 / 4.5 PF FP8 dense, 13.5 PF FP4 dense
#:   (HGX B300 for 8 GPUs: 36 PF FP16/BF16 and 72 PF FP8 with sparsity, FP4 144 PF with sparsity
#:   | 108 PF dense); NVLink5 1.8 TB/s bidirectional; one 800 Gb/s ConnectX-8 SuperNIC per GPU
#:   (HGX B300 and DGX B300 datasheets).
#: - GB300 (NVL72, Blackwell Ultra): 2.5 PF BF16 / 5 PF FP8 / 15 PF FP4 dense (rack: 360 PF
#:   FP16/BF16 and 720 PF FP8 with sparsity, FP4 1,440 PF with sparsity | 1,080 PF dense, over 72
#:   GPUs); NVLink5 1.8 TB/s bidirectional across a 72-GPU domain (130 TB/s per rack); one 800 Gb/s
#:   ConnectX-8 SuperNIC per GPU; 4 GPUs per compute tray (GB300 NVL72 datasheet).
#: HBM bandwidth per GPU (datasheets' "GPU memory bandwidth"; a system's figure over its GPUs):
#: - A100 80GB SXM: 2,039 GB/s HBM2e (NVIDIA A100 datasheet).
#: - H100 SXM: 3.35 TB/s HBM3 (H100 datasheet).
#: - H200 SXM: 4.8 TB/s HBM3e (H200 datasheet).
#: - B200: 8 TB/s HBM3e (HGX B200 datasheet: 64 TB/s for 8 GPUs; DGX B200 datasheet).
#: - GB200 NVL72: 8 TB/s HBM3e (GB200 NVL72 datasheet: 576 TB/s over 72 GPUs).
#: - B300: 8 TB/s HBM3e (HGX B300 datasheet: 64 TB/s for 8 GPUs).
#: - GB300 NVL72: 8 TB/s HBM3e (GB300 NVL72 datasheet: 576 TB/s over 72 GPUs).
#: HBM capacity per GPU (datasheets' "GPU memory"; a system's figure over its GPUs):
#: - A100 80GB SXM: 80 GB HBM2e (NVIDIA A100 datasheet).
#: - H100 SXM: 80 GB HBM3 (H100 datasheet).
#: - H200 SXM: 141 GB HBM3e (H200 datasheet).
#: - B200: 180 GB HBM3e (DGX B200 datasheet: 1,440 GB total GPU memory for 8 GPUs).
#: - GB200 NVL72: 186 GB HBM3e (GB200 NVL72 datasheet: 13.4 TB HBM3e over 72 GPUs).
#: - B300: 288 GB HBM3e (DGX B300 datasheet: 2.3 TB total GPU memory for 8 GPUs).
#: - GB300 NVL72: 288 GB HBM3e (GB300 NVL72 datasheet: up to 20.7 TB HBM3e over 72 GPUs).
#: Compute capabilities: CUDA's table (A100 8.0, H100/H200 9.0, B200/GB200 10.0, B300/GB300 10.3).
#: Streaming multiprocessors: A100 SXM 108 (NVIDIA A100 Tensor Core GPU Architecture whitepaper),
#: H100 SXM5 132 (NVIDIA H100 Tensor Core GPU Architecture whitepaper; H200 is the same chip),
#: B200 148 (the multiprocessor count CUDA reports on B200, the figure DeepGEMM's and
#: FlashAttention-4's Blackwell kernels schedule over), Blackwell Ultra 160 (NVIDIA technical blog
#: "Inside NVIDIA Blackwell Ultra", 2025); GB200 and GB300 are those chips.
_H100 = _gpu(
    "h100",
    (9, 0),
    "h100",
    peaks=(989.0, 1979.0, None),
    links=(450.0, 50.0),
    hbm_gb_per_s=3350.0,
    memory_gb=80.0,
    sms=132,
)
_B200 = _gpu(
    "b200",
    (10, 0),
    "b200",
    peaks=(2250.0, 4500.0, 9000.0),
    links=(900.0, 50.0),
    hbm_gb_per_s=8000.0,
    memory_gb=180.0,
    sms=148,
)
# Blackwell Ultra (SM103): the B200's BF16/FP8 peaks, NVLink and HBM bandwidth; its own FP4
# peak and ConnectX-8 NIC.
_B300 = dataclasses.replace(
    _B200,
    name="b300",
    compute_capability=(10, 3),
    peak_fp4_tflops=13500.0,
    network_gb_per_s=100.0,
    memory_gb=288.0,
    streaming_multiprocessors=160,
)

GPUS: Mapping[str, GpuSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            _gpu(
                "a100",
                (8, 0),
                None,
                peaks=(312.0, None, None),
                links=(300.0, 25.0),
                hbm_gb_per_s=2039.0,
                memory_gb=80.0,
                sms=108,
            ),
            _H100,
            # The H100 chip with more and faster memory: the same tensor cores, NVLink and NIC.
            dataclasses.replace(_H100, name="h200", hbm_gb_per_s=4800.0, memory_gb=141.0),
            _B200,
            # The B200 chip at a higher power limit, in a 72-GPU NVLink domain, 4 GPUs a tray.
            _nvl72(_B200, "gb200", peaks=(2500.0, 5000.0, 10000.0), memory_gb=186.0),
            _B300,
            # The B300 chip at a higher power limit, in a 72-GPU NVLink domain, 4 GPUs a tray.
            _nvl72(_B300, "gb300", peaks=(2500.0, 5000.0, 15000.0), memory_gb=288.0),
        )
    }
)

#: The systems NVIDIA's performance tables name (Megatron-Bridge ``docs/performance-summary.md``
#: and ``docs/performance-summary-archive.md``: DGX-H100, DGX-B200, DGX-B300, DGX-GB200,
#: DGX-GB300) and the GPU each one is. GPUs per node are the catalogue's (4 on the Grace
#: Blackwell trays, as upstream's ``scripts/performance/argument_parser.py``
#: ``NUM_GPUS_PER_NODE_MAP`` says).
SYSTEMS: Mapping[str, str] = MappingProxyType(
    {
        "DGX-A100": "a100",
        "DGX-H100": "h100",
        "DGX-H200": "h200",
        "DGX-B200": "b200",
        "DGX-B300": "b300",
        "DGX-GB200": "gb200",
        "DGX-GB300": "gb300",
    }
)


def gpu_spec(name: object) -> GpuSpec:
    """The catalogue entry for ``name`` (case-insensitive); ``ValueError`` listing the known GPUs."""
    spec = GPUS.get(name.lower()) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"gpu must be one of {sorted(GPUS)}, got {name!r}.")
    return spec


def nvlink_ranks(
    gpu: GpuSpec | None, *, nvlink_domain: int | None = None, gpus_per_node: int | None = None
) -> int | None:
    """Consecutive ranks one NVLink domain connects on ``gpu``'s cluster: ``nvlink_domain`` where
    given, else the catalogue's domain beyond a node (72 on GB200 NVL72), else ``gpus_per_node``,
    else the catalogue's GPUs per node. Without a GPU only the two given figures count: None
    when neither is."""
    if gpu is None:
        return nvlink_domain or gpus_per_node
    return nvlink_domain or gpu.nvlink_domain or gpus_per_node or gpu.gpus_per_node


def device_gpu(device_name: str) -> str | None:
    """The catalogue GPU whose name a CUDA device's name contains (``torch.cuda.get_device_name``:
    "NVIDIA GB200" -> gb200), the longest catalogue names tried first ("gb200" also contains
    "b200"); None for a GPU the catalogue does not hold."""
    lowered = device_name.lower()
    return next((gpu for gpu in sorted(GPUS, key=len, reverse=True) if gpu in lowered), None)


def system_gpu(system: str) -> GpuSpec:
    """The catalogue entry of a published system name ("DGX-GB300", "dgx-b200", "GB200", ...).

    The "DGX-" prefix is optional; ``ValueError`` lists the known systems.
    """
    if isinstance(system, str):
        key = system.strip().upper()
        name = SYSTEMS.get(key) or SYSTEMS.get(f"DGX-{key}")
        if name is not None:
            return GPUS[name]
    raise ValueError(f"system must be one of {list(SYSTEMS)}, got {system!r}.")


def check_precision_on_gpu(*, gpu: str, precision: str | None) -> None:
    """Refuse a precision the GPU cannot train in, naming the precision, the GPU and the fix.

    ``precision`` is a compute dtype or alias (``fp8_mx``, ``mxfp8``, ``fp8``, ...); None (a
    custom quantization recipe, which the model rules refuse on their own) checks nothing. The
    rule is Transformer Engine's (see :data:`~megatron.bridge.training.precisions.PRECISIONS`):
    TE raises at the first forward step, so the plan refuses before launch.
    """
    if precision is None:
        return
    spec = gpu_spec(gpu)
    refusal = spec.precision_refusal(precision)
    if refusal is None:
        return
    fits = [s.name for s in GPUS.values() if s.precision_refusal(precision) is None]
    here = [n for n in PRECISIONS if spec.precision_refusal(n) is None]
    raise ValueError(
        f"{refusal} (Transformer Engine refuses it there at the first forward step): train in "
        f"one of {here} on {spec.name}, or pick a gpu from {fits}."
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
