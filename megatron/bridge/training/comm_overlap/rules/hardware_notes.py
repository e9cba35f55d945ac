"""Notes and cautions from the expert grid and the GPU generation, once every knob is decided."""

from __future__ import annotations

from megatron.bridge.training import hardware
from megatron.bridge.training.comm_overlap.rules.planner import Planner

__all__ = ["note_hardware"]


def note_hardware(planner: Planner) -> None:
    """Add the notes and cautions that depend on the expert grid and the GPU generation."""
    f = planner.job
    if f.model.moe:
        planner.notes.append(
            f"expert parameters are replicated over expert-DP={f.expert_data_parallel_size} "
            "(world / (ETP x EP x PP)): their gradients are reduced, and overlapped by "
            "overlap_grad_reduce, over that group rather than over DP="
            f"{f.dp_size}."
        )
    if f.gpu is None:
        return
    spec = hardware.gpu_spec(f.gpu)
    tp_split = f.tp_size > 1 or f.cp_size > 1
    if (
        not spec.sm100_or_newer
        and tp_split
        and planner.value("tp_comm_overlap")
        and planner.value("overlap_moe_expert_parallel_comm")
    ):
        planner.notes.append(
            f"TP overlap and EP all-to-all overlap are both on, on {spec.name} (Hopper or "
            "older): EP overlap needs concurrent streams, so CUDA_DEVICE_MAX_CONNECTIONS is "
            "32 rather than the 1 Hopper TP overlap is tuned with. TP overlap keeps its order: "
            "Transformer Engine's userbuffers start each communication kernel before the GEMM "
            "it overlaps with a launch-completion event when connections exceed 1 "
            "(transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp, CUDA 12.3 or "
            "newer); profile with NsysPlugin if TP overlap hides less than on a TP-only layout."
        )
