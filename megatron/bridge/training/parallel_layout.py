"""Parallel-layout check: reject, before a cluster starts, what megatron-core would reject on it.

megatron-core checks a layout in several places, some of them only once every rank is up or the
model is being built: ``initialize_model_parallel`` (the dense and the expert rank grids),
``TransformerConfig.__post_init__`` (heads, query groups, sequence parallelism, experts),
``get_num_layers_to_build`` (layers per pipeline rank and per virtual stage), the MoE layer
(experts per EP rank) and the context-parallel batch split (sequence length). A bad layout found
there has already cost a queue wait and a cluster start. :func:`check_parallel_layout` applies
the same rules to plain numbers, on a laptop, and returns the sizes megatron-core would derive.

Pure standard library: importing this module loads neither torch nor megatron-core.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from megatron.bridge.training.pipeline_layout import check_pipeline_layout
from megatron.bridge.training.validators import check_bool, check_int, divisors

__all__ = [
    "ParallelSizes",
    "check_expert_grid",
    "check_parallel_layout",
    "data_parallel_size",
    "micro_batches_per_step",
    "validate_parallel_size",
]


def micro_batches_per_step(
    *, global_batch_size: int, micro_batch_size: int, dp_size: int, pp_size: int, interleaved: bool
) -> int:
    """Micro-batches each data-parallel replica runs per step; ``ValueError`` where megatron-core
    cannot split the batch or schedule them.

    - The global batch splits into micro-batches of every replica:
      ``num_microbatches_calculator.ConstantNumMicroBatchesCalculator`` asserts
      ``global_batch_size % (micro_batch_size x DP) == 0``.
    - The interleaved schedule runs micro-batches in groups of ``microbatch_group_size_per_vp_stage``
      (default: PP, ``ModelParallelConfig.__post_init__``):
      ``schedules.forward_backward_pipelining_with_interleaving`` raises when there are fewer
      micro-batches than a group, or when the last group is non-empty and shorter than PP; with
      the default group, the count is a multiple of PP.
    """
    per_step = micro_batch_size * dp_size
    if global_batch_size % per_step:
        raise ValueError(
            f"global_batch_size={global_batch_size} does not split into micro-batches of every "
            f"data-parallel replica: micro_batch_size x DP = {micro_batch_size} x {dp_size} = "
            f"{per_step} must divide it (megatron-core's micro-batch calculator asserts this); "
            f"use a global batch size that is a multiple of {per_step}."
        )
    count = global_batch_size // per_step
    if interleaved and count % pp_size:
        raise ValueError(
            f"global_batch_size={global_batch_size} gives {count} micro-batch(es) per replica "
            f"(global batch / (micro_batch_size x DP) = {global_batch_size} / {per_step}); "
            f"the interleaved pipeline schedule runs them in groups of PP={pp_size} and raises "
            "unless the count is a positive multiple of PP (megatron-core's "
            "forward_backward_pipelining_with_interleaving); use a global batch size that is a "
            f"multiple of {per_step * pp_size}, or turn interleaving off."
        )
    return count


def validate_parallel_size(name: str, value: object) -> int:
    """Check that a parallel size (``tp_size``, ``dp_size``, ...) is an int >= 1."""
    return check_int("", name, value, hint="Use 1 when that dimension is unused.")


def data_parallel_size(*, num_gpus: int, tp_size: int, cp_size: int, pp_size: int) -> int:
    """Data-parallel size ``num_gpus // (tp * cp * pp)``; the product must divide ``num_gpus``."""
    validate_parallel_size("num_gpus", num_gpus)
    for name, value in (("tp_size", tp_size), ("cp_size", cp_size), ("pp_size", pp_size)):
        validate_parallel_size(name, value)
    model_parallel = tp_size * cp_size * pp_size
    if num_gpus % model_parallel:
        raise ValueError(
            f"num_gpus={num_gpus} is not divisible by tp_size * cp_size * pp_size = "
            f"{tp_size} * {cp_size} * {pp_size} = {model_parallel}; change num_gpus or the "
            "parallel sizes so the product divides the GPU count."
        )
    return num_gpus // model_parallel


def check_expert_grid(
    *, world_size: int, tp_size: int, pp_size: int, ep_size: int, etp_size: int | None
) -> int:
    """``ValueError`` unless ETP * EP * PP divides ``world_size``; return the expert TP size.

    initialize_model_parallel builds ETP x EP x expert-DP x PP over the same world as the dense
    grid (CP folds into expert-DP) and raises when ETP * EP * PP does not tile it. It does so for
    dense models too, so a stray etp_size is caught even without experts. ``etp_size`` None
    means "same as TP", as in megatron-core. The sizes are ints >= 1 (checked by the caller).
    """
    etp = tp_size if etp_size is None else etp_size
    expert_model_pipeline = etp * ep_size * pp_size
    if world_size % expert_model_pipeline:
        raise ValueError(
            f"world_size={world_size} is not divisible by expert_tensor_parallel_size * "
            f"expert_model_parallel_size * pipeline_model_parallel_size = {etp} * {ep_size} * "
            f"{pp_size} = {expert_model_pipeline}: the expert grid (ETP x EP x expert-DP x PP) "
            "must tile the GPUs. Change expert_model_parallel_size, expert_tensor_parallel_size "
            "or the GPU count."
        )
    return etp


