"""Model-build entry: resolve the config, set up TP userbuffers, build and wrap the model."""

from __future__ import annotations

import logging

import torch

from megatron.bridge.training.comm_overlap.megatron_io import model_config_drift
from megatron.bridge.training.comm_overlap.plan import OverlapPlan, OverlapRefusedError
from megatron.bridge.training.config import ConfigContainer
from megatron.bridge.training.initialize import initialize_tp_communicators
from megatron.bridge.training.resolve import runtime_config_update
from megatron.bridge.training.userbuffers import mtp_userbuffers_pitfall

__all__ = ["build_model"]

logger = logging.getLogger(__name__)


def build_model(cfg: ConfigContainer, world_size: int | None = None) -> list[torch.nn.Module]:
    """Build this rank's model chunks from ``cfg``.

    Runs :func:`runtime_config_update`, initializes TE userbuffers when TP overlap survived it,
    then builds one chunk per virtual-pipeline stage with ``cfg.model.provide()`` (one chunk
    without VPP). With CUDA, each chunk is moved to the current device, wrapped in
    megatron-core's ``Float16Module`` for bf16/fp16, and in its ``DistributedDataParallel``
    with ``cfg.ddp``; without CUDA the bare modules are returned (megatron-core's DDP needs
    CUDA). megatron-core's model-parallel state must be initialized first.

    After the build, the overlap knobs on ``cfg.model`` are compared with the plan: a knob that
    megatron-core or Transformer Engine changed during the build (TE turns ``tp_comm_overlap``
    off for layers whose userbuffers are not in the preset, e.g. MTP layers) warns, or raises
    ``OverlapRefusedError`` with ``cfg.comm_overlap.strict``.
    """
    plan = runtime_config_update(cfg, world_size)
    model_config = cfg.model
    if model_config.tp_comm_overlap:
        initialize_tp_communicators(model_config, cfg.train.micro_batch_size)

    vpp = model_config.virtual_pipeline_model_parallel_size
    if vpp is not None and vpp > 1:
        chunks = [model_config.provide(vp_stage=stage) for stage in range(vpp)]
    else:
        chunks = [model_config.provide()]
    if plan is not None:
        _check_overlap_survived_build(plan, model_config, strict=cfg.comm_overlap.strict)

    if not torch.cuda.is_available():
        logger.info(
            "CUDA is not available: returning the model chunks unwrapped (megatron-core's "
            "DistributedDataParallel and Float16Module need a GPU)."
        )
        return chunks

    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.transformer.module import Float16Module

    wrapped: list[torch.nn.Module] = []
    for index, chunk in enumerate(chunks):
        module: torch.nn.Module = chunk.cuda(torch.cuda.current_device())
        if model_config.bf16 or model_config.fp16:
            module = Float16Module(model_config, module)
        wrapped.append(
            DistributedDataParallel(
                config=model_config,
                ddp_config=cfg.ddp,
                module=module,
                # As Megatron-LM does: only the first chunk buckets; with the param all-gather
                # overlapped into the optimizer step, none does.
                disable_bucketing=index > 0
                or cfg.optimizer.overlap_param_gather_with_optimizer_step,
            )
        )
    return wrapped


def _check_overlap_survived_build(plan: OverlapPlan, model_config: object, *, strict: bool) -> None:
    drifted = model_config_drift(plan, model_config)
    if not drifted:
        return
    message = (
        "comm overlap changed during the model build: "
        + "; ".join(drifted)
        + ". Something downstream (megatron-core or Transformer Engine) wrote it back into the "
        "shared model config, so layers built afterwards run without the planned overlap."
    )
    if (
        plan.value("tp_comm_overlap")
        and not model_config.tp_comm_overlap
        and plan.job.model.mtp_num_layers
    ):
        message += f" Likely cause: {mtp_userbuffers_pitfall(plan.job.model.mtp_num_layers)}."
    if strict:
        raise OverlapRefusedError(message + " (strict=True turns this into an error)")
    logger.warning(message)
