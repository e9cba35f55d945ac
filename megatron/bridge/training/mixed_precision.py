"""Mixed precision: every precision knob in one place, written where megatron-core reads it.

A recipe sets ``cfg.mixed_precision = "bf16_mixed"`` (a preset name) or a
:class:`MixedPrecisionConfig`, and may then adjust it (``grad_reduce_in_fp32``,
``fp8_param_gather``, ...). At model-build time :meth:`MixedPrecisionConfig.setup` writes the
settings into megatron-core's ``TransformerConfig`` (compute and parameter dtypes, FP8),
``OptimizerConfig`` (dtypes, loss scaling, FP8 recipe) and ``DistributedDataParallelConfig``
(gradient-reduction dtype, FP8 parameter all-gather), field by field. The user's object is
never changed.

Presets come from :func:`get_mixed_precision_config`, which returns a fresh object per call so
that a recipe editing "its" preset edits nobody else's. It takes a preset name (upstream's
hyphen spellings such as ``bf16-mixed`` too) or a training precision of
:data:`~megatron.bridge.training.precisions.PRECISIONS` (``fp8_mx``, ``nvfp4``, ...), which
names its preset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, get_args

import torch

from megatron.bridge.training.job import BF16_LAYER_DEFAULTS
from megatron.bridge.training.precisions import mixed_precision_preset_name, precision_choices
from megatron.bridge.training.validators import check_bool, check_choice, check_int

__all__ = [
    "MIXED_PRECISION_PRESETS",
    "Fp4Format",
    "Fp4Recipe",
    "Fp8AmaxComputeAlgo",
    "Fp8Format",
    "Fp8Recipe",
    "MixedPrecisionConfig",
    "bf16_mixed",
    "bf16_with_fp8_current_scaling_mixed",
    "bf16_with_fp8_delayed_scaling_mixed",
    "bf16_with_fp8_subchannel_scaling_mixed",
    "bf16_with_mxfp8_mixed",
    "bf16_with_nvfp4_mixed",
    "fp16_mixed",
    "fp16_with_fp8_current_scaling_mixed",
    "fp16_with_fp8_delayed_scaling_mixed",
    "fp16_with_fp8_subchannel_scaling_mixed",
    "fp16_with_mxfp8_mixed",
    "fp32_no_mixed",
    "get_mixed_precision_config",
]

logger = logging.getLogger(__name__)

Fp8Format = Literal["e4m3", "hybrid"]
# megatron-core also knows "custom", which needs a quantizer factory this config does not carry.
Fp8Recipe = Literal["delayed", "tensorwise", "mxfp8", "blockwise"]
Fp8AmaxComputeAlgo = Literal["most_recent", "max"]
Fp4Format = Literal["e2m1"]
# megatron-core also knows "custom", which needs a quantizer factory this config does not carry.
Fp4Recipe = Literal["nvfp4"]

_PARAM_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)

_OWNER = "MixedPrecisionConfig"

#: Settings written onto the model config under their own name. fp8_recipe is among them even
#: without FP8: megatron-core's TransformerConfig default recipe is delayed, and the user's recipe
#: stays there so that a later fp8 switch-on behaves as written.
_MODEL_FIELDS = (
    "fp8",
    "fp8_recipe",
    "fp8_margin",
    "fp8_amax_history_len",
    "fp8_amax_compute_algo",
    "fp8_wgrad",
    "fp8_dot_product_attention",
    "fp8_multi_head_attention",
    "first_last_layers_bf16",
    "num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16",
    "fp4",
    "fp4_recipe",
)


def _check_positive_number(name: str, value: object, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if type(value) not in (int, float) or not value > 0:
        raise ValueError(f"{_OWNER}.{name} must be a positive number, got {value!r}.")


@dataclass(kw_only=True)
class MixedPrecisionConfig:
    """Precision of compute, parameters, gradients and communication.

    The defaults are plain fp32 training; the presets (see :func:`get_mixed_precision_config`)
    are the usual starting points.
    """

    bf16: bool = False
    """Train in bf16 (parameters and activations bf16, fp32 main weights in the optimizer)."""
    fp16: bool = False
    """Train in fp16 with loss scaling; exclusive with bf16."""
    params_dtype: torch.dtype | None = None
    """dtype parameters are created in; None derives it from bf16/fp16 (else float32)."""
    pipeline_dtype: torch.dtype | None = None
    """dtype of pipeline-parallel send/recv tensors; None uses params_dtype."""
    autocast_enabled: bool = False
    """Run the forward step under torch.autocast."""
    autocast_dtype: torch.dtype | None = None
    """dtype for torch.autocast; None uses params_dtype."""
    grad_reduce_in_fp32: bool = True
    """Accumulate and reduce gradients across data-parallel ranks in fp32."""
    fp8: Fp8Format | None = None
    """FP8 format: e4m3 everywhere, hybrid (e4m3 forward, e5m2 gradients), or None for no FP8."""
    fp8_recipe: Fp8Recipe = "delayed"
    """FP8 scaling recipe: delayed, tensorwise (current scaling), mxfp8 (Blackwell) or blockwise."""
    fp8_margin: int = 0
    """Margin (in powers of two) for the FP8 scaling factor."""
    fp8_amax_history_len: int = 1
    """Length of the amax history window (delayed scaling)."""
    fp8_amax_compute_algo: Fp8AmaxComputeAlgo = "most_recent"
    """How the scale is computed from the amax history: most_recent or max."""
    fp8_wgrad: bool = True
    """Compute weight gradients in FP8 (False keeps wgrad GEMMs in higher precision)."""
    fp8_dot_product_attention: bool = False
    """Run the attention dot products in FP8."""
    fp8_multi_head_attention: bool = False
    """Run the whole multi-head attention module in FP8."""
    fp8_param_gather: bool = False
    """Keep parameters in FP8 and all-gather them in FP8 (distributed optimizer); needs fp8."""
    reuse_grad_buf_for_mxfp8_param_ag: bool = False
    """Reuse the gradient buffer for the MXFP8 parameter all-gather (mxfp8 with fp8_param_gather)."""
    fp4: Fp4Format | None = None
    """FP4 format: e2m1, or None for no FP4; exclusive with fp8."""
    fp4_recipe: Fp4Recipe = "nvfp4"
    """FP4 scaling recipe: nvfp4 (NVFP4 block scaling, Blackwell)."""
    fp4_param_gather: bool = False
    """Keep parameters in FP4 and all-gather them in FP4 (distributed optimizer); needs fp4."""
    first_last_layers_bf16: bool = False
    """Keep the first and last transformer layers out of FP8/FP4 (not with delayed scaling)."""
    num_layers_at_start_in_bf16: int = 0
    """Layers at the start kept in bf16 when first_last_layers_bf16 is on. The default is
    Megatron-Bridge's (``training/mixed_precision.py``), written onto the model config over
    megatron-core's 1."""
    num_layers_at_end_in_bf16: int = 0
    """Layers at the end kept in bf16 when first_last_layers_bf16 is on (default 0, as
    Megatron-Bridge's)."""
    loss_scale: float | None = None
    """Static loss scale for fp16; None means dynamic loss scaling."""
    initial_loss_scale: float = 2.0**32
    """Starting loss scale for dynamic fp16 loss scaling."""
    min_loss_scale: float = 1.0
    """Lower bound of the dynamic fp16 loss scale."""
    loss_scale_window: float = 1000
    """Iterations without overflow before the dynamic fp16 loss scale grows."""
    hysteresis: int = 2
    """Overflows tolerated before the dynamic fp16 loss scale shrinks."""

    def finalize(self) -> None:
        """Check values and combinations; raises naming the field and the fix. Changes nothing."""
        for name in (
            "bf16",
            "fp16",
            "autocast_enabled",
            "grad_reduce_in_fp32",
            "fp8_wgrad",
            "fp8_dot_product_attention",
            "fp8_multi_head_attention",
            "fp8_param_gather",
            "reuse_grad_buf_for_mxfp8_param_ag",
            "first_last_layers_bf16",
            "fp4_param_gather",
        ):
            check_bool(_OWNER, name, getattr(self, name))
        for name in ("params_dtype", "pipeline_dtype", "autocast_dtype"):
            check_choice(
                _OWNER,
                name,
                getattr(self, name),
                _PARAM_DTYPES,
                optional=True,
                hint="None derives it from bf16/fp16.",
            )
        check_choice(_OWNER, "fp8", self.fp8, Fp8Format, optional=True)
        check_choice(_OWNER, "fp8_recipe", self.fp8_recipe, Fp8Recipe)
        check_choice(_OWNER, "fp4", self.fp4, Fp4Format, optional=True)
        check_choice(_OWNER, "fp4_recipe", self.fp4_recipe, Fp4Recipe)
        check_choice(
            _OWNER, "fp8_amax_compute_algo", self.fp8_amax_compute_algo, Fp8AmaxComputeAlgo
        )
        for name, minimum in (
            ("fp8_margin", 0),
            ("fp8_amax_history_len", 1),
            ("num_layers_at_start_in_bf16", 0),
            ("num_layers_at_end_in_bf16", 0),
            ("hysteresis", 1),
        ):
            check_int(_OWNER, name, getattr(self, name), minimum=minimum)
        _check_positive_number("loss_scale", self.loss_scale, optional=True)
        _check_positive_number("initial_loss_scale", self.initial_loss_scale)
        _check_positive_number("min_loss_scale", self.min_loss_scale)
        _check_positive_number("loss_scale_window", self.loss_scale_window)

        if self.bf16 and self.fp16:
            raise ValueError(
                "MixedPrecisionConfig has both bf16=True and fp16=True: choose one "
                "(bf16 needs no loss scaling and is the usual choice on Ampere and newer)."
            )
        expected = self._derived_params_dtype()
        if (
            self.params_dtype is not None
            and (self.bf16 or self.fp16)
            and self.params_dtype != expected
        ):
            flag = "bf16" if self.bf16 else "fp16"
            raise ValueError(
                f"MixedPrecisionConfig.params_dtype={self.params_dtype} contradicts {flag}=True: "
                f"set params_dtype={expected} or leave it None."
            )
        if self.fp8 is None:
            for name in (
                "fp8_param_gather",
                "fp8_dot_product_attention",
                "fp8_multi_head_attention",
            ):
                if getattr(self, name):
                    raise ValueError(
                        f"MixedPrecisionConfig.{name}=True needs FP8: set fp8 to one of "
                        f"{list(get_args(Fp8Format))} or set {name}=False."
                    )
        # megatron-core's TransformerConfig.__post_init__: "fp4 and fp8 cannot be used
        # simultaneously", and fp4_param (which fp4_param_gather writes) needs fp4.
        if self.fp4 is not None and self.fp8 is not None:
            raise ValueError(
                f"MixedPrecisionConfig has fp8={self.fp8!r} and fp4={self.fp4!r}: megatron-core "
                "trains in one of them; set fp8=None (NVFP4) or fp4=None (FP8)."
            )
        if self.fp4_param_gather and self.fp4 is None:
            raise ValueError(
                "MixedPrecisionConfig.fp4_param_gather=True needs FP4: set fp4='e2m1' or set "
                "fp4_param_gather=False."
            )
        if self.reuse_grad_buf_for_mxfp8_param_ag and not (
            self.fp8 is not None and self.fp8_recipe == "mxfp8" and self.fp8_param_gather
        ):
            raise ValueError(
                "MixedPrecisionConfig.reuse_grad_buf_for_mxfp8_param_ag=True needs fp8 set, "
                "fp8_recipe='mxfp8' and fp8_param_gather=True; set those or turn it off."
            )
        if self.fp8 is not None and self.first_last_layers_bf16 and self.fp8_recipe == "delayed":
            raise ValueError(
                "MixedPrecisionConfig.first_last_layers_bf16=True does not work with "
                "fp8_recipe='delayed': use fp8_recipe='tensorwise' (current scaling) or turn "
                "first_last_layers_bf16 off."
            )

    def _derived_params_dtype(self) -> torch.dtype:
        if self.bf16:
            return torch.bfloat16
        if self.fp16:
            return torch.float16
        return torch.float32

    @property
    def resolved_params_dtype(self) -> torch.dtype:
        """params_dtype as set, or derived from bf16/fp16 (float32 when neither)."""
        return self.params_dtype if self.params_dtype is not None else self._derived_params_dtype()

    def setup(
        self, model_config: Any, optimizer_config: Any = None, ddp_config: Any = None
    ) -> None:
        """Write these settings into megatron-core's configs, field by field.

        ``model_config`` is a ``TransformerConfig`` (e.g. ``GPTModelProvider``),
        ``optimizer_config`` an ``OptimizerConfig`` and ``ddp_config`` a
        ``DistributedDataParallelConfig``; either of the last two may be None. Writes the same
        values every call, so calling it twice is the same as once.
        """
        self.finalize()
        params_dtype = self.resolved_params_dtype
        fp8_on = self.fp8 is not None

        model_config.bf16 = self.bf16
        model_config.fp16 = self.fp16
        model_config.params_dtype = params_dtype
        model_config.pipeline_dtype = (
            self.pipeline_dtype if self.pipeline_dtype is not None else params_dtype
        )
        model_config.enable_autocast = self.autocast_enabled
        model_config.autocast_dtype = (
            self.autocast_dtype if self.autocast_dtype is not None else params_dtype
        )
        for name, default in BF16_LAYER_DEFAULTS.items():
            # megatron-core's defaults: a value about to be replaced that is not one was set
            # straight on cfg.model by the user (or a recipe), so say so rather than drop it.
            found = getattr(model_config, name, default)
            if found != default and found != getattr(self, name):
                logger.warning(
                    "cfg.model.%s=%r is replaced by cfg.mixed_precision.%s=%r: precision knobs "
                    "belong to mixed precision; set cfg.mixed_precision.%s to keep it.",
                    name,
                    found,
                    name,
                    getattr(self, name),
                    name,
                )
        for name in _MODEL_FIELDS:
            setattr(model_config, name, getattr(self, name))
        # Megatron-LM maps --fp8-param-gather onto TransformerConfig.fp8_param (FP8 weights),
        # and --fp4-param-gather onto fp4_param.
        for model_name, name in (
            ("fp8_param", "fp8_param_gather"),
            ("fp4_param", "fp4_param_gather"),
        ):
            # megatron-core defaults both to False: a True about to be replaced was set straight
            # on cfg.model by the user, so say so rather than drop it.
            if getattr(model_config, model_name, False) is True and getattr(self, name) is False:
                logger.warning(
                    "cfg.model.%s=True is replaced by cfg.mixed_precision.%s=False: precision "
                    "knobs belong to mixed precision; set cfg.mixed_precision.%s=True to keep it.",
                    model_name,
                    name,
                    name,
                )
            setattr(model_config, model_name, getattr(self, name))

        if optimizer_config is not None:
            optimizer_config.bf16 = self.bf16
            optimizer_config.fp16 = self.fp16
            optimizer_config.params_dtype = params_dtype
            # The distributed optimizer branches on the recipe; None means "no FP8".
            optimizer_config.fp8_recipe = self.fp8_recipe if fp8_on else None
            optimizer_config.reuse_grad_buf_for_mxfp8_param_ag = (
                self.reuse_grad_buf_for_mxfp8_param_ag
            )
            optimizer_config.loss_scale = self.loss_scale
            optimizer_config.initial_loss_scale = self.initial_loss_scale
            optimizer_config.min_loss_scale = self.min_loss_scale
            optimizer_config.loss_scale_window = self.loss_scale_window
            optimizer_config.hysteresis = self.hysteresis

        if ddp_config is not None:
            for name in ("grad_reduce_in_fp32", "fp8_param_gather", "fp4_param_gather"):
                # megatron-core defaults both to False, so a True there that we are about to
                # replace was set straight on cfg.ddp by the user: say so rather than drop it.
                if getattr(ddp_config, name) is True and getattr(self, name) is False:
                    logger.warning(
                        "cfg.ddp.%s=True is replaced by cfg.mixed_precision.%s=False: precision "
                        "knobs belong to mixed precision; set cfg.mixed_precision.%s=True to keep it.",
                        name,
                        name,
                        name,
                    )
            ddp_config.grad_reduce_in_fp32 = self.grad_reduce_in_fp32
            ddp_config.fp8_param_gather = self.fp8_param_gather
            ddp_config.fp4_param_gather = self.fp4_param_gather
            ddp_config.reuse_grad_buf_for_mxfp8_param_ag = self.reuse_grad_buf_for_mxfp8_param_ag

        if self.loss_scale is not None and not self.fp16:
            logger.warning(
                "MixedPrecisionConfig.loss_scale=%s has no effect without fp16=True; "
                "megatron-core uses no loss scaling for %s.",
                self.loss_scale,
                "bf16" if self.bf16 else "fp32",
            )


