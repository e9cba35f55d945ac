"""The layouts a search considers: every parallel layout megatron-core accepts for a model on a
world size, as :class:`Layout` values (:func:`layouts`).

The sizes are generated as divisors (of the world, of the experts, of the layers) and each
candidate is then checked by the project's own rules, the ones ``explain`` and
``runtime_config_update`` apply: ``parallel_layout.check_parallel_layout`` for the grids, heads,
query groups, experts and sequence split; ``pipeline_layout.check_pipeline_layout`` for the
pipeline split (a hybrid model's by its ``hybrid_layer_pattern``);
``parallel_layout.micro_batches_per_step`` for the batch. Nothing here restates
a rule: what they reject is not a layout.

The pipeline splits are the even split (with and without the embedding and the loss counted as
layers, ``account_for_*_in_pipeline_split``) and, where the layers do not split evenly (or the
first and last stages carry the embedding and the logits), uneven first and last stages
(``num_layers_in_first/last_pipeline_stage``) no larger than a middle stage. A custom
``pipeline_model_parallel_layout`` string is not generated: a published one is evaluated as
the published layout (:mod:`megatron.bridge.search.engine`).

Pure standard library: importing this module loads neither torch nor megatron-core.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

from megatron.bridge.search.overlap import AS_REQUESTED, OverlapChoice
from megatron.bridge.training.hybrid_pipeline import check_hybrid_layer_count, hybrid_segments
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.model_rules import fused_grouped_mlp
from megatron.bridge.training.parallel_layout import check_parallel_layout, micro_batches_per_step
from megatron.bridge.training.pipeline_layout import check_pipeline_layout
from megatron.bridge.training.validators import divisors

__all__ = [
    "RECOMPUTE",
    "SHARDING",
    "Layout",
    "PipelineSplit",
    "layouts",
    "parallel_layouts",
    "pipeline_splits",
]

Recompute = Literal["none", "selective", "full"]
Sharding = Literal["ddp", "distributed_optimizer", "megatron_fsdp"]

#: The activation recompute a search tries: none, megatron-core's default selective recompute
#: (``recompute_modules`` None: core attention), full recompute of every layer (uniform, 1).
RECOMPUTE: tuple[Recompute, ...] = ("none", "selective", "full")
#: Where the optimizer state lives: replicated (plain DDP), sharded over DP by the distributed
#: optimizer, or parameters, gradients and state sharded by Megatron-FSDP.
SHARDING: tuple[Sharding, ...] = ("distributed_optimizer", "megatron_fsdp", "ddp")


@dataclass(frozen=True, order=True)
class PipelineSplit:
    """How the layers sit on the pipeline ranks: interleaving, uneven end stages, counting."""

    vpp: int | None = None
    """Virtual stages per rank (None: no interleaving)."""
    first: int | None = None
    """``num_layers_in_first_pipeline_stage`` (None: the even split)."""
    last: int | None = None
    """``num_layers_in_last_pipeline_stage`` (None: the even split)."""
    embedding: bool = False
    """``account_for_embedding_in_pipeline_split``."""
    loss: bool = False
    """``account_for_loss_in_pipeline_split``."""

    def changes(self) -> dict[str, Any]:
        """The model fields this split sets (``RecipeSpec.changed`` keys)."""
        return {
            "model.virtual_pipeline_model_parallel_size": self.vpp,
            "model.num_layers_in_first_pipeline_stage": self.first,
            "model.num_layers_in_last_pipeline_stage": self.last,
            "model.account_for_embedding_in_pipeline_split": self.embedding,
            "model.account_for_loss_in_pipeline_split": self.loss,
            "model.pipeline_model_parallel_layout": None,
        }


@dataclass(frozen=True)
class Layout:
    """One layout of the search: the fields a search sets on the job, nothing else."""

    tp: int
    pp: int
    cp: int
    ep: int
    etp: int | None
    """Expert tensor-parallel size (None: TP, megatron-core's default; dense models)."""
    split: PipelineSplit
    micro_batch_size: int
    recompute: Recompute
    sharding: Sharding
    overlap: OverlapChoice = AS_REQUESTED
    """The overlap request it is planned with (:mod:`.overlap`; the spec fields it changes are
    :meth:`OverlapChoice.changes`, not :meth:`changes`)."""

    @property
    def grid(self) -> tuple[int, int, int, int, int | None]:
        """(TP, PP, CP, EP, ETP)."""
        return (self.tp, self.pp, self.cp, self.ep, self.etp)

    def changes(self) -> dict[str, Any]:
        """The job fields this layout sets, as ``RecipeSpec.changed`` takes them."""
        recompute: dict[str, Any] = {
            "none": {"model.recompute_granularity": None},
            "selective": {"model.recompute_granularity": "selective"},
            "full": {
                "model.recompute_granularity": "full",
                "model.recompute_method": "uniform",
                "model.recompute_num_layers": 1,
            },
        }[self.recompute]
        if self.recompute != "full":
            recompute |= {"model.recompute_method": None, "model.recompute_num_layers": None}
        recompute["model.recompute_modules"] = None
        return {
            "model.tensor_model_parallel_size": self.tp,
            "model.pipeline_model_parallel_size": self.pp,
            "model.context_parallel_size": self.cp,
            "model.expert_model_parallel_size": self.ep,
            "model.expert_tensor_parallel_size": self.etp,
            **self.split.changes(),
            "micro_batch_size": self.micro_batch_size,
            **recompute,
            "use_distributed_optimizer": self.sharding != "ddp",
            "use_megatron_fsdp": self.sharding == "megatron_fsdp",
        }


def _rejected(check: Any, **kwargs: Any) -> bool:
    """Whether the project's rule ``check`` rejects the arguments (its ValueError)."""
    try:
        check(**kwargs)
    except ValueError:
        return True
    return False


@functools.lru_cache(maxsize=4096)
def pipeline_splits(
    num_layers: int, pp: int, mtp_num_layers: int | None, hybrid_layer_pattern: str | None = None
) -> tuple[PipelineSplit, ...]:
    """The pipeline splits of ``num_layers`` decoder layers over ``pp`` ranks that
    ``check_pipeline_layout`` accepts (see the module docstring for which are generated); a
    hybrid model's ``hybrid_layer_pattern`` decides which of them its model can build."""
    vpps = [v for v in divisors(num_layers) if v > 1]
    if hybrid_layer_pattern is not None:
        # A hybrid pattern's '|' segments are its (virtual) stages: the one VPP they can give.
        segments = len(hybrid_segments(hybrid_layer_pattern))
        if segments % pp == 0 and segments // pp > 1:
            vpps.append(segments // pp)
    candidates: list[PipelineSplit] = [PipelineSplit()] if pp == 1 else []
    for vpp in () if pp == 1 else (None, *sorted(set(vpps))):
        for embedding in (False, True):
            for loss in (False, True):
                candidates.append(PipelineSplit(vpp=vpp, embedding=embedding, loss=loss))
        step = vpp or 1
        # Uneven end stages: each no larger than a middle rank's k layers, the rest split evenly.
        middle_ranks = pp - 2
        for k in range(step, num_layers + 1, step):
            rest = num_layers - middle_ranks * k
            if rest < 2 or rest > 2 * k:
                continue
            # The most balanced middle size only: a larger one moves layers off the end stages,
            # which already hold the embedding and the logits.
            pairs = {(rest // 2, rest - rest // 2), (rest - rest // 2, rest // 2)}
            pairs |= {(k, rest - k), (rest - k, k)}
            for first, last in pairs:
                if first == last == k:
                    continue  # the even split, generated above
                if 1 <= first <= k and 1 <= last <= k:
                    candidates.append(PipelineSplit(vpp=vpp, first=first, last=last))
            break
    kept = [
        s
        for s in sorted(set(candidates), key=_split_key)
        if not _rejected(
            check_pipeline_layout,
            num_layers=num_layers,
            pp_size=pp,
            vpp_size=s.vpp,
            num_layers_in_first_pipeline_stage=s.first,
            num_layers_in_last_pipeline_stage=s.last,
            account_for_embedding_in_pipeline_split=s.embedding,
            account_for_loss_in_pipeline_split=s.loss,
            mtp_num_layers=mtp_num_layers,
            hybrid_layer_pattern=hybrid_layer_pattern,
        )
    ]
    return tuple(kept)


def _split_key(split: PipelineSplit) -> tuple:
    return (split.vpp or 0, split.first or 0, split.last or 0, split.embedding, split.loss)


def grids(
    model: ModelDescription, world_size: int
) -> Iterator[tuple[int, int, int, int, int | None]]:
    """(TP, PP, CP, EP, ETP) that ``check_parallel_layout`` accepts for ``model`` on
    ``world_size`` GPUs, the pipeline split aside (checked per split)."""
    moe = model.num_moe_experts is not None
    for tp in divisors(world_size):
        for cp in divisors(world_size // tp):
            for pp in divisors(world_size // (tp * cp)):
                eps = divisors(world_size // pp) if moe else [1]
                for ep in eps:
                    # Expert TP above TP is accepted by megatron-core, but the step estimate does
                    # not price expert-TP traffic: the search would favour it for nothing. The
                    # experts' fused grouped MLP runs them without tensor parallelism
                    # (model_rules.fused_grouped_mlp; megatron-core asserts it): ETP 1 only.
                    etps = ([1] if fused_grouped_mlp(model) else sorted({1, tp})) if moe else [None]
                    for etp in etps:
                        if not _rejected(
                            check_parallel_layout,
                            world_size=world_size,
                            tp_size=tp,
                            pp_size=pp,
                            vpp_size=None,
                            cp_size=cp,
                            ep_size=ep,
                            etp_size=etp,
                            sequence_parallel=tp > 1,
                            num_attention_heads=model.num_attention_heads,
                            num_query_groups=model.num_query_groups,
                            num_moe_experts=model.num_moe_experts,
                            seq_length=model.seq_length,
                        ):
                            yield tp, pp, cp, ep, etp


def micro_batch_sizes(global_batch_size: int, dp: int, pp: int, interleaved: bool) -> list[int]:
    """The micro-batch sizes megatron-core can schedule for the global batch on DP replicas
    (``parallel_layout.micro_batches_per_step``)."""
    if global_batch_size % dp:
        return []
    return [
        mbs
        for mbs in divisors(global_batch_size // dp)
        if not _rejected(
            micro_batches_per_step,
            global_batch_size=global_batch_size,
            micro_batch_size=mbs,
            dp_size=dp,
            pp_size=pp,
            interleaved=interleaved,
        )
    ]


def layouts(
    model: ModelDescription, *, world_size: int, global_batch_size: int
) -> Iterator[Layout]:
    """Every layout of ``model`` on ``world_size`` GPUs for ``global_batch_size`` samples per
    step that the layout rules accept (parallel sizes, pipeline splits, micro-batch sizes),
    with each recompute choice (:data:`RECOMPUTE`) and optimizer sharding (:data:`SHARDING`).

    The model rules that need the whole job (recompute against the model, FP8, CUDA graphs)
    are ``check_layout``'s, applied when a layout is planned.
    """
    for first, sizes in parallel_layouts(
        model, world_size=world_size, global_batch_size=global_batch_size
    ):
        for mbs in sizes:
            for recompute in RECOMPUTE:
                for sharding in SHARDING:
                    yield replace(
                        first, micro_batch_size=mbs, recompute=recompute, sharding=sharding
                    )


def parallel_layouts(
    model: ModelDescription, *, world_size: int, global_batch_size: int
) -> Iterator[tuple[Layout, list[int]]]:
    """Each parallel layout of ``model`` (grid and pipeline split) that has a micro-batch size
    for ``global_batch_size``: the layout at its smallest micro-batch, without recompute, with
    the distributed optimizer, and the micro-batch sizes it can run, smallest first.

    ``ValueError`` for a hybrid model whose pattern disagrees with ``num_layers``: no layout
    of it is right, so none is generated."""
    if model.hybrid_layer_pattern is not None:
        check_hybrid_layer_count(model.hybrid_layer_pattern, model.num_layers)
    for tp, pp, cp, ep, etp in grids(model, world_size):
        dp = world_size // (tp * cp * pp)
        splits = pipeline_splits(
            model.num_layers, pp, model.mtp_num_layers, model.hybrid_layer_pattern
        )
        for split in splits:
            interleaved = split.vpp is not None and split.vpp > 1
            sizes = micro_batch_sizes(global_batch_size, dp, pp, interleaved)
            if not sizes:
                continue
            first = Layout(
                tp=tp,
                pp=pp,
                cp=cp,
                ep=ep,
                etp=etp,
                split=split,
                micro_batch_size=sizes[0],
                recompute="none",
                sharding="distributed_optimizer",
            )
            yield first, sizes
