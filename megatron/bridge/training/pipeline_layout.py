"""How megatron-core splits decoder layers over pipeline stages, and the rules it applies: torch-free.

megatron-core (0.19) places layers on pipeline ranks in one of three ways, chosen by the
``TransformerConfig`` fields a user sets:

- **a custom layout**, ``pipeline_model_parallel_layout``: a string such as
  ``"Et*4|(t*4|)*14tmL"`` or a list of stages such as ``[["embedding", "decoder"], ...]``, one
  entry per (virtual) pipeline stage (``transformer/pipeline_parallel_layer_layout.py``);
- **an uneven first or last stage**, ``num_layers_in_first_pipeline_stage`` /
  ``num_layers_in_last_pipeline_stage``, the other ranks sharing the rest evenly;
- **the even split**, optionally counting the embedding and the loss as one layer each
  (``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``).

A hybrid (Mamba) model places its layers by its ``hybrid_layer_pattern`` instead: ``|`` splits
the pattern into one segment per (pipeline rank, virtual stage), or, without ``|``, the pattern
splits evenly (or by the first/last-stage sizes) over the pipeline ranks, with no interleaving
(``models/hybrid/hybrid_layer_allocation.select_pipeline_segment``, run for every model chunk
as ``HybridModel`` is built), which :mod:`~megatron.bridge.training.hybrid_pipeline` mirrors.

It checks them in ``TransformerConfig.__post_init__`` and, for what that misses, with asserts in
``get_num_layers_to_build`` (``transformer/transformer_block.py``) while the model is built, on
the cluster. :func:`check_pipeline_layout` applies the same rules to plain values and returns the
decoder layers each (pipeline rank, virtual stage) builds; :func:`parse_layout` reads a layout in
either form; :func:`stage_layers` gives the split of a model description.

Stage order is megatron-core's: a layout's stage ``i`` is virtual stage ``i // PP`` of pipeline
rank ``i % PP`` (``i = vp_stage * PP + pp_rank``); layer ids run through the stages in that
order. Pure standard library: importing this module loads neither torch nor megatron-core.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from megatron.bridge.training.hybrid_pipeline import check_hybrid_layer_count, hybrid_stage_layers
from megatron.bridge.training.validators import (
    LIMITS,
    LimitError,
    check_bool,
    check_int,
    divisors,
    shown_value,
)

__all__ = [
    "LAYER_NAMES",
    "PipelineFields",
    "PipelineSplit",
    "check_pipeline_layout",
    "divisors",
    "parse_layout",
    "stage_layers",
]

_LAYOUT = "pipeline_model_parallel_layout"
_LAYOUT_LIMIT = "model.pipeline_model_parallel_layout"
_FIRST = "num_layers_in_first_pipeline_stage"
_LAST = "num_layers_in_last_pipeline_stage"
_PATTERN = "hybrid_layer_pattern"
# megatron-core's hybrid_layer_allocation.Symbols.PIPE and MTP_SEPARATOR.
_PIPE, _MTP_SEPARATOR = "|", "/"

LAYER_NAMES: dict[str, str] = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
"""The layout string's layer characters and the layer each stands for (megatron-core's
``parse_str_to_list``); the list form names layers by megatron-core's ``LayerType`` names."""

# megatron-core's LayerType members: the names the list form accepts (after strip().lower()).
# "encoder" parses but is refused by validate_layer_layout (not supported in a custom layout).
_LAYER_TYPES = ("embedding", "loss", "encoder", "decoder", "mtp")

# parse_str_to_list unrolls "(group)*n" first, then "x*n", each in one re.sub pass; the same
# patterns give the same result on every string, odd ones included (nested groups, "*0").
_GROUP_REPEAT = re.compile(r"\(([^)]+)\)\*(\d+)")
_LAYER_REPEAT = re.compile(r"(.)\*(\d+)")

_LAYOUT_HELP = (
    "Layers: E (embedding), t (decoder), m (mtp), L (loss); '|' ends a stage, 'x*n' repeats a "
    "layer and '(...)*n' a group, ',' is cosmetic."
)


