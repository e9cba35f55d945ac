"""What to change when a job does not fit: the cheapest layout changes and the memory each gives.

:func:`with_fixes` estimates the job again under each candidate change (sharding the optimizer,
selective recompute, a smaller micro-batch, more EP, PP, TP or CP, full recompute), drops those
megatron-core would refuse or that save nothing, and lists those that make the job fit first.
"""

from __future__ import annotations

import dataclasses

from megatron.bridge.training.comm_overlap.rules import check_layout
from megatron.bridge.training.estimate.memory.parts import memory_of_job
from megatron.bridge.training.estimate.memory.report import MemoryEstimate, gib
from megatron.bridge.training.job import JobDescription

__all__ = ["with_fixes"]


def _candidates(job: JobDescription) -> list[tuple[str, JobDescription]]:
    """Layout changes that lower the memory per GPU, cheapest first: sharding the optimizer
    (no compute), selective recompute of core attention and the activation, a smaller
    micro-batch, more EP, more PP, more TP, more CP, then full recompute (a third more compute)."""
    m = job.model
    out: list[tuple[str, JobDescription]] = []
    if not job.use_distributed_optimizer and not job.use_megatron_fsdp and job.dp_size > 1:
        out.append(("the distributed optimizer", job.replace(use_distributed_optimizer=True)))
    if m.recompute_granularity is None:
        modules = ("core_attn", "mlp") if not m.moe else ("core_attn", "moe_act", "layernorm")
        out.append(
            (
                f"selective recompute ({', '.join(modules)})",
                job.replace(
                    **{
                        "model.recompute_granularity": "selective",
                        "model.recompute_modules": modules,
                    }
                ),
            )
        )
    if job.micro_batch_size and job.micro_batch_size > 1:
        out.append(
            (
                f"micro-batch size {job.micro_batch_size // 2}",
                job.replace(micro_batch_size=job.micro_batch_size // 2),
            )
        )
    if m.moe:
        out.append(
            (
                f"EP {job.ep_size * 2}",
                job.replace(**{"model.expert_model_parallel_size": job.ep_size * 2}),
            )
        )
    out.append(
        (
            f"PP {job.pp_size * 2}",
            job.replace(
                **{
                    "model.pipeline_model_parallel_size": job.pp_size * 2,
                    "model.pipeline_model_parallel_layout": None,
                }
            ),
        )
    )
    out.append(
        (
            f"TP {job.tp_size * 2}",
            job.replace(
                **{
                    "model.tensor_model_parallel_size": job.tp_size * 2,
                    "model.sequence_parallel": True,
                }
            ),
        )
    )
    out.append(
        (f"CP {job.cp_size * 2}", job.replace(**{"model.context_parallel_size": job.cp_size * 2}))
    )
    if m.recompute_granularity != "full":
        out.append(
            (
                "full recompute (uniform, 1 layer)",
                job.replace(
                    **{
                        "model.recompute_granularity": "full",
                        "model.recompute_method": "uniform",
                        "model.recompute_num_layers": 1,
                        "model.recompute_modules": None,
                    }
                ),
            )
        )
    return out


def with_fixes(
    job: JobDescription, estimate: MemoryEstimate, *, tp_overlap: bool
) -> MemoryEstimate:
    """``estimate`` with the fixes that lower it: those that make the job fit first (cheapest
    first), then those that help without making it fit; at most four."""
    fitting: list[str] = []
    helping: list[str] = []
    for label, candidate in _candidates(job):
        try:
            check_layout(candidate)
            other = memory_of_job(candidate, tp_overlap=tp_overlap)
        except (ValueError, ZeroDivisionError):
            continue  # megatron-core would refuse that layout
        saved = estimate.total_bytes - other.total_bytes
        if saved <= 0:
            continue
        line = f"{label} saves {gib(saved)}"
        if other.fits:
            fitting.append(f"{line} (fits, headroom {gib(other.headroom_bytes)})")
        else:
            helping.append(f"{line} (still {gib(-other.headroom_bytes)} over)")
    fixes = (fitting + helping)[:4]
    return dataclasses.replace(estimate, fixes=tuple(fixes))
