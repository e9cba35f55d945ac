"""Transformer Engine userbuffer (TP comm-overlap) configurations and the published presets.

This module owns the per-GEMM overlap config types, the table of presets NVIDIA publishes
for its H100 and B200 recipes, and the lookup that finds a preset for a model shape. It is
pure data: importing it loads neither torch, megatron-core nor Transformer Engine.

Presets are frozen, so a recipe that wants a variant makes one with ``dataclasses.replace``
instead of editing the object every other recipe shares. Presets whose values are identical
are one object; the published names are aliases of it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from megatron.bridge.training.hardware import GPUS
from megatron.bridge.training.upstream_divergence import differs_from_upstream
from megatron.bridge.training.validators import check_choice, check_int, check_optional_bool

__all__ = [
    "GEMM_NAMES",
    "PRESET_GPU_FAMILIES",
    "PUBLISHED_PRESETS",
    "BulkOverlapCfg",
    "GemmOverlapCfg",
    "PipelineOverlapCfg",
    "PresetChoice",
    "PresetShape",
    "RingExchangeOverlapCfg",
    "TransformerLayerTPOverlapCfg",
    "choose_userbuffers_preset",
    "find_userbuffers_preset",
    "mtp_userbuffers_pitfall",
    "preset_fits_model",
    "preset_names_of",
    "preset_shapes_of",
    "published_name_for",
]

#: The TE GEMM names a transformer layer registers userbuffers for, in TE's order.
GEMM_NAMES: tuple[str, ...] = (
    "qkv_dgrad",
    "qkv_wgrad",
    "fc1_dgrad",
    "fc1_wgrad",
    "qkv_fprop",
    "proj_dgrad",
    "fc1_fprop",
    "fc2_dgrad",
    "proj_fprop",
    "fc2_fprop",
)


class _GemmOverlapCfg:
    """Shared behaviour of the per-GEMM configs: validation and the TE dict form."""

    method: str

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name == "method":
                continue
            if f.name in ("num_sm", "cga_size", "num_splits"):
                check_int(owner, f.name, value, optional=True, hint="None means TE's default.")
            else:
                check_optional_bool(owner, f.name, value, none_means="TE's default")

    def to_te_dict(self) -> dict[str, object]:
        """The dict TE's ``initialize_ub(ub_cfgs=...)`` takes for one GEMM, None knobs left out."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) is not None
        }


@dataclass(frozen=True, kw_only=True)
class BulkOverlapCfg(_GemmOverlapCfg):
    """Bulk overlap: the whole collective runs beside the GEMM on ``num_sm`` SMs."""

    method: Literal["bulk"] = dataclasses.field(default="bulk", init=False)
    """TE overlap method name."""
    num_sm: int | None = None
    """SMs given to the communication kernel (None: TE's default)."""
    cga_size: int | None = None
    """Cooperative grid array size of the communication kernel (None: TE's default)."""
    set_sm_margin: bool | None = None
    """Whether the GEMM leaves ``num_sm`` SMs free (None: TE's default)."""


@dataclass(frozen=True, kw_only=True)
class RingExchangeOverlapCfg(_GemmOverlapCfg):
    """Ring-exchange overlap: point-to-point chunks pass around the TP ring between GEMM chunks."""

    method: Literal["ring_exchange"] = dataclasses.field(default="ring_exchange", init=False)
    """TE overlap method name."""
    num_sm: int = 1
    """SMs given to the communication kernel."""
    cga_size: int = 1
    """Cooperative grid array size of the communication kernel."""
    set_sm_margin: bool = False
    """Whether the GEMM leaves SMs free for communication."""
    aggregate: bool = False
    """Aggregate two chunks per exchange step."""
    atomic_gemm: bool = False
    """Use TE's atomic GEMM variant."""
    fp8_buf: bool = False
    """Keep the communication buffer in FP8."""


