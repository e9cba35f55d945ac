"""One rank's part of the check: build its chunks, report them, and gather every rank's outcome.

:func:`_check_rank` builds this rank's config, initializes megatron-core's model-parallel state
for the layout, builds the model chunks with the recipe's provider and returns the rank's
report (position, layout, model, notes, plan, launch environment, chunks).
:func:`gather_outcomes` runs such a step on every rank and all-gathers the results, an
exception included, so that no rank is left waiting for one that failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from megatron.bridge.check.config import _live_gpu, _uses_local_spec, build_check_config
from megatron.bridge.check.layout import Layout, check_overrides_fit
from megatron.bridge.training import launch_env
from megatron.bridge.utils.megatron_core_errors import megatron_core_rejection

__all__ = ["CUDA_SEED", "gather_outcomes"]

logger = logging.getLogger(__name__)

#: Seed of megatron-core's CUDA RNG tracker (only the GPU build draws from it).
CUDA_SEED = 1234


def gather_outcomes(step: Callable[[], Any]) -> list[dict[str, Any]]:
    """Run ``step`` on this rank, then all-gather every rank's outcome, in rank order.

    An outcome is ``{"rank", "ok": True, "value"}`` or ``{"rank", "ok": False, "error"}``: an
    exception is caught and reported rather than raised, so that a rank that fails still joins
    the all-gather and no rank is left waiting for it.
    """
    import torch.distributed as dist

    rank = dist.get_rank()
    try:
        outcome: dict[str, Any] = {"rank": rank, "ok": True, "value": step()}
    except Exception as exc:
        # Input errors (megatron-core refusing a config among them) explain themselves (rank 0
        # reports every rank's); anything else gets its traceback logged where it happened.
        expected = (
            isinstance(exc, ValueError | TypeError) or megatron_core_rejection(exc) is not None
        )
        if expected:
            logger.info("rank %d failed: %s", rank, exc)
        else:
            logger.error("rank %d failed: %s", rank, exc, exc_info=True)
        outcome = {"rank": rank, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if not expected:
            outcome["traceback"] = traceback.format_exc()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, outcome)
    return gathered


def _unwrapped(chunk: Any) -> Any:
    from megatron.core.utils import get_attr_wrapped_model

    # build_model wraps chunks in DDP / Float16Module on CUDA; the GPTModel is inside.
    return get_attr_wrapped_model(chunk, "pre_process", return_model_obj=True)


def _chunk_rows(chunks: Sequence[Any], layout: Layout) -> list[dict[str, Any]]:
    from megatron.core import parallel_state

    rows = []
    for index, chunk in enumerate(chunks):
        model = _unwrapped(chunk)
        vp_stage = index if layout.vpp else None
        rows.append(
            {
                "vp_stage": index,
                "pre_process": bool(model.pre_process),
                "post_process": bool(model.post_process),
                # megatron-core's own view of where this chunk sits, to check the provider's.
                "first_stage": parallel_state.is_pipeline_first_stage(
                    ignore_virtual=False, vp_stage=vp_stage
                ),
                "last_stage": parallel_state.is_pipeline_last_stage(
                    ignore_virtual=False, vp_stage=vp_stage
                ),
                "layers": len(model.decoder.layers),
                "params": sum(p.numel() for p in chunk.parameters()),
            }
        )
    return rows


def _launch_env_entries(plan: Any, sm100_or_newer: bool | None) -> list[dict[str, Any]]:
    generation = None if plan.job.gpu is not None else bool(sm100_or_newer)
    env = launch_env.plan_launch_env_for(
        plan.job,
        a2a_overlap=plan.a2a_overlap,
        gpu_sm100_or_newer=generation,
    )
    return [dataclasses.asdict(entry) for entry in env.entries]


def _check_rank(
    args: argparse.Namespace, *, world_size: int, on_cuda: bool, keep: dict[str, Any]
) -> dict[str, Any]:
    """This rank's report: its position, the layout, the plan, the launch env and its chunks."""
    # Sizes that cannot split the world fail here, before megatron-core's imports (most of the
    # run time).
    check_overrides_fit(world_size, {"tp": args.tp, "pp": args.pp, "cp": args.cp})

    import torch.distributed as dist
    from megatron.core import parallel_state

    # Imports torch and megatron-core.
    from megatron.bridge.training.setup import build_model

    cfg, layout, notes = build_check_config(args, world_size=world_size, on_cuda=on_cuda)
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
        virtual_pipeline_model_parallel_size=layout.vpp,
        context_parallel_size=layout.cp,
        expert_model_parallel_size=layout.ep,
        expert_tensor_parallel_size=layout.etp,
        distributed_timeout_minutes=max(1, math.ceil(args.timeout / 60)),
    )
    if on_cuda:
        import torch
        from megatron.core import tensor_parallel

        # megatron-core initializes weights on the GPU (and runs dropout) from its CUDA RNG
        # tracker, whose per-TP-rank states must be seeded first, as Megatron-LM does at start.
        torch.manual_seed(CUDA_SEED)
        tensor_parallel.model_parallel_cuda_manual_seed(
            CUDA_SEED, te_rng_tracker=cfg.model.te_rng_tracker
        )
    chunks = build_model(cfg, world_size=world_size)
    plan = cfg.overlap_plan
    if plan is None:
        raise ValueError(f"recipe {args.recipe!r} has no comm_overlap request: nothing to check.")
    keep.update(cfg=cfg, chunks=chunks)

    _, sm100_or_newer, device = _live_gpu()
    model = cfg.model
    return {
        "rank": dist.get_rank(),
        "coords": {
            "tp": parallel_state.get_tensor_model_parallel_rank(),
            "pp": parallel_state.get_pipeline_model_parallel_rank(),
            "cp": parallel_state.get_context_parallel_rank(),
            "dp": parallel_state.get_data_parallel_rank(),
        },
        "recipe": {
            "name": args.recipe,
            "tiny": args.tiny,
            # What the plan was made for (--gpu / --precision, or the recipe's).
            "gpu": plan.job.gpu,
            "precision": plan.job.compute_dtype,
        },
        "layout": dataclasses.asdict(layout) | {"world_size": world_size},
        "model": {
            "num_layers": model.num_layers,
            "hidden_size": model.hidden_size,
            "num_attention_heads": model.num_attention_heads,
            "num_query_groups": model.num_query_groups,
            "seq_length": model.seq_length,
            "vocab_size": model.vocab_size,
            "sequence_parallel": model.sequence_parallel,
            "layer_spec": "local" if _uses_local_spec(model) else "transformer_engine",
        },
        "device": device,
        "notes": notes,
        "plan": plan.to_dict(),
        "launch_env": _launch_env_entries(plan, sm100_or_newer),
        "chunks": _chunk_rows(chunks, layout),
    }
