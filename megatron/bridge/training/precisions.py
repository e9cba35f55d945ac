"""The training precisions (compute dtypes), in one table, as upstream's performance scripts name them.

Each precision names the mixed-precision preset it trains with and the model fields that preset
writes (megatron-core's names). The CLI's ``--precision`` choices, ``RecipeSpec.precision``,
the mixed-precision preset of a recipe, the job description's ``compute_dtype`` and the GPU
catalogue's precision rule and peaks all read :data:`PRECISIONS`; a new precision is one row
here (a test holds each row equal to what its preset writes).

Names: Megatron-Bridge's ``scripts/performance/argument_parser.py`` (``--compute_dtype``: bf16,
fp8_cs, fp8_mx, fp8_sc, nvfp4), plus fp16 and fp8_ds (FP8 delayed scaling, which those scripts
do not offer). ``fp8`` (the delayed-scaling precision recipes offered before) and ``mxfp8`` are
accepted aliases (:data:`PRECISION_ALIASES`).

Pure data: importing this module loads no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, get_args

__all__ = [
    "PRECISIONS",
    "PRECISION_ALIASES",
    "PUBLISHED_PRECISION_LABELS",
    "ComputeDtype",
    "PrecisionSetting",
    "PresetFamily",
    "TensorCoreFormat",
    "canonical_precision",
    "compute_dtype_of",
    "mixed_precision_preset_name",
    "precision_choices",
    "precision_of_preset",
    "published_precision",
]

ComputeDtype = Literal["bf16", "fp16", "fp8_ds", "fp8_cs", "fp8_sc", "fp8_mx", "nvfp4"]
"""A training precision: bf16, fp16, FP8 delayed scaling (fp8_ds), per-tensor current scaling
(fp8_cs), sub-channel/blockwise scaling (fp8_sc), MXFP8 (fp8_mx) or NVFP4."""

PresetFamily = Literal["bf16", "fp16", "fp8"]
"""The precision a userbuffers preset is published for (presets are named bf16 or fp8)."""

TensorCoreFormat = Literal["bf16", "fp8", "fp4"]
"""The tensor-core input format a precision's GEMMs run in (which datasheet peak applies)."""


@dataclass(frozen=True)
class PrecisionSetting:
    """A training precision: its mixed-precision preset, what that preset writes, how it runs."""

    mixed_precision: str
    """Name of the mixed-precision preset (``get_mixed_precision_config``)."""
    model: Mapping[str, Any]
    """The model precision fields the preset writes (megatron-core names)."""
    grad_reduce_in_fp32: bool
    """Whether the preset reduces gradients in fp32."""
    title: str
    """How messages name the precision (e.g. "MXFP8")."""
    preset_family: PresetFamily
    """The userbuffers presets it runs with. Upstream's performance recipes run FP8 current
    scaling, MXFP8 and NVFP4 with the ``userbuffers_fp8_*`` presets (Megatron-Bridge
    ``src/megatron/bridge/perf_recipes/llama/b300/llama3.py``, the fp8cs/fp8mx/nvfp4 configs)."""
    tensor_cores: TensorCoreFormat
    """The format its GEMMs run in on the tensor cores (NVFP4: FP4; every FP8 recipe: FP8)."""
    min_compute_capability: tuple[int, int] = (8, 0)
    """The oldest GPU (compute capability) that trains in it."""
    below_compute_capability: tuple[int, int] | None = None
    """The first compute capability that no longer trains in it (None: every newer one does)."""
    quantized_params: Literal["fp8", "fp4"] | None = None
    """The format its preset keeps the parameters in (``fp8_param_gather`` / ``fp4_param_gather``
    of the preset; None: 16-bit parameters)."""


