"""What a step estimate's numbers assume and leave out: :func:`step_assumptions`.

One sentence per assumption, for :attr:`Estimate.assumptions`: the peaks and links the lower
bounds use, the formats each part of the compute runs in, the batch and the busiest stage, what
travels on the wire, and each kernel term, MoE, Megatron-FSDP and EP-overlap figure the estimate
added, with its size and source.
"""

from __future__ import annotations

from megatron.bridge.training.estimate.collectives import NETWORK_RING, NVLINK_RING
from megatron.bridge.training.estimate.compute import KernelSeconds
from megatron.bridge.training.estimate.efficiency import EP_OVERLAP
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.stage import Stage
from megatron.bridge.training.hardware import GpuSpec
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.precisions import PRECISIONS

__all__ = ["step_assumptions"]


def step_assumptions(
    job: JobDescription,
    gpu: GpuSpec,
    dims: ModelCost,
    stage: Stage,
    *,
    global_batch_size: int,
    nvlink_domain: int,
    ep_overlap: bool,
    kernels: KernelSeconds,
) -> tuple[str, ...]:
    """What the estimate's numbers assume and leave out, for :attr:`Estimate.assumptions`."""
    peak = gpu.peak_format(job.compute_dtype)
    first, last = stage.first, stage.last
    assumptions = [
        "times are lower bounds: bytes / peak per-direction link bandwidth and FLOPs / peak "
        f"dense {peak} tensor-core FLOP/s ({gpu.name}: "
        f"{gpu.peak_tflops(job.compute_dtype):.0f} TFLOP/s, NVLink {gpu.nvlink_gb_per_s:.0f} GB/s, "
        f"network {gpu.network_gb_per_s:.0f} GB/s per GPU); the prediction runs rings and p2p "
        f"sends at NCCL's measured bus shares ({NVLINK_RING.share:.2f} of NVLink, "
        f"{NETWORK_RING.share:.2f} of the NICs) plus its latency per call, the GEMMs at the "
        "fitted fraction (dense layers' by their tile and wave quantization), core attention at "
        "its kernel's measured curve; no congestion from other jobs",
        *(
            []
            if peak == "BF16" or job.model.fp8_dot_product_attention
            else [
                f"core attention at the BF16 peak ({gpu.peak_bf16_tflops:.0f} TFLOP/s): its dot "
                f"products stay 16-bit unless fp8_dot_product_attention; the GEMMs at the {peak} "
                "peak"
            ]
        ),
        *(
            []
            if peak == "BF16"
            else [
                "output heads (logits) at the BF16 peak: megatron-core's output layer is not a "
                f"Transformer Engine module, so the {peak} recipe leaves it 16-bit"
            ]
        ),
        f"ring collectives: each GPU sends (n-1)/n of the tensor; NVLink domain of {nvlink_domain} "
        "consecutive ranks (megatron-core rank order tp-cp-dp-pp, experts tp-ep-dp-pp); a "
        "group spanning more crosses the network through the NICs of its members in one domain",
        f"global batch {global_batch_size} ({stage.micro_batches} micro-batches of "
        f"{stage.micro_batch_size} per DP rank)"
        + ("" if job.global_batch_size is not None else ": default micro-batch x DP x PP"),
        f"busiest pipeline stage = rank {stage.rank} ({stage.layers} transformer layers"
        + (", logits" if last else "")
        + (", embedding" if first else "")
        + ")",
        "activations on the wire in bf16 (FP8 all-gathers not modelled); params gathered in "
        f"bf16; grads reduced in {'fp32' if job.grad_reduce_in_fp32 else 'bf16'}",
        "CP's K/V ring exchange is overlapped by the attention kernels themselves (TE ring "
        "attention), whatever the overlap knobs say",
        "model FLOPs: Megatron's definition (no norms, softmax, router or loss); "
        "recomputed forwards count only in compute_seconds_at_peak",
        "memory-bound kernels (norms, rotary, attention I/O, activations, router, permutation, "
        "residual adds; 16-bit activations, backward twice the forward) at the HBM peak "
        f"({gpu.hbm_gb_per_s:.0f} GB/s), added to the compute without the achievable fraction; "
        "split over CP, and over TP except the hidden-wide tensors without sequence parallelism; "
        "MTP layers and the output layer's not counted",
    ]
    if stage.bf16_gemm_flops_per_token:
        title = PRECISIONS[job.compute_dtype].title
        kept = (
            [
                f"{stage.bf16_layers} decoder layer(s) kept out of the {title} recipe "
                "(first_last_layers_bf16)"
            ]
            if stage.bf16_layers
            else []
        )
        unquantized = (
            [
                "DeepSeek-V4's grouped output, compressor and indexer-weight projections, which "
                f"megatron-core runs outside the {title} recipe"
            ]
            if dims.dsv4_hybrid
            else []
        )
        assumptions.append(
            f"{stage.bf16_gemm_flops_per_token / stage.flops_per_token:.1%} of the stage's model "
            "FLOPs in linear layers at the BF16 peak: " + "; ".join(kept + unquantized)
        )
    if job.model.moe:
        assumptions.append(
            "MoE: uniform routing (no imbalance, no dropped tokens); MoE layers spread evenly "
            "over stages; expert-TP traffic not modelled"
        )
    if kernels.grouped_gemm:
        assumptions.append(
            f"grouped expert GEMMs at {kernels.grouped_gemm_efficiency:.0%} of the dense GEMM "
            f"rate (+{kernels.grouped_gemm:.3g} s): rows per expert padded to the GEMM tile, "
            "operands and output at the HBM peak beside the FLOPs (roofline)"
        )
    if kernels.loss:
        assumptions.append(
            f"cross-entropy over the vocabulary +{kernels.loss:.3g} s: megatron-core's "
            "vocab-parallel loss passes over fp32 logits (58 bytes per logit) at the HBM peak"
        )
    if kernels.unfused_experts:
        assumptions.append(
            f"routed experts outside Transformer Engine's fused grouped MLP "
            f"+{kernels.unfused_experts:.3g} s: FP8/FP4 grouped GEMM, permutation, quantization "
            "and activation kernels launched apart, priced per routed token element "
            f"({kernels.unfused_source})"
        )
    if kernels.sparse_attention:
        assumptions.append(
            f"DeepSeek-V4 attention kernels +{kernels.sparse_attention:.3g} s: the sparse "
            "attention and the DSA indexer's scoring (upstream's core-attention FLOPs) at the "
            f"fitted share of the BF16 peak ({kernels.sparse_source})"
        )
    if kernels.ssm_scan:
        assumptions.append(
            f"Mamba SSD scan kernels +{kernels.ssm_scan:.3g} s: the chunked scan's executed "
            f"FLOPs at the fitted share of the BF16 peak ({kernels.ssm_source})"
        )
    if job.use_megatron_fsdp:
        assumptions.append(
            "Megatron-FSDP shards with optim_grads_params: each layer's parameters gathered in "
            "bf16 before its forward and its backward and its gradients reduce-scattered, every "
            "micro-batch, hidden under the segment's compute but for each chunk's first layer"
            + (
                f"; across its {job.num_distributed_optimizer_instances} HSDP groups once per step"
                if job.num_distributed_optimizer_instances > 1
                else ""
            )
        )
    if ep_overlap:
        assumptions.append(
            "overlap_moe_expert_parallel_comm hides "
            f"{EP_OVERLAP.hidden_share:.0%} of the EP all-to-all time its combined 1F1B slots "
            f"could hide: the share measured in {EP_OVERLAP.source}"
        )
    return tuple(assumptions)
