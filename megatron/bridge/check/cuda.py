"""Step timings on CUDA: the plan's overlap against the same model with every overlap off.

:func:`overlap_off_request` is the baseline request; :func:`_cuda_timings` times a few
forward/backward passes through megatron-core's pipeline schedule with the plan's overlap, then
rebuilds the model from the baseline request and times it again.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from megatron.bridge.check.config import build_check_config
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.comm_overlap.knobs import KNOBS

if TYPE_CHECKING:
    from megatron.bridge.training.config import ConfigContainer

__all__ = ["CUDA_STEPS", "OVERLAP_FIELDS", "overlap_off_request"]

#: The request fields that switch an overlap on (the knob table's switches);
#: ``overlap_off_request`` sets each to False.
OVERLAP_FIELDS = tuple(name for name, knob in KNOBS.items() if knob.switch)

#: Forward/backward steps timed per configuration on CUDA (the first is a warm-up).
CUDA_STEPS = 6


def overlap_off_request(request: CommOverlapConfig) -> CommOverlapConfig:
    """``request`` with every overlap turned off (and no userbuffers preset): the baseline."""
    off = dict.fromkeys(OVERLAP_FIELDS, False)
    return dataclasses.replace(request, **off, tp_comm_overlap_cfg=None, strict=False)


def _time_steps(cfg: ConfigContainer, chunks: list[Any], *, steps: int) -> float:
    """Mean seconds of one forward/backward pass over a global batch of mock data on this rank.

    Wires the DDP hooks into the model config as Megatron-LM's training loop does, then runs
    megatron-core's pipeline schedule ``steps`` times; the first run is a warm-up.
    """
    import itertools

    import torch
    from megatron.core import parallel_state
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func

    config = cfg.model
    ddp = cfg.ddp
    config.finalize_model_grads_func = finalize_model_grads
    if ddp.overlap_grad_reduce:
        config.no_sync_func = [chunk.no_sync for chunk in chunks]
        config.grad_sync_func = [chunk.start_grad_sync for chunk in chunks]
    if ddp.overlap_param_gather and ddp.align_param_gather:
        config.param_sync_func = [chunk.start_param_sync for chunk in chunks]
    if len(chunks) == 1:
        # The non-interleaved schedules take one function, not a list of them.
        for name in ("no_sync_func", "grad_sync_func", "param_sync_func"):
            value = getattr(config, name)
            if isinstance(value, list):
                setattr(config, name, value[0])

    micro_batch = cfg.train.micro_batch_size
    dp = parallel_state.get_data_parallel_world_size()
    num_microbatches = cfg.train.global_batch_size // (micro_batch * dp)
    seq = config.seq_length
    # Context parallelism expects each rank's share of the sequence already cut out.
    local_seq = seq // config.context_parallel_size
    device = torch.cuda.current_device()
    tokens = torch.randint(0, config.vocab_size, (micro_batch, local_seq), device=device)
    batch = {
        "tokens": tokens,
        "position_ids": torch.arange(local_seq, device=device).expand(micro_batch, -1),
        "labels": torch.roll(tokens, -1, dims=1),
    }

    def forward_step(data_iterator: Any, model: Any) -> tuple[Any, Callable[[Any], Any]]:
        data = next(data_iterator)
        output = model(data["tokens"], data["position_ids"], None, labels=data["labels"])

        def loss_func(output_tensor: Any) -> tuple[Any, dict[str, Any]]:
            loss = output_tensor.float().mean()
            return loss, {"loss": loss.detach()}

        return output, loss_func

    forward_backward = get_forward_backward_func()
    times = []
    for _ in range(steps):
        for chunk in chunks:
            chunk.zero_grad_buffer()
        torch.cuda.synchronize()
        torch.distributed.barrier()
        start = time.perf_counter()
        forward_backward(
            forward_step_func=forward_step,
            data_iterator=[itertools.repeat(batch) for _ in chunks],
            model=chunks,
            num_microbatches=num_microbatches,
            seq_length=seq,
            micro_batch_size=micro_batch,
            forward_only=False,
        )
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sum(times[1:]) / max(1, len(times) - 1)


def _cuda_timings(args: argparse.Namespace, *, world_size: int, kept: dict[str, Any]) -> dict:
    """Step time of the plan's overlap, then of the same model with every overlap off."""
    # Imports torch and megatron-core.
    from megatron.bridge.training.setup import build_model

    planned = _time_steps(kept["cfg"], kept["chunks"], steps=CUDA_STEPS)
    cfg_off, _, _ = build_check_config(args, world_size=world_size, on_cuda=True)
    cfg_off.comm_overlap = overlap_off_request(cfg_off.comm_overlap)
    chunks_off = build_model(cfg_off, world_size=world_size)
    baseline = _time_steps(cfg_off, chunks_off, steps=CUDA_STEPS)
    return {"planned_s": planned, "all_off_s": baseline}
