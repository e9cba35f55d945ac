"""What every recipe's container shares: the layout on the model, the preset, the optimizer.

A recipe module (``gpt3_175b``, ``llama3_70b``, ...) states its torch-free
:class:`~megatron.bridge.recipes.spec.RecipeSpec`; building it comes here (megatron-core is
imported by this module, never by a recipe module at import):

- :func:`assemble` writes the layout onto the model (:func:`set_parallelism`), takes the preset
  the spec chooses (:func:`log_preset_choice` says which), and puts the model, the training
  sizes, the optimizer, DDP, mixed precision and the comm-overlap request into a
  :class:`~megatron.bridge.training.config.ConfigContainer`;
- :func:`perf_env_plugin` builds the NeMo-Run ``PerfEnvPlugin`` from that container, so the
  parallel sizes are written once, in the recipe.

NeMo-Run is imported only by :func:`perf_env_plugin` (it is an optional dependency).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.recipes.spec import RecipeSpec
from megatron.bridge.training import hardware
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.training.mixed_precision import get_mixed_precision_config
from megatron.bridge.training.userbuffers import PresetChoice

if TYPE_CHECKING:
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

__all__ = [
    "MIXED_PRECISION_FOR",
    "assemble",
    "gpu_of",
    "log_preset_choice",
    "perf_env_plugin",
    "set_parallelism",
]

logger = logging.getLogger(__name__)

#: Mixed-precision preset each recipe precision maps to. FP8 uses delayed scaling, the recipe
#: the published FP8 userbuffers presets were tuned with.
MIXED_PRECISION_FOR: dict[str, str] = {
    "bf16": "bf16_mixed",
    "fp8": "bf16_with_fp8_delayed_scaling_mixed",
}


def log_preset_choice(choice: PresetChoice, *, tp_comm_overlap: bool) -> None:
    """Say which userbuffers preset a recipe runs with; a warning when TE's defaults stand in.

    With TP overlap off nothing was looked up and nothing is said.
    """
    if tp_comm_overlap and choice.preset is None:
        logger.warning(
            "%s. Set cfg.comm_overlap.tp_comm_overlap_cfg to a preset tuned for this shape if "
            "you have one.",
            choice.detail,
        )
    elif choice.name is not None:
        logger.info("Userbuffers preset %s: %s.", choice.name, choice.detail)


def gpu_of(gpu: str) -> str:
    """Check a GPU name for a recipe against the GPU catalogue; ``ValueError`` lists the valid ones."""
    return hardware.gpu_spec(gpu).name


def assemble(*, model: GPTModelProvider, spec: RecipeSpec) -> ConfigContainer:
    """The container a recipe returns: ``spec``'s layout on ``model``, preset, optimizer, precision.

    Writes the parallel layout onto ``model`` (:func:`set_parallelism`), takes the userbuffers
    preset the spec chooses (said in the log), and adds the optimizer, DDP, mixed precision and
    the comm-overlap request. That request names TP overlap, the preset and the spec's extra
    overlap fields only; PP, DP and the other knobs stay ``None`` so the rules derive them from
    the layout at model-build time (a recipe that wants another value sets it on
    ``cfg.comm_overlap`` afterwards).

    ``cfg.env_vars`` is the spec's launch environment at its published GPU count and GPU
    (:meth:`RecipeSpec.launch_env`, the plan ``PerfEnvPlugin.from_recipe`` exports), so the
    plugin and the container never disagree for the same recipe. A config changed afterwards
    (another world size, TP, GPU) keeps these values; ``runtime_config_update`` warns when they
    contradict the layout it resolves.
    """
    set_parallelism(
        model,
        tp_size=spec.tp_size,
        pp_size=spec.pp_size,
        vpp_size=spec.vpp_size,
        cp_size=spec.cp_size,
        sequence_parallel=spec.sp,
    )
    choice = spec.preset_choice()
    log_preset_choice(choice, tp_comm_overlap=spec.tp_comm_overlap)
    optimizer = OptimizerConfig(
        optimizer="adam",
        lr=spec.lr,
        min_lr=spec.min_lr,
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_eps=1e-5,
        clip_grad=1.0,
        use_distributed_optimizer=spec.distributed_optimizer,
    )
    ddp = DistributedDataParallelConfig(
        use_distributed_optimizer=spec.distributed_optimizer,
        check_for_nan_in_grad=True,
    )
    return ConfigContainer(
        model=model,
        train=TrainingConfig(
            micro_batch_size=spec.micro_batch_size, global_batch_size=spec.global_batch_size
        ),
        optimizer=optimizer,
        ddp=ddp,
        mixed_precision=get_mixed_precision_config(MIXED_PRECISION_FOR[spec.precision]),
        comm_overlap=CommOverlapConfig(
            tp_comm_overlap=spec.tp_comm_overlap,
            tp_comm_overlap_cfg=choice.preset,
            **dict(spec.overlap),
        ),
        gpu=spec.gpu,
        env_vars=dict(spec.launch_env().env),
    )


def set_parallelism(
    model: GPTModelProvider,
    *,
    tp_size: int,
    pp_size: int,
    vpp_size: int | None,
    cp_size: int,
    sequence_parallel: bool | None = None,
) -> None:
    """Write the parallel layout onto the model, after construction as recipes do.

    Sequence parallelism follows TP unless given (it is what TP overlap hides; with TP=1 there
    is nothing to split). ``vpp_size`` 1 means no interleaving and is stored as None,
    megatron-core's "off".
    """
    model.tensor_model_parallel_size = tp_size
    model.pipeline_model_parallel_size = pp_size
    model.virtual_pipeline_model_parallel_size = None if vpp_size in (None, 1) else vpp_size
    model.context_parallel_size = cp_size
    model.sequence_parallel = tp_size > 1 if sequence_parallel is None else sequence_parallel


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