# ---------------------------------------------------------------------------------------------
# Presets. Each is a function so every lookup returns a new object.
# ---------------------------------------------------------------------------------------------


def fp32_no_mixed() -> MixedPrecisionConfig:
    """Plain fp32 training (no mixed precision)."""
    return MixedPrecisionConfig(grad_reduce_in_fp32=True)


def bf16_mixed() -> MixedPrecisionConfig:
    """bf16 parameters and compute, fp32 gradient reduction."""
    return MixedPrecisionConfig(bf16=True)


def fp16_mixed() -> MixedPrecisionConfig:
    """fp16 parameters and compute with dynamic loss scaling, fp32 gradient reduction."""
    return MixedPrecisionConfig(fp16=True)


def _fp8_delayed(base: MixedPrecisionConfig) -> MixedPrecisionConfig:
    base.fp8 = "hybrid"
    base.fp8_recipe = "delayed"
    base.fp8_amax_history_len = 1024
    base.fp8_amax_compute_algo = "max"
    base.fp8_param_gather = True
    return base


def _fp8_current(base: MixedPrecisionConfig) -> MixedPrecisionConfig:
    base.fp8 = "hybrid"
    base.fp8_recipe = "tensorwise"
    base.fp8_param_gather = True
    # Current scaling tolerates the sensitive first/last layers better in bf16: one at each end
    # (Megatron-Bridge training/mixed_precision.py bf16_with_fp8_current_scaling_mixed).
    base.first_last_layers_bf16 = True
    base.num_layers_at_start_in_bf16 = 1
    base.num_layers_at_end_in_bf16 = 1
    return base