@differs_from_upstream(
    "fp8_buf defaults to False; upstream's default is the tuple (False,), which TE reads as True"
)
@dataclass(frozen=True, kw_only=True)
class PipelineOverlapCfg(_GemmOverlapCfg):
    """Pipelined overlap: the GEMM is split into ``num_splits`` chunks, each followed by its collective."""

    method: Literal["pipeline"] = dataclasses.field(default="pipeline", init=False)
    """TE overlap method name."""
    num_sm: int | None = None
    """SMs given to the communication kernel (None: TE's default)."""
    cga_size: int | None = None
    """Cooperative grid array size of the communication kernel (None: TE's default)."""
    num_splits: int | None = None
    """Number of GEMM chunks (None: TE's default)."""
    set_sm_margin: bool | None = None
    """Whether the GEMM leaves ``num_sm`` SMs free (None: TE's default)."""
    atomic_gemm: bool = False
    """Use TE's atomic GEMM variant."""
    fp8_buf: bool = False
    """Keep the communication buffer in FP8."""


GemmOverlapCfg = BulkOverlapCfg | RingExchangeOverlapCfg | PipelineOverlapCfg
"""A GEMM's userbuffer config: one config type per TE overlap method."""


@dataclass(frozen=True, kw_only=True)
class TransformerLayerTPOverlapCfg:
    """Userbuffer overlap settings for every TP GEMM of a transformer layer.

    A GEMM left as None gets no userbuffer config from us (TE applies its own default).
    """

    qkv_dgrad: GemmOverlapCfg | None = None
    """QKV projection, input-gradient GEMM."""
    qkv_wgrad: GemmOverlapCfg | None = None
    """QKV projection, weight-gradient GEMM."""
    fc1_dgrad: GemmOverlapCfg | None = None
    """MLP FC1, input-gradient GEMM."""
    fc1_wgrad: GemmOverlapCfg | None = None
    """MLP FC1, weight-gradient GEMM."""
    qkv_fprop: GemmOverlapCfg | None = None
    """QKV projection, forward GEMM (all-gather overlap)."""
    proj_dgrad: GemmOverlapCfg | None = None
    """Attention output projection, input-gradient GEMM."""
    fc1_fprop: GemmOverlapCfg | None = None
    """MLP FC1, forward GEMM (all-gather overlap)."""
    fc2_dgrad: GemmOverlapCfg | None = None
    """MLP FC2, input-gradient GEMM."""
    proj_fprop: GemmOverlapCfg | None = None
    """Attention output projection, forward GEMM (reduce-scatter overlap)."""
    fc2_fprop: GemmOverlapCfg | None = None
    """MLP FC2, forward GEMM (reduce-scatter overlap)."""

    def __post_init__(self) -> None:
        for name in GEMM_NAMES:
            value = getattr(self, name)
            if value is not None and not isinstance(value, GemmOverlapCfg):
                raise TypeError(
                    f"TransformerLayerTPOverlapCfg.{name} must be a BulkOverlapCfg, "
                    f"RingExchangeOverlapCfg, PipelineOverlapCfg or None, got {type(value).__name__}."
                )

    @functools.cached_property
    def _ub_items(self) -> tuple[tuple[str, tuple[tuple[str, object], ...]], ...]:
        # Immutable snapshot (the config is frozen); to_ub_cfgs hands out fresh dicts from it.
        return tuple(
            (name, tuple(getattr(self, name).to_te_dict().items()))
            for name in GEMM_NAMES
            if getattr(self, name) is not None
        )

    def to_ub_cfgs(self) -> dict[str, dict[str, object]]:
        """The ``ub_cfgs`` dict TE's ``initialize_ub`` consumes; GEMMs and knobs that are None are left out.

        Each call returns a new dict, so editing it never changes the preset.
        """
        return {name: dict(knobs) for name, knobs in self._ub_items}


# --------------------------------------------------------------------------------------------
# Published presets. Values are NVIDIA's published userbuffer presets; the
# building blocks below only remove repetition. Every published name lies in the table at the
# bottom; names whose values are identical point at one object.
# --------------------------------------------------------------------------------------------

_RING = RingExchangeOverlapCfg()
_RING_MARGIN = RingExchangeOverlapCfg(set_sm_margin=True)


