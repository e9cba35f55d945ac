"""How a hybrid (Mamba) model's ``hybrid_layer_pattern`` splits over pipeline stages: torch-free.

megatron-core's ``HybridModel`` places its layers by the pattern alone: ``|`` splits the main
pattern (before the first MTP ``/``) into one segment per (pipeline rank, virtual stage);
without ``|`` the pattern splits evenly, or by the first/last-stage sizes, over the pipeline
ranks, with no interleaving (``models/hybrid/hybrid_layer_allocation.select_pipeline_segment``,
run for every model chunk as ``HybridModel`` is built). :func:`hybrid_stage_layers` mirrors it;
:func:`check_hybrid_layer_count` holds the pattern to ``num_layers``.
"""

from __future__ import annotations

from megatron.bridge.training.validators import divisors, shown_value

__all__ = ["check_hybrid_layer_count", "hybrid_segments", "hybrid_stage_layers"]

_FIRST = "num_layers_in_first_pipeline_stage"
_LAST = "num_layers_in_last_pipeline_stage"
_PATTERN = "hybrid_layer_pattern"
# megatron-core's hybrid_layer_allocation.Symbols.PIPE and MTP_SEPARATOR.
_PIPE, _MTP_SEPARATOR = "|", "/"


def hybrid_segments(pattern: str) -> list[str]:
    """A hybrid layer pattern's ``|``-delimited segments, one per (pipeline rank, virtual
    stage), as megatron-core's ``select_pipeline_segment`` splits the main pattern (before the
    first MTP ``/``); an empty main pattern is one empty segment."""
    main = pattern.split(_MTP_SEPARATOR)[0]
    return main.split(_PIPE) if main else [""]


def hybrid_stage_layers(
    pattern: str,
    *,
    pp_size: int,
    vpp_size: int | None,
    num_layers_in_first_pipeline_stage: int | None = None,
    num_layers_in_last_pipeline_stage: int | None = None,
) -> tuple[tuple[int, ...], ...]:
    """Decoder layers each ``[pp_rank][vp_stage]`` of a hybrid model builds from its pattern.

    Mirrors megatron-core's ``hybrid_layer_allocation.select_pipeline_segment``, which
    ``HybridModel`` runs for each model chunk: one chunk per virtual stage (``vp_stage``
    0..VPP-1) when PP > 1 and VPP is set, else one chunk with ``vp_stage`` None (``get_model``).
    ``ValueError`` (naming ``hybrid_layer_pattern`` and the fix) where megatron-core raises:

    - first/last-stage sizes with ``|`` separators;
    - without ``|`` and PP > 1: any VPP (1 included); the layers not dividing by PP, or, with
      first/last-stage sizes, the middle layers not dividing by the middle ranks;
    - with ``|``: a segment count that PP does not divide; fewer segments than PP x VPP (a
      segment index out of range).

    and where megatron-core builds a model without every layer once, in order: layers in
    segments past PP x VPP (it builds the first PP x VPP segments only), or first/last-stage
    sizes that do not add up to the pattern.
    """
    first, last = num_layers_in_first_pipeline_stage, num_layers_in_last_pipeline_stage
    shown = f"{_PATTERN}={shown_value(pattern)}"
    segments = hybrid_segments(pattern)
    count = len(segments)
    if count > 1 and (first is not None or last is not None):
        raise ValueError(
            f"{shown} has '|' separators, which place the layers on the pipeline stages "
            f"themselves; {_FIRST}={first} / {_LAST}={last} cannot be set with them "
            "(megatron-core's select_pipeline_segment refuses both). Drop the first/last-stage "
            "sizes, or the '|' separators."
        )
    vp_stages: tuple[int | None, ...] = (
        tuple(range(vpp_size)) if pp_size > 1 and vpp_size is not None else (None,)
    )
    if count == 1 and pp_size > 1:
        return _hybrid_pipe_free(segments[0], shown, pp_size, vpp_size, first, last)
    if count > 1 and count % pp_size:
        raise ValueError(
            f"{shown} has {count} '|'-delimited segments, not divisible by "
            f"pipeline_model_parallel_size={pp_size} (megatron-core's select_pipeline_segment "
            f"refuses it): write PP x VPP segments, or choose a pipeline size that divides {count}."
        )
    chunks = len(vp_stages) * pp_size
    vpp_shown = f"virtual_pipeline_model_parallel_size={vpp_size}"
    if count < chunks:
        raise ValueError(
            f"{shown} has {count} '|'-delimited segments, but pipeline_model_parallel_size="
            f"{pp_size} x {vpp_shown} builds {chunks} model chunks, one segment each: segment "
            f"index {chunks - 1} is out of range (megatron-core's select_pipeline_segment "
            f"refuses it). Write {chunks} segments, or set virtual_pipeline_model_parallel_size="
            f"{count // pp_size if count // pp_size > 1 else None}."
        )
    # Empty segments past the built ones lose no layer: megatron-core builds the same model.
    if count > chunks and any(segments[chunks:]):
        fix = (
            f"set virtual_pipeline_model_parallel_size={count // pp_size}"
            if pp_size > 1
            else "remove the '|' separators or raise pipeline_model_parallel_size"
        )
        raise ValueError(
            f"{shown} has {count} '|'-delimited segments, but pipeline_model_parallel_size="
            f"{pp_size} x {vpp_shown} builds {chunks} model chunks: megatron-core's "
            f"select_pipeline_segment builds the first {chunks} segments only, dropping the "
            f"rest's layers. Write {chunks} segments, or {fix}."
        )
    return tuple(
        tuple(len(segments[vp * pp_size + rank]) for vp in range(len(vp_stages)))
        for rank in range(pp_size)
    )