def bf16_with_fp8_delayed_scaling_mixed() -> MixedPrecisionConfig:
    """bf16 with FP8 GEMMs, delayed scaling (amax history 1024, max), FP8 parameter all-gather."""
    return _fp8_delayed(bf16_mixed())


def fp16_with_fp8_delayed_scaling_mixed() -> MixedPrecisionConfig:
    """fp16 with FP8 GEMMs, delayed scaling, FP8 parameter all-gather."""
    return _fp8_delayed(fp16_mixed())


def bf16_with_fp8_current_scaling_mixed() -> MixedPrecisionConfig:
    """bf16 with FP8 GEMMs, per-tensor current scaling ("tensorwise"), first/last layer in bf16."""
    return _fp8_current(bf16_mixed())


def fp16_with_fp8_current_scaling_mixed() -> MixedPrecisionConfig:
    """fp16 with FP8 GEMMs, per-tensor current scaling ("tensorwise"), first/last layer in fp16."""
    return _fp8_current(fp16_mixed())


def _mxfp8(base: MixedPrecisionConfig) -> MixedPrecisionConfig:
    base.fp8 = "e4m3"
    base.fp8_recipe = "mxfp8"
    # MXFP8 parameters all-gathered in the gradient buffer: megatron-core's OptimizerConfig warns
    # that mxfp8 without both "will use significant amount additional GPU memory".
    base.fp8_param_gather = True
    base.reuse_grad_buf_for_mxfp8_param_ag = True
    return base