def _fields(
    *, fp16: bool = False, fp8: str | None = None, recipe: str = "delayed", fp4: str | None = None
) -> Mapping[str, Any]:
    # megatron-core's TransformerConfig defaults: fp8_recipe "delayed", fp4_recipe "nvfp4".
    return MappingProxyType(
        {
            "bf16": not fp16,
            "fp16": fp16,
            "fp8": fp8,
            "fp8_recipe": recipe,
            "fp4": fp4,
            "fp4_recipe": "nvfp4",
        }
    )


# The compute capabilities Transformer Engine runs each recipe's GEMMs on: the oldest, and the
# first that no longer does (None: every newer one does). Below them TE raises at the first
# autocast (transformer_engine/pytorch/quantization.py, check_recipe_support):
# _compute_fp8_support: 8.9 (Ada) or newer for delayed and current scaling;
# _compute_fp8_block_scaling_support: 9.0 or newer (and CUDA 12.9) for blockwise scaling;
# _compute_mxfp8_support: 10.0 (Blackwell) or newer, and not 12.0 or newer ("not supported on
# 12.0+ architectures yet"); _compute_nvfp4_support: 10.0 or newer. megatron-core's
# fp4_utils.get_fp4_align_size: "FP4 GEMM requires Blackwell and later architectures".
_TE_FP8_SUPPORT: Mapping[str, tuple[tuple[int, int], tuple[int, int] | None]] = MappingProxyType(
    {
        "delayed": ((8, 9), None),
        "tensorwise": ((8, 9), None),
        "blockwise": ((9, 0), None),
        "mxfp8": ((10, 0), (12, 0)),
    }
)
_NVFP4 = (10, 0)


def _fp8(
    mixed_precision: str,
    title: str,
    fp8: str,
    recipe: str,
    *,
    quantized_params: Literal["fp8"] | None = "fp8",
) -> PrecisionSetting:
    """An FP8 precision: bf16 with FP8 GEMMs in megatron-core's ``fp8`` format and ``recipe``,
    gradients reduced in fp32, the ``userbuffers_fp8_*`` presets, the GPUs TE runs it on."""
    return PrecisionSetting(
        mixed_precision,
        _fields(fp8=fp8, recipe=recipe),
        True,
        title,
        "fp8",
        "fp8",
        *_TE_FP8_SUPPORT[recipe],
        quantized_params=quantized_params,
    )


#: Every training precision: its mixed-precision preset (Megatron-Bridge
#: ``scripts/performance/utils/precision.py`` ``get_precision_config`` for the names it knows)
#: and the model fields that preset writes.
PRECISIONS: Mapping[str, PrecisionSetting] = MappingProxyType(
    {
        "bf16": PrecisionSetting("bf16_mixed", _fields(), True, "BF16", "bf16", "bf16"),
        "fp16": PrecisionSetting("fp16_mixed", _fields(fp16=True), True, "FP16", "fp16", "bf16"),
        "fp8_ds": _fp8(
            "bf16_with_fp8_delayed_scaling_mixed", "FP8 delayed scaling", "hybrid", "delayed"
        ),
        "fp8_cs": _fp8(
            "bf16_with_fp8_current_scaling_mixed", "FP8 current scaling", "hybrid", "tensorwise"
        ),
        "fp8_sc": _fp8(
            "bf16_with_fp8_subchannel_scaling_mixed",
            "FP8 sub-channel (blockwise) scaling",
            "hybrid",
            "blockwise",
            quantized_params=None,
        ),
        "fp8_mx": _fp8("bf16_with_mxfp8_mixed", "MXFP8", "e4m3", "mxfp8"),
        "nvfp4": PrecisionSetting(
            "bf16_with_nvfp4_mixed",
            _fields(fp4="e2m1"),
            True,
            "NVFP4",
            "fp8",
            "fp4",
            _NVFP4,
            quantized_params="fp4",
        ),
    }
)

#: Other names accepted for a precision: ``fp8`` (FP8 with delayed scaling, the presets'
#: recipe) and ``mxfp8``.
PRECISION_ALIASES: Mapping[str, ComputeDtype] = MappingProxyType(
    {"fp8": "fp8_ds", "mxfp8": "fp8_mx"}
)