def _bulk(num_sm: int) -> BulkOverlapCfg:
    return BulkOverlapCfg(num_sm=num_sm, cga_size=2, set_sm_margin=False)


def _pipeline(num_sm: int, *, fp8_buf: bool = False) -> PipelineOverlapCfg:
    return PipelineOverlapCfg(
        num_sm=num_sm, cga_size=2, num_splits=4, set_sm_margin=True, fp8_buf=fp8_buf
    )


def _layer(
    bulk_sms: tuple[int, int, int, int],
    proj_fprop: GemmOverlapCfg,
    fc2_fprop: GemmOverlapCfg,
) -> TransformerLayerTPOverlapCfg:
    """The common shape: four bulk backward GEMMs, plain ring-exchange AG GEMMs, tuned RS GEMMs."""
    qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad = (_bulk(n) for n in bulk_sms)
    return TransformerLayerTPOverlapCfg(
        qkv_dgrad=qkv_dgrad,
        qkv_wgrad=qkv_wgrad,
        fc1_dgrad=fc1_dgrad,
        fc1_wgrad=fc1_wgrad,
        qkv_fprop=_RING,
        proj_dgrad=_RING,
        fc1_fprop=_RING,
        fc2_dgrad=_RING,
        proj_fprop=proj_fprop,
        fc2_fprop=fc2_fprop,
    )


def _lora_layer(
    ring: RingExchangeOverlapCfg,
    proj_fprop: GemmOverlapCfg,
    fc2_fprop: GemmOverlapCfg,
) -> TransformerLayerTPOverlapCfg:
    """LoRA presets: no wgrad overlap (frozen base weights), FP8 pipelined fc1 dgrad."""
    return TransformerLayerTPOverlapCfg(
        qkv_dgrad=_bulk(2),
        qkv_wgrad=None,
        fc1_dgrad=_pipeline(16, fp8_buf=True),
        fc1_wgrad=None,
        qkv_fprop=ring,
        proj_dgrad=ring,
        fc1_fprop=ring,
        fc2_dgrad=ring,
        proj_fprop=proj_fprop,
        fc2_fprop=fc2_fprop,
    )


_H8192_BF16_H100 = _layer((4, 24, 2, 4), _pipeline(24), _pipeline(16))
# The FP8 H100 h8192 TP4 preset and the FP8 B200 h8192 TP2 preset are published with equal values.
_H8192_FP8 = _layer((4, 24, 2, 4), _RING_MARGIN, _RING_MARGIN)
_H8192_BF16_B200 = _layer((16, 24, 2, 4), _pipeline(32), _pipeline(16))
_H16384_BF16_H100 = _layer((2, 24, 2, 2), _pipeline(24), _pipeline(8))
_H16384_FP8_H100 = _layer((2, 24, 2, 2), _RING_MARGIN, _RING_MARGIN)
_H16384_BF16_B200 = _layer((8, 24, 2, 2), _pipeline(32), _pipeline(8))
_H8192_FP8_H100_LORA = _lora_layer(
    _RING_MARGIN,
    RingExchangeOverlapCfg(cga_size=2, set_sm_margin=True, fp8_buf=True),
    RingExchangeOverlapCfg(cga_size=2, set_sm_margin=True, fp8_buf=True),
)
_H16384_FP8_H100_LORA = _lora_layer(
    RingExchangeOverlapCfg(aggregate=True),
    _pipeline(32, fp8_buf=True),
    _pipeline(16, fp8_buf=True),
)
_H6144_BF16_H100 = _layer((8, 16, 4, 16), _pipeline(16), _pipeline(24))
_H6144_FP8_H100 = _layer((8, 16, 4, 16), _pipeline(16, fp8_buf=True), _pipeline(24, fp8_buf=True))
_H12288_BF16_H100 = _layer((4, 4, 2, 4), _pipeline(24), _RING_MARGIN)
_H12288_FP8_H100 = _layer((4, 4, 2, 4), _RING_MARGIN, _RING_MARGIN)
# BF16 and FP8 B200 h12288 TP4 are published with equal values.
_H12288_B200 = _layer((4, 16, 2, 8), _RING_MARGIN, _RING_MARGIN)
# FP8 B200 h16384 TP4 CP2, BF16 B200 h6144 TP2 and FP8 B200 h18432 TP8 are published with
# equal values.
_B200_BULK8_32_2_8_RING = _layer((8, 32, 2, 8), _RING_MARGIN, _RING_MARGIN)
_H18432_BF16_B200 = _layer((8, 32, 2, 8), _RING_MARGIN, _pipeline(24))

userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192 = _H8192_BF16_H100
userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 = _H8192_FP8
userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192 = _H8192_BF16_B200
userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192 = _H8192_FP8
userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192 = _H16384_BF16_H100
userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192 = _H16384_FP8_H100
userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192 = _H16384_BF16_B200
userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 = _B200_BULK8_32_2_8_RING
userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora = _H8192_FP8_H100_LORA
userbuffers_fp8_h100_h16384_tp4_mbs1_seqlen2048_lora = _H16384_FP8_H100_LORA
userbuffers_bf16_h100_h6144_tp2_mbs2_seqlen2048 = _H6144_BF16_H100
userbuffers_fp8_h100_h6144_tp2_mbs2_seqlen2048 = _H6144_FP8_H100
userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048 = _H12288_BF16_H100
userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048 = _H12288_FP8_H100
userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048 = _H12288_B200
userbuffers_fp8_b200_h12288_tp4_mbs1_seqlen2048 = _H12288_B200
userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096 = _B200_BULK8_32_2_8_RING
userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096 = _H18432_BF16_B200
userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096 = _B200_BULK8_32_2_8_RING

_PRESET_NAME = re.compile(
    r"^userbuffers_(?P<precision>bf16|fp8)_(?P<gpu>[a-z0-9]+)_h(?P<hidden>\d+)_tp(?P<tp>\d+)"
    r"(?:_cp(?P<cp>\d+))?_mbs(?P<mbs>\d+)_seqlen(?P<seq>\d+)(?P<lora>_lora)?$"
)

#: Every published preset by its published name (read-only).
PUBLISHED_PRESETS: Mapping[str, TransformerLayerTPOverlapCfg] = MappingProxyType(
    {name: value for name, value in globals().items() if _PRESET_NAME.match(name)}
)

PresetPrecision = Literal["bf16", "fp8"]

#: GPU names a preset lookup accepts, and the preset family each one uses (read from the GPU
#: catalogue, which says why H200 shares H100's presets and GB200 B200's).
PRESET_GPU_FAMILIES: Mapping[str, str] = MappingProxyType(
    {name: spec.preset_family for name, spec in GPUS.items() if spec.preset_family is not None}
)


@dataclass(frozen=True, kw_only=True)
class PresetShape:
    """The model and run shape a published preset was tuned for, read from its name."""

    precision: PresetPrecision
    """Training precision the preset was tuned with."""
    gpu: str
    """GPU family (h100 or b200)."""
    hidden_size: int
    """Model hidden size."""
    tp_size: int
    """Tensor-parallel size."""
    cp_size: int
    """Context-parallel size."""
    micro_batch_size: int
    """Micro-batch size."""
    seq_length: int
    """Sequence length."""
    lora: bool
    """Whether the preset is for LoRA fine-tuning."""


def _shape_of(name: str) -> PresetShape:
    m = _PRESET_NAME.match(name)
    if m is None:  # pragma: no cover - the table is built from names that match
        raise ValueError(f"{name!r} is not a published userbuffers preset name.")
    return PresetShape(
        precision=m["precision"],  # type: ignore[arg-type]
        gpu=m["gpu"],
        hidden_size=int(m["hidden"]),
        tp_size=int(m["tp"]),
        cp_size=int(m["cp"] or 1),
        micro_batch_size=int(m["mbs"]),
        seq_length=int(m["seq"]),
        lora=m["lora"] is not None,
    )


_SHAPES: Mapping[str, PresetShape] = MappingProxyType(
    {name: _shape_of(name) for name in PUBLISHED_PRESETS}
)