def _fp8_subchannel(base: MixedPrecisionConfig) -> MixedPrecisionConfig:
    # 128x128 blocks for weights, 1x128 for activations (TE's Float8BlockScaling).
    base.fp8 = "hybrid"
    base.fp8_recipe = "blockwise"
    return base


def bf16_with_mxfp8_mixed() -> MixedPrecisionConfig:
    """bf16 with MXFP8 block scaling (Blackwell GPUs), MXFP8 parameter all-gather in the grad buffer."""
    return _mxfp8(bf16_mixed())


def fp16_with_mxfp8_mixed() -> MixedPrecisionConfig:
    """fp16 with MXFP8 block scaling (Blackwell GPUs), MXFP8 parameter all-gather in the grad buffer."""
    return _mxfp8(fp16_mixed())


def bf16_with_fp8_subchannel_scaling_mixed() -> MixedPrecisionConfig:
    """bf16 with FP8 sub-channel (blockwise) scaling."""
    return _fp8_subchannel(bf16_mixed())


def fp16_with_fp8_subchannel_scaling_mixed() -> MixedPrecisionConfig:
    """fp16 with FP8 sub-channel (blockwise) scaling."""
    return _fp8_subchannel(fp16_mixed())


def bf16_with_nvfp4_mixed() -> MixedPrecisionConfig:
    """bf16 with NVFP4 block scaling (Blackwell GPUs) and FP4 parameter all-gather."""
    config = bf16_mixed()
    config.fp4 = "e2m1"
    config.fp4_recipe = "nvfp4"
    config.fp4_param_gather = True
    return config


