"""What every recipe shares: precision and GPU choices, the preset pick, the container, the launch plugin.

A recipe module (``gpt3_175b``, ``llama3_70b``, ...) only states its model shape and its
published layout; the steps below are the same for all of them:

- :func:`select_userbuffers_preset` finds the published TE userbuffers preset for the shape, or
  logs a warning and returns none (TP overlap then runs on Transformer Engine's defaults);
- :func:`assemble` writes the layout onto the model (:func:`set_parallelism`), picks the preset,
  and puts the model, the training sizes, the optimizer, DDP, mixed precision and the
  comm-overlap request into a :class:`~megatron.bridge.training.config.ConfigContainer`;
- :func:`perf_env_plugin` builds the NeMo-Run ``PerfEnvPlugin`` from that container, so the
  parallel sizes are written once, in the recipe.

NeMo-Run is imported only by :func:`perf_env_plugin` (it is an optional dependency).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training import hardware
from megatron.bridge.training.comm_overlap import CommOverlapConfig, preset_names_of
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.training.mixed_precision import get_mixed_precision_config
from megatron.bridge.training.userbuffers import (
    PresetChoice,
    choose_userbuffers_preset,
    published_name_for,
)
from megatron.bridge.training.validators import check_choice

if TYPE_CHECKING:
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

__all__ = [
    "MIXED_PRECISION_FOR",
    "Gpu",
    "Precision",
    "PublishedRun",
    "assemble",
    "gpu_of",
    "perf_env_plugin",
    "picked_preset_name",
    "precision_of",
    "select_userbuffers_preset",
    "set_parallelism",
]

logger = logging.getLogger(__name__)

Gpu = str
"""A GPU model name from the GPU catalogue (``megatron.bridge.training.hardware.GPUS``)."""
Precision = Literal["bf16", "fp8"]

#: Mixed-precision preset each recipe precision maps to. FP8 uses delayed scaling, the recipe
#: the published FP8 userbuffers presets were tuned with.
MIXED_PRECISION_FOR: dict[str, str] = {
    "bf16": "bf16_mixed",
    "fp8": "bf16_with_fp8_delayed_scaling_mixed",
}


@dataclass(frozen=True, kw_only=True)
class PublishedRun:
    """The run a recipe's layout was published for: where ``bridge-overlap explain`` starts."""

    num_gpus: int
    """GPU count of the published run (the world size its layout divides)."""
    gpu: Gpu
    """GPU model of the published run; the recipe's default ``gpu``."""


def select_userbuffers_preset(
    *,
    tp_comm_overlap: bool,
    precision: Precision,
    gpu: str,
    hidden_size: int,
    tp_size: int,
    cp_size: int,
    micro_batch_size: int,
    seq_length: int,
) -> PresetChoice:
    """The userbuffers preset for a recipe's shape: ``choose_userbuffers_preset``, said in the log.

    With TP overlap on and no published preset for the shape, a warning says that TE's defaults
    are used; with TP overlap off nothing is looked up and nothing is said.
    """
    choice = choose_userbuffers_preset(
        tp_comm_overlap=tp_comm_overlap,
        precision=precision,
        gpu=gpu,
        hidden_size=hidden_size,
        tp_size=tp_size,
        cp_size=cp_size,
        micro_batch_size=micro_batch_size,
        seq_length=seq_length,
    )
    if tp_comm_overlap and choice.preset is None:
        logger.warning(
            "%s. Set cfg.comm_overlap.tp_comm_overlap_cfg to a preset tuned for this shape if "
            "you have one.",
            choice.detail,
        )
    elif choice.name is not None:
        logger.info("Userbuffers preset %s: %s.", choice.name, choice.detail)
    return choice


def picked_preset_name(cfg: ConfigContainer, *, gpu: str) -> str | None:
    """The published name of the preset ``cfg`` carries, as the recipe picked it for ``gpu``."""
    overlap = cfg.comm_overlap
    preset = overlap.tp_comm_overlap_cfg if overlap is not None else None
    if preset is None:
        return None
    return published_name_for(
        preset_names_of(preset),
        gpu=gpu,
        precision=precision_of(cfg),
        hidden_size=cfg.model.hidden_size,
        tp_size=cfg.model.tensor_model_parallel_size,
    )


def gpu_of(gpu: str) -> Gpu:
    """Check a GPU name for a recipe against the GPU catalogue; ``ValueError`` lists the valid ones."""
    return hardware.gpu_spec(gpu).name