# Presets are frozen dataclasses, so equal values hash equal: a preset loaded from a YAML copy of
# a published one is recognised by its values.
_NAMES_BY_VALUE: Mapping[TransformerLayerTPOverlapCfg, tuple[str, ...]] = MappingProxyType(
    {
        value: tuple(n for n, v in PUBLISHED_PRESETS.items() if v == value)
        for value in PUBLISHED_PRESETS.values()
    }
)


#: The same names by object identity: a published preset object is found without hashing its
#: every GEMM's knobs (an equal copy still goes through :data:`_NAMES_BY_VALUE`).
_NAMES_BY_ID: Mapping[int, tuple[str, ...]] = MappingProxyType(
    {id(value): names for value, names in _NAMES_BY_VALUE.items()}
)


def preset_names_of(cfg: TransformerLayerTPOverlapCfg) -> tuple[str, ...]:
    """The published names of a preset with these values (empty for a custom one)."""
    names = _NAMES_BY_ID.get(id(cfg))
    return names if names is not None else _NAMES_BY_VALUE.get(cfg, ())


def preset_shapes_of(cfg: TransformerLayerTPOverlapCfg) -> tuple[PresetShape, ...]:
    """The shapes this preset object was published for (empty for a custom one)."""
    return tuple(_SHAPES[name] for name in preset_names_of(cfg))


def find_userbuffers_preset(
    *,
    precision: str,
    gpu: str,
    hidden_size: int,
    tp_size: int,
    cp_size: int = 1,
    micro_batch_size: int = 1,
    seq_length: int,
    lora: bool = False,
) -> tuple[str, TransformerLayerTPOverlapCfg]:
    """Find the published preset for a shape; returns ``(name, preset)``.

    Raises ``ValueError`` listing the published presets when none matches, and for a
    precision or GPU name it does not know.
    """
    check_choice(
        "", "precision", precision, PresetPrecision, hint="Presets are published for these only."
    )
    family = PRESET_GPU_FAMILIES.get(gpu.lower()) if isinstance(gpu, str) else None
    if family is None:
        raise ValueError(
            f"gpu must be one of {sorted(PRESET_GPU_FAMILIES)} for a userbuffers preset lookup, "
            f"got {gpu!r} (no presets are published for other GPUs)."
        )
    wanted = PresetShape(
        precision=precision,  # type: ignore[arg-type]
        gpu=family,
        hidden_size=hidden_size,
        tp_size=tp_size,
        cp_size=cp_size,
        micro_batch_size=micro_batch_size,
        seq_length=seq_length,
        lora=lora,
    )
    for name, shape in _SHAPES.items():
        if shape == wanted:
            return name, PUBLISHED_PRESETS[name]
    published = "\n  ".join(sorted(PUBLISHED_PRESETS))
    raise ValueError(
        f"No published userbuffers preset for precision={precision}, gpu={gpu} "
        f"(family {family}), hidden_size={hidden_size}, tp={tp_size}, cp={cp_size}, "
        f"mbs={micro_batch_size}, seq_length={seq_length}, lora={lora}. Published presets:\n  "
        f"{published}\nUse one of these, build a TransformerLayerTPOverlapCfg, or leave "
        f"tp_comm_overlap_cfg=None for Transformer Engine's defaults."
    )


@dataclass(frozen=True, kw_only=True)
class PresetChoice:
    """The userbuffers preset picked for a run, and why."""

    name: str | None
    """Published name of the preset, or None when none is used."""
    preset: TransformerLayerTPOverlapCfg | None
    """The preset, or None (Transformer Engine's defaults, or TP overlap off)."""
    detail: str
    """One line saying why this preset, or why none."""


