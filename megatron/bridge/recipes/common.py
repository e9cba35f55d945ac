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
from typing import TYPE_CHECKING, Any, Literal, get_args

from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training.comm_overlap import (
    CommOverlapConfig,
    TransformerLayerTPOverlapCfg,
    find_userbuffers_preset,
    preset_names_of,
    preset_shapes_of,
)
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.training.mixed_precision import get_mixed_precision_config
from megatron.bridge.training.userbuffers import PRESET_GPU_FAMILIES

if TYPE_CHECKING:
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

__all__ = [
    "MIXED_PRECISION_FOR",
    "SM100_GPUS",
    "Gpu",
    "Precision",
    "PublishedRun",
    "assemble",
    "check_choice",
    "gpu_of",
    "perf_env_plugin",
    "picked_preset_name",
    "precision_of",
    "select_userbuffers_preset",
    "set_parallelism",
]

logger = logging.getLogger(__name__)

Gpu = Literal["h100", "h200", "b200", "gb200"]
Precision = Literal["bf16", "fp8"]

#: Blackwell (SM100) parts; the others are Hopper. Drives CUDA_DEVICE_MAX_CONNECTIONS.
SM100_GPUS: frozenset[str] = frozenset({"b200", "gb200"})

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


def check_choice(name: str, value: object, allowed: Any) -> None:
    """Raise ``ValueError`` naming ``name`` and the valid values when ``value`` is not one of ``allowed``."""
    choices = get_args(allowed)
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}.")


def select_userbuffers_preset(
    *,
    precision: Precision,
    gpu: Gpu,
    hidden_size: int,
    tp_size: int,
    cp_size: int,
    micro_batch_size: int,
    seq_length: int,
    cp_agnostic: bool = False,
) -> tuple[str | None, TransformerLayerTPOverlapCfg | None]:
    """The published userbuffers preset for a shape, as ``(name, preset)``, or ``(None, None)``.

    The lookup is exact (``find_userbuffers_preset``). ``cp_agnostic=True`` is for model
    families whose published presets carry no ``_cp`` part although the published layout uses
    context parallelism (Llama-3 70B runs CP2 on ``..._h8192_tp4_mbs1_seqlen8192``): when the
    exact CP size has no preset, the CP-less name (``cp_size=1``) is used. The knobs of a preset
    (SM counts, splits, methods) do not depend on the buffer shape, which TE takes separately.

    No match logs a warning saying that TE's defaults are used instead.
    """
    shape = dict(
        precision=precision,
        gpu=gpu,
        hidden_size=hidden_size,
        tp_size=tp_size,
        micro_batch_size=micro_batch_size,
        seq_length=seq_length,
    )
    tried = [cp_size]
    if cp_agnostic and cp_size != 1:
        tried.append(1)
    for cp in tried:
        try:
            name, preset = find_userbuffers_preset(cp_size=cp, **shape)
        except ValueError:
            continue
        if cp != cp_size:
            logger.info(
                "Userbuffers preset %s is published without a CP size; this recipe family "
                "uses it at CP=%d as NVIDIA's recipe does.",
                name,
                cp_size,
            )
        return name, preset
    logger.warning(
        "No published userbuffers preset for %s on %s, hidden %d, TP%d, CP%d, mbs %d, seq %d: "
        "TP overlap uses Transformer Engine's defaults. Set cfg.comm_overlap.tp_comm_overlap_cfg "
        "to a preset tuned for this shape if you have one.",
        precision,
        gpu,
        hidden_size,
        tp_size,
        cp_size,
        micro_batch_size,
        seq_length,
    )
    return None, None


def picked_preset_name(cfg: ConfigContainer, *, gpu: str) -> str | None:
    """The published name of the preset ``cfg`` carries, as the recipe picked it for ``gpu``.

    Presets with equal values are one object published under several names; the one whose
    GPU family, precision, hidden size and TP size fit ``cfg`` is the recipe's pick.
    """
    overlap = cfg.comm_overlap
    preset = overlap.tp_comm_overlap_cfg if overlap is not None else None
    if preset is None:
        return None
    precision = precision_of(cfg)
    family = PRESET_GPU_FAMILIES.get(gpu)
    fitting = [
        name
        for name, shape in zip(preset_names_of(preset), preset_shapes_of(preset), strict=True)
        if shape.gpu == family
        and shape.precision == precision
        and shape.hidden_size == cfg.model.hidden_size
        and shape.tp_size == cfg.model.tensor_model_parallel_size
    ]
    if fitting:
        return fitting[0]
    names = preset_names_of(preset)
    return names[0] if names else None


def gpu_of(gpu: str) -> Gpu:
    """Check a GPU name for a recipe; ``ValueError`` lists the valid ones."""
    check_choice("gpu", gpu, Gpu)
    return gpu  # type: ignore[return-value]


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
    cp_agnostic_preset: bool = False,
    lr: float = 3e-4,
    min_lr: float = 3e-5,
) -> ConfigContainer:
    """The container a recipe returns, from its model: layout, preset, optimizer, precision.

    Writes the parallel layout onto ``model`` (:func:`set_parallelism`), picks the userbuffers
    preset for the model's hidden size and sequence length (:func:`select_userbuffers_preset`;
    ``cp_agnostic_preset`` as there), and adds the distributed optimizer, mixed precision and
    the comm-overlap request. That request names TP overlap and the preset only; PP, DP and the
    other knobs stay ``None`` so the rules derive them from the layout at model-build time (a
    recipe that wants another value sets it on ``cfg.comm_overlap`` afterwards).
    """
    gpu_of(gpu)
    check_choice("precision", precision, Precision)
    set_parallelism(model, tp_size=tp_size, pp_size=pp_size, vpp_size=vpp_size, cp_size=cp_size)
    _, preset = select_userbuffers_preset(
        precision=precision,
        gpu=gpu,
        hidden_size=model.hidden_size,
        tp_size=tp_size,
        cp_size=cp_size,
        micro_batch_size=micro_batch_size,
        seq_length=model.seq_length,
        cp_agnostic=cp_agnostic_preset,
    )
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
    gpu_of(gpu)
    if "gpu_sm100_or_newer" in overrides:
        raise TypeError(
            "perf_env_plugin derives gpu_sm100_or_newer from gpu=...; pass the GPU name only."
        )
    # NeMo-Run is optional: import it only when a launch is being prepared.
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

    return PerfEnvPlugin.from_config(
        cfg, num_gpus=num_gpus, gpu_sm100_or_newer=gpu in SM100_GPUS, **overrides
    )


def precision_of(cfg: ConfigContainer) -> Precision:
    """``"fp8"`` when ``cfg`` trains with FP8 GEMMs, else ``"bf16"`` (the preset families)."""
    mixed = cfg.mixed_precision
    if isinstance(mixed, str):
        mixed = get_mixed_precision_config(mixed)
    fp8 = cfg.model.fp8 if mixed is None else mixed.fp8
    return "fp8" if fp8 is not None else "bf16"