class PipelineFields(Protocol):
    """The model fields the pipeline split reads (a ``ModelDescription`` has them all)."""

    num_layers: int | None
    pipeline_model_parallel_size: int
    virtual_pipeline_model_parallel_size: int | None
    pipeline_model_parallel_layout: str | Sequence[Sequence[str]] | None
    num_layers_in_first_pipeline_stage: int | None
    num_layers_in_last_pipeline_stage: int | None
    account_for_embedding_in_pipeline_split: bool
    account_for_loss_in_pipeline_split: bool
    mtp_num_layers: int | None
    hybrid_layer_pattern: str | None


@dataclass(frozen=True, kw_only=True)
class PipelineSplit:
    """What megatron-core derives from a valid pipeline split."""

    virtual_pipeline_model_parallel_size: int | None
    """The virtual pipeline size the config holds after ``TransformerConfig.__post_init__``:
    the one given, else the layout's (its stage count / PP) when that is above 1, else None."""
    layers: tuple[tuple[int, ...], ...] | None
    """Decoder layers built on each ``[pp_rank][vp_stage]`` (one virtual stage without
    interleaving); None when ``num_layers`` is unknown and there is no layout to count."""


def parse_layout(layout: str | Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    """The stages of a ``pipeline_model_parallel_layout``, each a tuple of layer names.

    Mirrors megatron-core's ``PipelineParallelLayerLayout.parse_str_to_list`` (string form) and
    the name normalization of ``PipelineParallelLayerLayout.__init__`` (list form: each stage a
    list, or a tuple as a ``ModelDescription`` stores it, of ``LayerType`` names, stripped and
    lower-cased). Names are ``embedding``, ``loss``, ``encoder``, ``decoder``, ``mtp``; stages
    are in megatron-core's order (stage ``vp_stage * PP + pp_rank``). A character or name that
    is not a layer is a ``ValueError``; a value of the wrong type a ``TypeError``. The stage
    count and placement rules are :func:`check_pipeline_layout`'s.
    """
    if isinstance(layout, str):
        return _parse_string(layout)
    if not isinstance(layout, list | tuple):
        raise TypeError(
            f"{_LAYOUT} must be a string such as 'Et*3|(tt|)*29,m|L' or a list of stages (lists "
            f"of layer names), got {type(layout).__name__} {shown_value(layout)}."
        )
    limit = LIMITS[_LAYOUT_LIMIT]
    size = len(layout) + sum(len(stage) for stage in layout if isinstance(stage, list | tuple))
    if size > limit.maximum:
        raise LimitError(
            f"{_LAYOUT} holds {size} layers and stages, above its bound {limit.maximum} "
            f"({limit.why})."
        )
    stages = []
    for index, stage in enumerate(layout):
        # PipelineParallelLayerLayout.__init__ asserts every stage is a list.
        if not isinstance(stage, list | tuple):
            raise TypeError(
                f"{_LAYOUT} stage {index} must be a list of layer names, got "
                f"{type(stage).__name__} {stage!r:.60}."
            )
        names = []
        for item in stage:
            if not isinstance(item, str):
                raise TypeError(
                    f"{_LAYOUT} stage {index} holds {item!r:.40} ({type(item).__name__}); layers "
                    f"are named by strings: {list(_LAYER_TYPES)}."
                )
            name = item.strip().lower()
            if name not in _LAYER_TYPES:
                raise ValueError(
                    f"{_LAYOUT} stage {index} holds {item!r}, not a megatron-core layer type; "
                    f"use one of {list(_LAYER_TYPES)}."
                )
            names.append(name)
        stages.append(tuple(names))
    return tuple(stages)


def _unrolled(layout: str, text: str, pattern: re.Pattern[str]) -> str:
    # One of parse_str_to_list's re.sub passes; the length it would give is summed first, so a
    # count such as "t*99999999999999" is refused before anything is unrolled.
    matches = list(pattern.finditer(text))
    length = len(text) + sum(len(m.group(1)) * int(m.group(2)) - len(m.group(0)) for m in matches)
    limit = LIMITS[_LAYOUT_LIMIT]
    if length > limit.maximum:
        raise LimitError(
            f"{_LAYOUT}={shown_value(layout)} is {length} characters long once its repeats are "
            f"unrolled, above its bound {limit.maximum} ({limit.why}); a layout places each of num_layers decoder "
            "layers once, so check the repeat counts ('*n')."
        )
    return pattern.sub(lambda m: m.group(1) * int(m.group(2)), text)


def _parse_string(layout: str) -> tuple[tuple[str, ...], ...]:
    # PipelineParallelLayerLayout.parse_str_to_list.
    text = layout.replace(",", "")
    text = _unrolled(layout, text, _GROUP_REPEAT)
    text = _unrolled(layout, text, _LAYER_REPEAT)
    stages = []
    for index, stage in enumerate(text.split("|")):
        for char in stage:
            if char not in LAYER_NAMES:
                raise ValueError(
                    f"{_LAYOUT}={layout!r}: {char!r} (in stage {index}, {stage!r:.40} once "
                    f"repeats are unrolled) is not a layer. {_LAYOUT_HELP}"
                )
        stages.append(tuple(LAYER_NAMES[char] for char in stage))
    return tuple(stages)


def check_pipeline_layout(
    *,
    num_layers: int | None,
    pp_size: int,
    vpp_size: int | None,
    pipeline_model_parallel_layout: str | Sequence[Sequence[str]] | None = None,
    num_layers_in_first_pipeline_stage: int | None = None,
    num_layers_in_last_pipeline_stage: int | None = None,
    account_for_embedding_in_pipeline_split: bool = False,
    account_for_loss_in_pipeline_split: bool = False,
    mtp_num_layers: int | None = None,
    hybrid_layer_pattern: str | None = None,
) -> PipelineSplit:
    """Check a pipeline split the way megatron-core would; return what it derives.

    Field names and None meanings are ``TransformerConfig``'s: ``vpp_size`` None is no
    interleaving given (a layout then sets it), ``mtp_num_layers`` None is no MTP.
    ``num_layers`` None means "unknown here": the rules that need it are skipped.
    ``hybrid_layer_pattern`` None is a transformer; a pattern is a hybrid model, whose layers
    the pattern places (:func:`hybrid_stage_layers`).

    Rules (each a ``ValueError`` naming the field, the count found and the count needed):

    - a layout excludes the first/last-stage sizes and the ``account_for_*`` flags, and those
      two exclude each other (``TransformerConfig.__post_init__``);
    - a layout has PP x VPP stages: its stage count divides by PP, and VPP, when given, is that
      count / PP; it holds the embedding once as its first layer and the loss once as its last,
      ``num_layers`` decoders, ``mtp_num_layers`` MTP layers after every decoder, all in one
      stage that is a rank's last virtual stage (``validate_layer_layout``); no encoder;
    - first/last-stage sizes are >= 1 and divide by VPP; the remaining layers split evenly over
      the middle ranks, and per middle rank by VPP (``TransformerConfig.__post_init__``);
    - the even split: ``num_layers`` (+1 embedding, +1 loss when counted) divides by PP, and
      each rank's share by VPP (``get_num_layers_to_build``);
    - every decoder layer is built exactly once (no stage with a negative count);
    - VPP > 1 needs PP > 1 (``initialize_model_parallel``);
    - a hybrid model: the pattern's decoder layers are ``num_layers``; no custom layout and no
      ``account_for_*`` flags, which its model ignores (megatron's ``arguments.py`` refuses
      them too); the pattern splits over the stages as :func:`hybrid_stage_layers` says.
    """
    check_int("", "num_layers", num_layers, optional=True, hint="Pass None when it is not known.")
    check_int("", "pipeline_model_parallel_size", pp_size)
    check_int("", "virtual_pipeline_model_parallel_size", vpp_size, optional=True)
    check_int("", _FIRST, num_layers_in_first_pipeline_stage, optional=True)
    check_int("", _LAST, num_layers_in_last_pipeline_stage, optional=True)
    check_int("", "mtp_num_layers", mtp_num_layers, minimum=0, optional=True)
    embedding = check_bool(
        "", "account_for_embedding_in_pipeline_split", account_for_embedding_in_pipeline_split
    )
    loss = check_bool("", "account_for_loss_in_pipeline_split", account_for_loss_in_pipeline_split)
    first, last = num_layers_in_first_pipeline_stage, num_layers_in_last_pipeline_stage

    # TransformerConfig.__post_init__: the uneven stages replace the account_for_* counting.
    if (first is not None or last is not None) and (embedding or loss):
        raise ValueError(
            f"{_FIRST}={first} / {_LAST}={last} cannot be combined with "
            f"account_for_embedding_in_pipeline_split={embedding} / "
            f"account_for_loss_in_pipeline_split={loss} (megatron-core refuses both); size the "
            "first and last stages with the embedding and loss in mind, or drop them."
        )

    if hybrid_layer_pattern is not None:
        return _check_hybrid(
            hybrid_layer_pattern,
            num_layers=num_layers,
            pp_size=pp_size,
            vpp_size=vpp_size,
            layout=pipeline_model_parallel_layout,
            first=first,
            last=last,
            embedding=embedding,
            loss=loss,
        )

    if pipeline_model_parallel_layout is not None:
        if first is not None or last is not None or embedding or loss:
            raise ValueError(
                f"{_LAYOUT} cannot be set with {_FIRST}={first}, {_LAST}={last}, "
                f"account_for_embedding_in_pipeline_split={embedding}, "
                f"account_for_loss_in_pipeline_split={loss}: the layout places every layer "
                "itself. Drop the other settings."
            )
        return _check_layout(
            pipeline_model_parallel_layout,
            num_layers=num_layers,
            pp_size=pp_size,
            vpp_size=vpp_size,
            mtp_num_layers=mtp_num_layers,
        )

    _check_interleaving(pp_size, vpp_size, source="")
    if first is not None or last is not None:
        layers = _uneven_split(num_layers, pp_size, vpp_size, first, last)
        if layers is not None:
            _check_every_layer_once(layers, num_layers, first, last)
    else:
        # The even split places every layer once by construction.
        layers = _even_split(num_layers, pp_size, vpp_size, embedding, loss)
    return PipelineSplit(virtual_pipeline_model_parallel_size=vpp_size, layers=layers)


def _check_hybrid(
    pattern: str,
    *,
    num_layers: int | None,
    pp_size: int,
    vpp_size: int | None,
    layout: str | Sequence[Sequence[str]] | None,
    first: int | None,
    last: int | None,
    embedding: bool,
    loss: bool,
) -> PipelineSplit:
    if not isinstance(pattern, str):
        raise TypeError(
            f"{_PATTERN} must be a string of layer symbols, got {type(pattern).__name__} "
            f"{shown_value(pattern)}."
        )
    shown = f"{_PATTERN}={shown_value(pattern)}"
    # HybridModel places its layers by the pattern alone: it never reads these (megatron's
    # arguments.py refuses them with a pattern); accepting them would plan a split it ignores.
    ignored = [
        name
        for name, value in (
            (_LAYOUT, layout is not None),
            ("account_for_embedding_in_pipeline_split", embedding),
            ("account_for_loss_in_pipeline_split", loss),
        )
        if value
    ]
    if ignored:
        raise ValueError(
            f"{shown} places the hybrid model's layers itself ('|' between pipeline stages); "
            f"megatron-core's HybridModel ignores {', '.join(ignored)}. Drop "
            f"{'it' if len(ignored) == 1 else 'them'}, and mark the stages with '|'."
        )
    decoders = check_hybrid_layer_count(pattern, num_layers)
    _check_interleaving(pp_size, vpp_size, source="")
    if first is not None or last is not None:
        # TransformerConfig.__post_init__ checks the uneven sizes for a hybrid model too.
        _uneven_split(decoders, pp_size, vpp_size, first, last)
    layers = hybrid_stage_layers(
        pattern,
        pp_size=pp_size,
        vpp_size=vpp_size,
        num_layers_in_first_pipeline_stage=first,
        num_layers_in_last_pipeline_stage=last,
    )
    return PipelineSplit(virtual_pipeline_model_parallel_size=vpp_size, layers=layers)


def _check_interleaving(pp_size: int, vpp_size: int | None, *, source: str) -> None:
    # initialize_model_parallel: "pipeline-model-parallel size should be greater than 1 with
    # interleaved schedule". TransformerConfig accepts it, but get_num_layers_to_build then
    # builds every layer in each virtual stage.
    if vpp_size is not None and vpp_size > 1 and pp_size == 1:
        raise ValueError(
            f"virtual_pipeline_model_parallel_size={vpp_size}{source} needs "
            "pipeline_model_parallel_size > 1 (interleaving splits each pipeline rank's layers); "
            "set it to None or raise pipeline_model_parallel_size."
        )


def _check_layout(
    layout: str | Sequence[Sequence[str]],
    *,
    num_layers: int | None,
    pp_size: int,
    vpp_size: int | None,
    mtp_num_layers: int | None,
) -> PipelineSplit:
    stages = parse_layout(layout)
    shown = f"{_LAYOUT}={shown_value(layout)}"
    count = len(stages)
    # PipelineParallelLayerLayout.__init__: one stage per (pipeline rank, virtual stage).
    if count == 0 or count % pp_size:
        raise ValueError(
            f"{shown} has {count} stages, not a positive multiple of "
            f"pipeline_model_parallel_size={pp_size}: it needs PP x VPP stages ('|' separates "
            "them), e.g. "
            f"{max(pp_size, count + (-count) % pp_size)}."
        )
    layout_vpp = count // pp_size
    # TransformerConfig.__post_init__: a given VPP must be the layout's; otherwise the layout
    # sets it (above 1 only).
    if vpp_size is not None and vpp_size != layout_vpp:
        raise ValueError(
            f"{shown} has {count} stages = pipeline_model_parallel_size {pp_size} x "
            f"{layout_vpp} virtual stages, but virtual_pipeline_model_parallel_size={vpp_size} "
            f"needs {pp_size * vpp_size} stages. Set virtual_pipeline_model_parallel_size=None "
            f"(megatron-core takes it from the layout) or {layout_vpp}, or write "
            f"{pp_size * vpp_size} stages."
        )
    derived_vpp = vpp_size if vpp_size is not None else (layout_vpp if layout_vpp > 1 else None)
    _check_interleaving(pp_size, derived_vpp, source=f" (from {shown})")
    _validate_layer_layout(stages, shown, pp_size, num_layers, mtp_num_layers)
    # PipelineParallelLayerLayout.get_num_layers_to_build: the decoders of stage
    # vp_stage * PP + pp_rank.
    layers = tuple(
        tuple(stages[vp * pp_size + pp].count("decoder") for vp in range(layout_vpp))
        for pp in range(pp_size)
    )
    return PipelineSplit(virtual_pipeline_model_parallel_size=derived_vpp, layers=layers)


def _validate_layer_layout(
    stages: tuple[tuple[str, ...], ...],
    shown: str,
    pp_size: int,
    num_layers: int | None,
    mtp_num_layers: int | None,
) -> None:
    # PipelineParallelLayerLayout.validate_layer_layout, in megatron-core's layer-id order.
    layers = [name for stage in stages for name in stage]
    for name, char, where in (("embedding", "E", "first"), ("loss", "L", "last")):
        found = layers.count(name)
        if found != 1:
            raise ValueError(
                f"{shown} places the {name} ({char}) {found} times; it needs exactly 1, as the "
                f"{where} layer of the {where} stage."
            )
    if layers[0] != "embedding":
        raise ValueError(
            f"{shown} starts with {layers[0]}: the embedding (E) must be the first layer of "
            "stage 0."
        )
    if layers[-1] != "loss":
        raise ValueError(
            f"{shown} ends with {layers[-1]}: the loss (L) must be the last layer of the last "
            "stage."
        )
    decoders = layers.count("decoder")
    if num_layers is not None and decoders != num_layers:
        raise ValueError(
            f"{shown} places {decoders} decoder layers (t), but num_layers={num_layers} needs "
            f"{num_layers}, each once; add or remove 't' layers, or set num_layers={decoders}."
        )
    mtps = layers.count("mtp")
    wanted = 0 if mtp_num_layers is None else mtp_num_layers
    if mtps != wanted:
        raise ValueError(
            f"{shown} places {mtps} MTP layers (m), but mtp_num_layers={mtp_num_layers} needs "
            f"{wanted}; write {wanted} 'm' after the last 't', in a pipeline rank's last virtual "
            f"stage, or set mtp_num_layers={mtps or None}."
        )
    if mtps and "decoder" in layers[layers.index("mtp") :]:
        raise ValueError(
            f"{shown} places a decoder layer (t) after an MTP layer (m); the MTP layers follow "
            "the last decoder layer."
        )
    vpp = len(stages) // pp_size
    for index, stage in enumerate(stages):
        if "mtp" not in stage:
            continue
        # The MTP layers sit in one stage, a rank's last virtual stage. (megatron-core's
        # separate "not on the first pipeline rank" rule covers only virtual stages before the
        # last, which this already refuses.)
        if index // pp_size != vpp - 1:
            raise ValueError(
                f"{shown} places MTP layers in stage {index} (pipeline rank {index % pp_size}, "
                f"virtual stage {index // pp_size} of {vpp}); megatron-core needs them in a "
                f"pipeline rank's last virtual stage (stages {(vpp - 1) * pp_size}.."
                f"{vpp * pp_size - 1})."
            )
        if stage.count("mtp") != wanted:
            raise ValueError(
                f"{shown} places {stage.count('mtp')} of the {wanted} MTP layers in stage "
                f"{index}; megatron-core needs all {wanted} in one stage."
            )
    # validate_layer_layout raises NotImplementedError for an encoder: a layout megatron-core
    # cannot run is a user error here.
    if "encoder" in layers:
        raise ValueError(
            f"{shown} holds an encoder layer, which megatron-core's custom pipeline layout does "
            "not support; use decoder layers."
        )


def _share(total: int, parts: int, problem: str, knob: str, otherwise: str) -> int:
    """``total // parts``; where ``parts`` does not divide ``total``, a ``ValueError`` saying
    ``problem``, the ``knob`` sizes that divide ``total``, then ``otherwise`` (the other fixes)."""
    if total % parts:
        fits = [d for d in divisors(total) if d > 1]
        raise ValueError(
            f"{problem}; choose a {knob} that divides {total} (e.g. {fits[:6]}){otherwise}."
        )
    return total // parts


def _even_split(
    num_layers: int | None, pp_size: int, vpp_size: int | None, embedding: bool, loss: bool
) -> tuple[tuple[int, ...], ...] | None:
    # TransformerConfig.__post_init__ (with the account_for_* flags) and get_num_layers_to_build
    # (always): the counted layers divide by PP, each rank's share by VPP; the embedding and the
    # loss then take their place in the first and the last virtual stage.
    if num_layers is None:
        return None
    extra = []
    if embedding:
        extra.append("1 for the embedding")
    if loss:
        extra.append("1 for the loss")
    counted = num_layers + len(extra)
    shown = f"num_layers={num_layers}" + (f" + {' + '.join(extra)} = {counted}" if extra else "")
    per_rank = _share(
        counted,
        pp_size,
        f"{shown} does not split evenly over pipeline_model_parallel_size={pp_size}",
        "pipeline_model_parallel_size",
        ", or change num_layers, the account_for_*_in_pipeline_split flags, or size the first "
        f"and last stages ({_FIRST} / {_LAST})",
    )
    vpp = vpp_size or 1
    per_stage = _share(
        per_rank,
        vpp,
        f"{shown} over pipeline_model_parallel_size={pp_size} gives {per_rank} layers per "
        f"pipeline rank, not divisible by virtual_pipeline_model_parallel_size={vpp_size}",
        "virtual_pipeline_model_parallel_size",
        " or None for no interleaving",
    )
    layers = [[per_stage] * vpp for _ in range(pp_size)]
    if embedding:
        layers[0][0] -= 1
    if loss:
        layers[-1][-1] -= 1
    return tuple(tuple(rank) for rank in layers)


def _uneven_split(
    num_layers: int | None,
    pp_size: int,
    vpp_size: int | None,
    first: int | None,
    last: int | None,
) -> tuple[tuple[int, ...], ...] | None:
    # TransformerConfig.__post_init__ ("Uneven PP"), with its arithmetic: the rules hold for
    # any count of middle ranks, zero or (PP 1 with both sizes set) negative.
    for name, size in ((_FIRST, first), (_LAST, last)):
        if size is not None and vpp_size is not None and size % vpp_size:
            raise ValueError(
                f"{name}={size} is not divisible by virtual_pipeline_model_parallel_size="
                f"{vpp_size}: the stage's layers split over its virtual stages. Use a multiple "
                f"of {vpp_size}."
            )
    if num_layers is None:
        return None
    middle_layers = num_layers - (first or 0) - (last or 0)
    middle_ranks = pp_size - (first is not None) - (last is not None)
    sizes = f"num_layers={num_layers} - {_FIRST}={first} - {_LAST}={last}"
    if bool(middle_layers) != bool(middle_ranks):
        raise ValueError(
            f"{sizes} leaves {middle_layers} layers for {middle_ranks} middle pipeline ranks "
            f"(pipeline_model_parallel_size={pp_size}); a middle rank needs layers and layers "
            "need a middle rank. Change the first/last stage sizes or the pipeline size."
        )
    if middle_ranks and middle_layers % middle_ranks:
        raise ValueError(
            f"{sizes} leaves {middle_layers} layers, which do not split evenly over the "
            f"{middle_ranks} middle pipeline ranks; change the first/last stage sizes so the "
            f"rest divides by {middle_ranks}."
        )
    if middle_ranks and vpp_size is not None and (middle_layers // middle_ranks) % vpp_size:
        raise ValueError(
            f"{sizes} leaves {middle_layers // middle_ranks} layers per middle pipeline rank, "
            f"not divisible by virtual_pipeline_model_parallel_size={vpp_size}."
        )
    # get_num_layers_to_build: a middle rank gets an even share (0 when no rank is left), the
    # first and last ranks their sizes (the last's wins on a one-rank pipeline); interleaving
    # splits each rank's layers evenly over its virtual stages.
    middle = middle_layers // middle_ranks if middle_ranks > 0 else 0
    vpp = vpp_size or 1
    layers = []
    for rank in range(pp_size):
        count = middle
        if rank == 0 and first is not None:
            count = first
        if rank == pp_size - 1 and last is not None:
            count = last
        layers.append((count // vpp,) * vpp)
    return tuple(layers)


def _check_every_layer_once(
    layers: tuple[tuple[int, ...], ...], num_layers: int | None, first: int | None, last: int | None
) -> None:
    # megatron-core's config checks let through a first + last above num_layers (a negative
    # middle share) and, on one pipeline rank, a first size it then ignores; the model it
    # builds would not hold each layer once.
    built = sum(sum(rank) for rank in layers)
    negative = [
        (rank, stage, n)
        for rank, counts in enumerate(layers)
        for stage, n in enumerate(counts)
        if n < 0
    ]
    if negative or built != num_layers:
        where = (
            f"; pipeline rank {negative[0][0]} would get {negative[0][2]} layers"
            if negative
            else ""
        )
        raise ValueError(
            f"{_FIRST}={first} and {_LAST}={last} over pipeline_model_parallel_size="
            f"{len(layers)} build {built} decoder layers{where}, but num_layers={num_layers} "
            f"needs {num_layers}, each once. Make the first and last stage sizes add up to at "
            "most num_layers (with one pipeline rank, set only one of them, to num_layers)."
        )


def stage_layers(
    model: PipelineFields, *, pp_size: int | None = None, vpp_size: int | None = None
) -> list[list[int]]:
    """Decoder layers each ``[pp_rank][vp_stage]`` of ``model`` builds, as megatron-core splits them.

    ``pp_size`` / ``vpp_size`` replace the model's pipeline sizes when given. Covers every way
    megatron-core splits (custom layout, uneven first/last stage, even split with or without
    the embedding and loss counted); one virtual stage per rank without interleaving. Raises
    what :func:`check_pipeline_layout` raises, and ``ValueError`` when ``model.num_layers`` is
    unknown and no layout places the layers.
    """
    split = check_pipeline_layout(
        num_layers=model.num_layers,
        pp_size=model.pipeline_model_parallel_size if pp_size is None else pp_size,
        vpp_size=model.virtual_pipeline_model_parallel_size if vpp_size is None else vpp_size,
        pipeline_model_parallel_layout=model.pipeline_model_parallel_layout,
        num_layers_in_first_pipeline_stage=model.num_layers_in_first_pipeline_stage,
        num_layers_in_last_pipeline_stage=model.num_layers_in_last_pipeline_stage,
        account_for_embedding_in_pipeline_split=model.account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split=model.account_for_loss_in_pipeline_split,
        mtp_num_layers=model.mtp_num_layers,
        hybrid_layer_pattern=model.hybrid_layer_pattern,
    )
    if split.layers is None:
        raise ValueError(
            "num_layers is None (unknown): the layers per pipeline stage need it, or a "
            f"{_LAYOUT} that places them."
        )
    return [list(rank) for rank in split.layers]