def choose_userbuffers_preset(
    *,
    tp_comm_overlap: bool,
    precision: str,
    gpu: str,
    hidden_size: int,
    tp_size: int,
    cp_size: int,
    micro_batch_size: int,
    seq_length: int,
) -> PresetChoice:
    """The published preset a run uses: the one choice the CLI and every recipe make.

    Nothing is looked up while TP overlap is off. The lookup is exact first; when the exact CP
    size has none, the preset published without a CP size (CP1) for the same shape is used: a
    preset's knobs (SM counts, splits, methods) do not depend on the buffer shape, which TE takes
    separately, and NVIDIA runs its Llama-3 70B CP2 layout on the CP-less preset. No match means
    Transformer Engine's defaults, said in ``detail``.
    """
    if not tp_comm_overlap:
        return PresetChoice(name=None, preset=None, detail="TP overlap is off: no preset")
    shape = dict(
        precision=precision,
        gpu=gpu,
        hidden_size=hidden_size,
        tp_size=tp_size,
        micro_batch_size=micro_batch_size,
        seq_length=seq_length,
    )
    for cp in dict.fromkeys((cp_size, 1)):
        try:
            name, preset = find_userbuffers_preset(cp_size=cp, **shape)
        except ValueError:
            continue
        if cp != cp_size:
            detail = (
                f"published without a CP size for this shape; used at CP={cp_size} (a preset's "
                "knobs do not depend on the buffer shape)"
            )
        else:
            detail = "published preset for this shape"
        return PresetChoice(name=name, preset=preset, detail=detail)
    return PresetChoice(
        name=None,
        preset=None,
        detail=(
            f"No published userbuffers preset for {precision} on {gpu}, hidden {hidden_size}, "
            f"TP{tp_size}, CP{cp_size}, mbs {micro_batch_size}, seq {seq_length}: Transformer "
            "Engine's defaults"
        ),
    )


def preset_fits_model(
    names: tuple[str, ...],
    *,
    hidden_size: int | None,
    tp_size: int,
    precision: str | None = None,
    gpu: str | None = None,
) -> bool | None:
    """Whether a preset published under ``names`` was tuned for this hidden size and TP size.

    ``precision`` and ``gpu``, when given, must match too (the GPU by its preset family; a GPU
    without one is not compared). None for a custom preset (no published names): there is
    nothing to compare. An unknown hidden size compares on the TP size alone.
    """
    if not names:
        return None
    family = PRESET_GPU_FAMILIES.get(gpu) if gpu is not None else None
    # Presets are published for bf16 and fp8 only; fp16 compares as the 16-bit one.
    if precision is not None and precision != "fp8":
        precision = "bf16"
    return any(
        (hidden_size is None or _SHAPES[n].hidden_size == hidden_size)
        and _SHAPES[n].tp_size == tp_size
        and (precision is None or _SHAPES[n].precision == precision)
        and (family is None or _SHAPES[n].gpu == family)
        for n in names
    )


def published_name_for(
    names: tuple[str, ...],
    *,
    gpu: str | None,
    precision: str,
    hidden_size: int | None,
    tp_size: int,
) -> str | None:
    """The name, among a preset's published ``names``, that describes this run.

    Presets with equal values are one object published under several names; the name whose GPU
    family, precision, hidden size and TP size fit the run is the one to show. Falls back to the
    first name; None for a custom preset.
    """
    family = PRESET_GPU_FAMILIES.get(gpu) if gpu is not None else None
    for name in names:
        shape = _SHAPES[name]
        if (
            shape.gpu == family
            and shape.precision == precision
            and shape.hidden_size == hidden_size
            and shape.tp_size == tp_size
        ):
            return name
    return names[0] if names else None


def mtp_userbuffers_pitfall(mtp_num_layers: int) -> str:
    """Why TP overlap does not survive multi-token-prediction layers, and the fix."""
    return (
        f"with mtp_num_layers={mtp_num_layers} the multi-token-prediction layers' userbuffer "
        "names are not in the userbuffers preset, and when they are built megatron-core/"
        "Transformer Engine write tp_comm_overlap=False back into the shared model config, "
        "turning TP overlap off for every decoder layer built afterwards (Megatron-Bridge issue "
        "#4227): set mtp_num_layers=None, or tp_comm_overlap=False to run MTP knowingly without "
        "TP overlap"
    )