def _hybrid_pipe_free(
    main: str, shown: str, pp_size: int, vpp_size: int | None, first: int | None, last: int | None
) -> tuple[tuple[int, ...], ...]:
    # select_pipeline_segment's fallback for a pattern without '|' on a pipeline: the layers are
    # sliced per rank at build time, with no virtual stages.
    if vpp_size is not None:
        raise ValueError(
            f"{shown} has no '|' separators, so megatron-core's select_pipeline_segment refuses "
            f"virtual_pipeline_model_parallel_size={vpp_size} (any value, 1 included) with "
            f"pipeline_model_parallel_size={pp_size}. Set virtual_pipeline_model_parallel_size="
            f"None, or write the pattern as PP x VPP segments separated by '|'."
        )
    total = len(main)
    if first is None and last is None:
        if total % pp_size:
            raise ValueError(
                f"{shown} has {total} layers and no '|' separators: megatron-core's "
                f"select_pipeline_segment splits them evenly over pipeline_model_parallel_size="
                f"{pp_size} and refuses {total} % {pp_size} != 0. Choose a pipeline size that "
                f"divides {total} (e.g. {[d for d in divisors(total) if d > 1][:6]}), or mark "
                "the stages with '|'."
            )
        return tuple((total // pp_size,) for _ in range(pp_size))
    # The arithmetic of select_pipeline_segment, slices included, so that sizes it accepts but
    # that do not cover the pattern once, in order, are found here.
    middle_layers = total - (first or 0) - (last or 0)
    middle_ranks = pp_size - (first is not None) - (last is not None)
    per_middle = 0
    if middle_ranks > 0:
        if middle_layers % middle_ranks:
            raise ValueError(
                f"{shown} has {total} layers; {_FIRST}={first} and {_LAST}={last} leave "
                f"{middle_layers}, which megatron-core's select_pipeline_segment refuses to "
                f"split over the {middle_ranks} middle pipeline ranks. Change the first/last "
                f"stage sizes so the rest divides by {middle_ranks}."
            )
        per_middle = middle_layers // middle_ranks
    built, offsets = [], []
    for rank in range(pp_size):
        if first is not None and rank == 0:
            offset, size = 0, first
        elif last is not None and rank == pp_size - 1:
            offset, size = total - last, last
        else:
            offset = (rank if first is None else rank - 1) * per_middle + (first or 0)
            size = per_middle
        built.append(main[offset : offset + size])
        offsets.append(offset)
    # Each rank's layer_offset numbers its layers: it must be the layers before it.
    running = [sum(len(layers) for layers in built[:rank]) for rank in range(pp_size)]
    if "".join(built) != main or offsets != running:
        raise ValueError(
            f"{shown} has {total} layers, but {_FIRST}={first} and {_LAST}={last} over "
            f"pipeline_model_parallel_size={pp_size} make megatron-core's "
            f"select_pipeline_segment build {[len(b) for b in built]} layers per rank, not each "
            "layer once. Make the first, middle and last stages add up to the pattern."
        )
    return tuple((len(layers),) for layers in built)


def check_hybrid_layer_count(pattern: str, num_layers: int | None) -> int:
    """The decoder layers ``pattern`` spells; ``ValueError`` unless they are ``num_layers``
    (None: unknown, not checked).

    megatron-core's ``HybridModel`` builds the pattern's layers whatever ``num_layers`` says
    (megatron's ``arguments.py`` overwrites ``num_layers`` with the pattern's count); the FLOPs,
    parameters and memory read ``num_layers``, so the two must agree. An empty main pattern
    spells none.
    """
    decoders = len(pattern.split(_MTP_SEPARATOR)[0].replace(_PIPE, ""))
    if num_layers is not None and decoders != num_layers:
        raise ValueError(
            f"{_PATTERN}={shown_value(pattern)} spells {decoders} decoder layers (before any '/'), "
            f"but num_layers={num_layers}: megatron-core's HybridModel builds the pattern's "
            f"layers. Set num_layers={decoders}, or write a pattern of {num_layers} layers."
        )
    return decoders