#: Preset name -> factory. Read-only; add presets here, not at run time. Names are upstream
#: Megatron-Bridge's (``training/mixed_precision.py``); its model-specific presets (nemotron_h,
#: nanov2, nemotron_3_super) are left to the recipes of those models.
MIXED_PRECISION_PRESETS: Mapping[str, Callable[[], MixedPrecisionConfig]] = MappingProxyType(
    {
        "fp32_no_mixed": fp32_no_mixed,
        "bf16_mixed": bf16_mixed,
        "fp16_mixed": fp16_mixed,
        "bf16_with_fp8_delayed_scaling_mixed": bf16_with_fp8_delayed_scaling_mixed,
        "fp16_with_fp8_delayed_scaling_mixed": fp16_with_fp8_delayed_scaling_mixed,
        "bf16_with_fp8_current_scaling_mixed": bf16_with_fp8_current_scaling_mixed,
        "fp16_with_fp8_current_scaling_mixed": fp16_with_fp8_current_scaling_mixed,
        "bf16_with_mxfp8_mixed": bf16_with_mxfp8_mixed,
        "fp16_with_mxfp8_mixed": fp16_with_mxfp8_mixed,
        "bf16_with_fp8_subchannel_scaling_mixed": bf16_with_fp8_subchannel_scaling_mixed,
        "fp16_with_fp8_subchannel_scaling_mixed": fp16_with_fp8_subchannel_scaling_mixed,
        "bf16_with_nvfp4_mixed": bf16_with_nvfp4_mixed,
    }
)


def get_mixed_precision_config(name: str) -> MixedPrecisionConfig:
    """A new :class:`MixedPrecisionConfig` for ``name``; ``ValueError`` listing the names otherwise.

    ``name`` is a preset name, in upstream's underscore or hyphen spelling (``bf16_mixed``,
    ``bf16-mixed``), or a training precision (``bf16``, ``fp8_cs``, ``fp8_mx``, ``mxfp8``,
    ``nvfp4``, ...; :data:`~megatron.bridge.training.precisions.PRECISIONS`), which names its
    preset.
    """
    if not isinstance(name, str):
        raise TypeError(f"Mixed precision preset name must be a str, got {type(name).__name__}.")
    factory = MIXED_PRECISION_PRESETS.get(mixed_precision_preset_name(name))
    if factory is None:
        raise ValueError(
            f"Unknown mixed precision preset {name!r}; valid names: "
            f"{sorted(MIXED_PRECISION_PRESETS)} (or their hyphen spellings), or a training "
            f"precision: {precision_choices()}."
        )
    return factory()