def assemble(
    *,
    model: GPTModelProvider,
    gpu: Gpu,
    precision: Precision,
    tp_size: int,
    pp_size: int,
    vpp_size: int | None,
    cp_size: int,
    micro_batch_size: int,
    global_batch_size: int,
    tp_comm_overlap: bool = True,
    lr: float = 3e-4,
    min_lr: float = 3e-5,
) -> ConfigContainer:
    """The container a recipe returns, from its model: layout, preset, optimizer, precision.

    Writes the parallel layout onto ``model`` (:func:`set_parallelism`), picks the userbuffers
    preset for the model's hidden size and sequence length (:func:`select_userbuffers_preset`),
    and adds the distributed optimizer, mixed precision and
    the comm-overlap request. That request names TP overlap and the preset only; PP, DP and the
    other knobs stay ``None`` so the rules derive them from the layout at model-build time (a
    recipe that wants another value sets it on ``cfg.comm_overlap`` afterwards).
    """
    gpu = gpu_of(gpu)
    check_choice("", "precision", precision, Precision)
    hardware.check_precision_on_gpu(gpu=gpu, fp8=precision == "fp8")
    set_parallelism(model, tp_size=tp_size, pp_size=pp_size, vpp_size=vpp_size, cp_size=cp_size)
    preset = select_userbuffers_preset(
        tp_comm_overlap=tp_comm_overlap,
        precision=precision,
        gpu=gpu,
        hidden_size=model.hidden_size,
        tp_size=tp_size,
        cp_size=cp_size,
        micro_batch_size=micro_batch_size,
        seq_length=model.seq_length,
    ).preset
    optimizer = OptimizerConfig(
        optimizer="adam",
        lr=lr,
        min_lr=min_lr,
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_eps=1e-5,
        clip_grad=1.0,
        use_distributed_optimizer=True,
    )
    ddp = DistributedDataParallelConfig(
        use_distributed_optimizer=True,
        check_for_nan_in_grad=True,
    )
    return ConfigContainer(
        model=model,
        train=TrainingConfig(
            micro_batch_size=micro_batch_size, global_batch_size=global_batch_size
        ),
        optimizer=optimizer,
        ddp=ddp,
        mixed_precision=get_mixed_precision_config(MIXED_PRECISION_FOR[precision]),
        comm_overlap=CommOverlapConfig(tp_comm_overlap=tp_comm_overlap, tp_comm_overlap_cfg=preset),
        gpu=gpu,
    )


def set_parallelism(
    model: GPTModelProvider,
    *,
    tp_size: int,
    pp_size: int,
    vpp_size: int | None,
    cp_size: int,
) -> None:
    """Write the parallel layout onto the model, after construction as recipes do.

    Sequence parallelism follows TP (it is what TP overlap hides; with TP=1 there is nothing to
    split). ``vpp_size`` 1 means no interleaving and is stored as None, megatron-core's "off".
    """
    model.tensor_model_parallel_size = tp_size
    model.pipeline_model_parallel_size = pp_size
    model.virtual_pipeline_model_parallel_size = None if vpp_size in (None, 1) else vpp_size
    model.context_parallel_size = cp_size
    model.sequence_parallel = tp_size > 1


def perf_env_plugin(
    cfg: ConfigContainer, *, num_gpus: int, gpu: str, **overrides: Any
) -> PerfEnvPlugin:
    """NeMo-Run ``PerfEnvPlugin`` for ``cfg`` on ``num_gpus`` GPUs of model ``gpu``.

    Parallel sizes, the MoE dispatcher backend and EP overlap come from ``cfg``; ``gpu`` sets
    the GPU generation (Blackwell or not). ``overrides`` set the other plugin fields
    (``layernorm_sm_margin``, ``nccl_pp_comm_chunksize``, ``enable_vboost``, ...).
    """
    gpu = gpu_of(gpu)
    if "gpu_sm100_or_newer" in overrides:
        raise TypeError(
            "perf_env_plugin derives gpu_sm100_or_newer from gpu=...; pass the GPU name only."
        )
    # NeMo-Run is optional: import it only when a launch is being prepared.
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

    return PerfEnvPlugin.from_config(cfg, num_gpus=num_gpus, gpu=gpu, **overrides)


def precision_of(cfg: ConfigContainer) -> Precision:
    """``"fp8"`` when ``cfg`` trains with FP8 GEMMs, else ``"bf16"`` (the preset families)."""
    mixed = cfg.mixed_precision
    if isinstance(mixed, str):
        mixed = get_mixed_precision_config(mixed)
    fp8 = cfg.model.fp8 if mixed is None else mixed.fp8
    return "fp8" if fp8 is not None else "bf16"