#: The precision column of Megatron-Bridge's ``docs/performance-summary.md`` and
#: ``docs/performance-summary-archive.md``. Their "FP8" rows ran with the performance scripts,
#: whose FP8 choices are current scaling, MXFP8 and sub-channel (``argument_parser.py``
#: ``--compute_dtype``), and whose default FP8 is current scaling: so "FP8" is fp8_cs there, not
#: the ``fp8`` alias (delayed scaling) of :data:`PRECISION_ALIASES`.
PUBLISHED_PRECISION_LABELS: Mapping[str, ComputeDtype] = MappingProxyType(
    {
        "BF16": "bf16",
        "FP8": "fp8_cs",
        "FP8-CS": "fp8_cs",
        "FP8-MX": "fp8_mx",
        "MXFP8": "fp8_mx",
        "NVFP4": "nvfp4",
    }
)


def precision_choices() -> list[str]:
    """Every name a precision is accepted by: the compute dtypes, then the aliases."""
    return [*PRECISIONS, *PRECISION_ALIASES]


def canonical_precision(name: object) -> ComputeDtype:
    """The compute dtype ``name`` names (an alias resolved); ``ValueError`` listing the choices."""
    if isinstance(name, str):
        key = PRECISION_ALIASES.get(name, name)
        if key in PRECISIONS:
            return key  # type: ignore[return-value]
    raise ValueError(f"precision must be one of {precision_choices()}, got {name!r}.")


def mixed_precision_preset_name(name: str) -> str:
    """The mixed-precision preset ``name`` names: a preset name as given (upstream's hyphen
    spelling, ``bf16-mixed``, read as ``bf16_mixed``), or a training precision's preset (an alias
    resolved). A name that is neither comes back as read; the preset table refuses it."""
    key = name.replace("-", "_")
    key = PRECISION_ALIASES.get(key, key)
    return PRECISIONS[key].mixed_precision if key in PRECISIONS else key


def precision_of_preset(name: str) -> ComputeDtype | None:
    """The training precision that trains with the mixed-precision preset ``name`` names
    (:func:`mixed_precision_preset_name`), or None for a preset no precision of
    :data:`PRECISIONS` trains with (``fp32_no_mixed``, the fp16 presets with FP8)."""
    key = mixed_precision_preset_name(name)
    return next((p for p, setting in PRECISIONS.items() if setting.mixed_precision == key), None)


def published_precision(label: str) -> ComputeDtype:
    """The compute dtype of a published table's precision label ("FP8-CS", "MXFP8", ...)."""
    try:
        return PUBLISHED_PRECISION_LABELS[label.strip().upper()]
    except (KeyError, AttributeError):
        raise ValueError(
            f"published precision must be one of {list(PUBLISHED_PRECISION_LABELS)}, got {label!r}."
        ) from None


#: megatron-core's FP8 recipe (``TransformerConfig.fp8_recipe``) -> compute dtype.
_FP8_RECIPES: Mapping[str, ComputeDtype] = MappingProxyType(
    {
        PRECISIONS[name].model["fp8_recipe"]: name
        for name in get_args(ComputeDtype)
        if PRECISIONS[name].model["fp8"] is not None
    }
)


def compute_dtype_of(
    *, fp16: bool, fp8: str | None, fp8_recipe: str, fp4: str | None, fp4_recipe: str | None
) -> ComputeDtype | None:
    """The compute dtype megatron-core's precision fields train in.

    None for a quantization recipe no compute dtype names (megatron-core's ``custom`` recipes,
    which need a quantizer factory the job description does not hold).
    """
    if fp4 is not None:
        return "nvfp4" if str(fp4_recipe) == "nvfp4" else None
    if fp8 is not None:
        # megatron-core may hold the recipe as its Fp8Recipe str-enum.
        return _FP8_RECIPES.get(getattr(fp8_recipe, "value", fp8_recipe))
    return "fp16" if fp16 else "bf16"