@dataclass(frozen=True, kw_only=True)
class ParallelSizes:
    """The sizes megatron-core derives from a valid layout (``initialize_model_parallel``)."""

    data_parallel_size: int
    """Dense data-parallel size: ``world_size // (TP * CP * PP)``."""
    expert_tensor_parallel_size: int
    """Tensor-parallel size of the expert layers: ``etp_size``, or TP when it is not given."""
    expert_data_parallel_size: int | None
    """Data-parallel size of the expert layers, ``world_size // (ETP * EP * PP)``; None for a
    dense model (``num_moe_experts`` None), which has no expert layers to replicate."""


def _optional_size(name: str, value: object) -> int | None:
    # None is "off" (VPP) or "same as TP" (ETP); anything else is a real parallel size.
    return None if value is None else validate_parallel_size(name, value)


def check_parallel_layout(
    *,
    world_size: int,
    tp_size: int,
    pp_size: int,
    vpp_size: int | None,
    cp_size: int,
    ep_size: int = 1,
    etp_size: int | None = None,
    sequence_parallel: bool = False,
    num_layers: int | None = None,
    num_attention_heads: int | None = None,
    num_query_groups: int | None = None,
    num_moe_experts: int | None = None,
    seq_length: int | None = None,
    account_for_embedding_in_pipeline_split: bool = False,
    account_for_loss_in_pipeline_split: bool = False,
    pipeline_model_parallel_layout: str | Sequence[Sequence[str]] | None = None,
    num_layers_in_first_pipeline_stage: int | None = None,
    num_layers_in_last_pipeline_stage: int | None = None,
    mtp_num_layers: int | None = None,
    hybrid_layer_pattern: str | None = None,
) -> ParallelSizes:
    """Check a parallel layout the way megatron-core would at cluster start; return its sizes.

    ``vpp_size`` None or 1 means no interleaving; with a ``pipeline_model_parallel_layout`` a
    ``vpp_size`` that is not None, 1 included, must be the layout's (``TransformerConfig``
    asserts it). ``mtp_num_layers`` None means no MTP layers. ``etp_size`` None means "same as TP", as in
    megatron-core. ``num_layers``, ``num_attention_heads``, ``num_query_groups`` and
    ``seq_length`` None mean "unknown here": the rule that needs them is skipped.
    ``num_moe_experts`` None means a dense model, megatron-core's own meaning of None, so
    ``ep_size`` > 1 is then an error. ``hybrid_layer_pattern`` None is a transformer; a
    pattern's ``|`` segments place a hybrid model's layers.

    Rules (each a ``ValueError`` naming the megatron-core field and the fix; a size that is not
    an int >= 1 is a ``TypeError``/``ValueError``):

    - TP * CP * PP divides ``world_size`` (the dense grid);
    - ETP * EP * PP divides ``world_size`` (the expert grid);
    - the layers split over the (virtual) pipeline stages the way megatron-core builds them,
      whichever way is given: ``pipeline_model_parallel_layout``,
      ``num_layers_in_first/last_pipeline_stage``, or the even split (``num_layers``, +1
      embedding, +1 loss when counted, divisible by PP and each rank's share by VPP); see
      ``pipeline_layout.check_pipeline_layout``. A layout sets VPP (its stage count / PP) when
      ``vpp_size`` is None and must agree with it otherwise; a hybrid model's pattern has as
      many layers as ``num_layers`` and splits as megatron-core's ``select_pipeline_segment``
      splits it (``hybrid_pipeline.hybrid_stage_layers``);
    - interleaving (VPP > 1, given or from the layout) needs PP > 1;
    - ``sequence_parallel`` needs TP > 1;
    - ``num_attention_heads`` divisible by TP; ``num_query_groups`` a multiple or a divisor of
      TP (smaller group counts are replicated across TP ranks);
    - EP > 1 needs ``num_moe_experts``, which must be divisible by EP;
    - with CP > 1, ``seq_length`` divisible by ``2 * CP``.
    """
    validate_parallel_size("world_size", world_size)
    validate_parallel_size("tensor_model_parallel_size (tp_size)", tp_size)
    validate_parallel_size("pipeline_model_parallel_size (pp_size)", pp_size)
    _optional_size("virtual_pipeline_model_parallel_size (vpp_size)", vpp_size)
    validate_parallel_size("context_parallel_size (cp_size)", cp_size)
    validate_parallel_size("expert_model_parallel_size (ep_size)", ep_size)
    _optional_size("expert_tensor_parallel_size (etp_size)", etp_size)
    check_bool("", "sequence_parallel", sequence_parallel)
    check_bool(
        "", "account_for_embedding_in_pipeline_split", account_for_embedding_in_pipeline_split
    )
    check_bool("", "account_for_loss_in_pipeline_split", account_for_loss_in_pipeline_split)
    for name, count in (
        ("num_layers", num_layers),
        ("num_attention_heads", num_attention_heads),
        ("num_query_groups", num_query_groups),
        ("num_moe_experts", num_moe_experts),
        ("seq_length", seq_length),
    ):
        # A model-shape count; None means it is not known here.
        check_int("", name, count, optional=True, hint="Pass None when it is not known.")

    # Dense grid: initialize_model_parallel raises when TP * CP * PP does not tile the world.
    try:
        dp_size = data_parallel_size(
            num_gpus=world_size, tp_size=tp_size, cp_size=cp_size, pp_size=pp_size
        )
    except ValueError as exc:
        raise ValueError(
            f"world_size={world_size} does not fit tensor_model_parallel_size * "
            f"context_parallel_size * pipeline_model_parallel_size: {exc}"
        ) from exc

    etp = check_expert_grid(
        world_size=world_size, tp_size=tp_size, pp_size=pp_size, ep_size=ep_size, etp_size=etp_size
    )

    # TransformerConfig.__post_init__ and get_num_layers_to_build place the layers on the
    # (virtual) pipeline stages; initialize_model_parallel refuses an interleaved schedule, the
    # VPP given or the one a layout sets, without a pipeline to interleave.
    check_pipeline_layout(
        num_layers=num_layers,
        pp_size=pp_size,
        vpp_size=vpp_size,
        pipeline_model_parallel_layout=pipeline_model_parallel_layout,
        num_layers_in_first_pipeline_stage=num_layers_in_first_pipeline_stage,
        num_layers_in_last_pipeline_stage=num_layers_in_last_pipeline_stage,
        account_for_embedding_in_pipeline_split=account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split=account_for_loss_in_pipeline_split,
        mtp_num_layers=mtp_num_layers,
        hybrid_layer_pattern=hybrid_layer_pattern,
    )

    # ModelParallelConfig.__post_init__: sequence parallelism splits the activations over the
    # TP group, so there must be one.
    if sequence_parallel and tp_size == 1:
        raise ValueError(
            "sequence_parallel=True needs tensor_model_parallel_size > 1; set "
            "sequence_parallel=False or raise tensor_model_parallel_size."
        )

    # TransformerConfig.__post_init__: each TP rank holds whole attention heads.
    if num_attention_heads is not None and num_attention_heads % tp_size:
        raise ValueError(
            f"num_attention_heads={num_attention_heads} is not divisible by "
            f"tensor_model_parallel_size={tp_size}; choose a tensor_model_parallel_size that "
            f"divides it (e.g. {divisors(num_attention_heads)[:8]})."
        )
    # TransformerConfig.__post_init__ accepts a group count that is a multiple of TP (groups
    # split over ranks) or a divisor of it (each group replicated on TP // groups ranks).
    if num_query_groups is not None and num_query_groups % tp_size and tp_size % num_query_groups:
        raise ValueError(
            f"num_query_groups={num_query_groups} must be a multiple or a divisor of "
            f"tensor_model_parallel_size={tp_size}; choose a tensor_model_parallel_size that "
            f"divides {num_query_groups} or is a multiple of it."
        )

    # TransformerConfig.__post_init__ rejects EP without experts; the MoE layer then needs the
    # same number of whole experts on every EP rank.
    if ep_size > 1 and num_moe_experts is None:
        raise ValueError(
            f"expert_model_parallel_size={ep_size} needs a MoE model: num_moe_experts is None "
            "(dense). Set num_moe_experts or use expert_model_parallel_size=1."
        )
    if num_moe_experts is not None and num_moe_experts % ep_size:
        # Suggest only EP sizes that also pass the expert-grid rule above (1 always does).
        fits = [d for d in divisors(num_moe_experts) if world_size % (etp * d * pp_size) == 0]
        raise ValueError(
            f"num_moe_experts={num_moe_experts} is not divisible by "
            f"expert_model_parallel_size={ep_size}: every EP rank holds the same number of "
            f"whole experts. Choose an expert_model_parallel_size that divides "
            f"{num_moe_experts} and fits the expert grid (here: {fits[-6:]})."
        )

    # Context parallelism with load balancing cuts each sequence into 2 * CP chunks and gives
    # rank r chunks r and 2 * CP - 1 - r (causal attention cost is then equal on every rank).
    # megatron-core has no config-time check: its get_batch_on_this_cp_rank reshapes the
    # sequence dimension into (2 * CP, seq // (2 * CP)) and fails on the first batch.
    if seq_length is not None and cp_size > 1 and seq_length % (2 * cp_size):
        raise ValueError(
            f"seq_length={seq_length} is not divisible by 2 * context_parallel_size = "
            f"{2 * cp_size}: context parallelism splits each sequence into 2 * CP load-balanced "
            f"chunks. Pad seq_length to a multiple of {2 * cp_size} or change "
            "context_parallel_size."
        )

    return ParallelSizes(
        data_parallel_size=dp_size,
        expert_tensor_parallel_size=etp,
        expert_data_parallel_size=None
        if num_moe_experts is None
        else world_size // (etp * ep_size * pp_size),
    )
