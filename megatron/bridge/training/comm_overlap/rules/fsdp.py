"""Megatron-FSDP: what the data-parallel knobs mean when ``cfg.ddp.use_megatron_fsdp=True``.

megatron-core then wraps the model in ``distributed/fsdp/mcore_fsdp_adapter.FullyShardedDataParallel``
(Megatron-FSDP) instead of its ``DistributedDataParallel``, and the DP knobs are read there:

- ``overlap_grad_reduce`` / ``overlap_param_gather`` make Megatron-FSDP's reduce-scatter and
  all-gather asynchronous (``MegatronFSDP.start_grad_sync`` / ``start_param_sync``); it turns
  ``overlap_grad_reduce`` on itself with ``data_parallel_sharding_strategy`` ``optim_grads`` or
  ``optim_grads_params`` and ``overlap_param_gather`` with ``optim_grads_params``
  (``MegatronFSDP.__init__``), whatever the config held; with ``no_shard`` nothing is gathered;
- ``align_param_gather`` is read only by ``DistributedDataParallel``'s forward pre-hook: no effect;
- ``bucket_size`` becomes the suggested size of the buckets that hold parameters outside an FSDP
  unit (``BucketingPolicy``; with ``optim_grads_params`` each transformer layer is one unit and
  one bucket), and ``num_buckets`` is not read;
- ``overlap_param_gather_with_optimizer_step``: ``DistributedOptimizer.step_with_ready_grads``
  starts every chunk's parameter sync under Megatron-FSDP anyway, and the extra call
  ``ChainedOptimizer._step`` makes passes ``force_dispatch``, which Megatron-FSDP's
  ``start_param_sync`` ignores: no effect;
- EP all-to-all overlap with a per-layer CUDA graph (``cuda_graph_impl`` local or
  transformer_engine), and ``gradient_accumulation_fusion`` with Transformer Engine < 2.10, fail
  in ``FullyShardedDataParallel.__init__``: refused here.
"""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.rules.planner import Planner
from megatron.bridge.training.comm_overlap.te import TE_REQUIREMENTS, te_version_at_least
from megatron.bridge.training.upstream_divergence import differs_from_upstream

__all__ = ["note_megatron_fsdp"]

#: The TE_REQUIREMENTS row Megatron-FSDP's gradient-accumulation fusion reads.
_FSDP_FUSION = "Megatron-FSDP with gradient_accumulation_fusion"

#: Per-layer CUDA graph implementations (captured layer by layer, not the whole iteration).
_PER_LAYER_GRAPHS = ("local", "transformer_engine")


@differs_from_upstream(
    "Megatron-FSDP without the distributed optimizer is a warning, and each DP knob FSDP ignores "
    "or replaces a note (upstream turns the optimizer on and writes the knobs silently)"
)
def note_megatron_fsdp(planner: Planner) -> None:
    """Refuse what Megatron-FSDP fails on; say which DP decisions it reads, replaces or ignores."""
    f = planner.job
    if not f.use_megatron_fsdp:
        return
    if planner.value("overlap_moe_expert_parallel_comm") and (
        f.model.cuda_graph_impl in _PER_LAYER_GRAPHS
    ):
        raise ValueError(
            "overlap_moe_expert_parallel_comm=True with cfg.ddp.use_megatron_fsdp=True does not "
            f"run with per-layer CUDA graphs (cuda_graph_impl={f.model.cuda_graph_impl!r}): "
            "megatron-core's FullyShardedDataParallel refuses the pair. Set "
            "cfg.model.cuda_graph_impl='full_iteration' or 'none', or drop EP overlap."
        )
    minimum = TE_REQUIREMENTS[_FSDP_FUSION]
    te_version = f.te_version if f.te_available else None
    if f.model.gradient_accumulation_fusion and not te_version_at_least(te_version, minimum):
        raise ValueError(
            "cfg.ddp.use_megatron_fsdp=True with gradient_accumulation_fusion=True needs "
            f"Transformer Engine >= {minimum[0]}.{minimum[1]} (found {te_version or 'none'}): "
            "megatron-core's FullyShardedDataParallel checks it. Upgrade TE, or set "
            "cfg.model.gradient_accumulation_fusion=False."
        )
    if not f.use_distributed_optimizer:
        planner.warnings.append(
            "cfg.ddp.use_megatron_fsdp=True without the distributed optimizer: megatron-core "
            "starts Megatron-FSDP's parameter all-gather after each step only from "
            "DistributedOptimizer.step_with_ready_grads (upstream Megatron-Bridge turns the "
            "distributed optimizer on for Megatron-FSDP). Set use_distributed_optimizer=True on "
            "cfg.ddp and cfg.optimizer."
        )
    planner.notes.append(
        "Megatron-FSDP (cfg.ddp.use_megatron_fsdp=True) reads overlap_grad_reduce and "
        "overlap_param_gather as whether its reduce-scatter and all-gather run asynchronously, "
        "and turns them on itself: overlap_grad_reduce with data_parallel_sharding_strategy "
        "'optim_grads' or 'optim_grads_params', overlap_param_gather with 'optim_grads_params' "
        "('no_shard' gathers nothing). bucket_size sizes the buckets of parameters outside an "
        "FSDP unit (each transformer layer is one unit with 'optim_grads_params'); "
        "align_param_gather and cfg.ddp.num_buckets are not read."
    )
    for knob, strategies in (
        ("overlap_grad_reduce", "'optim_grads' or 'optim_grads_params'"),
        ("overlap_param_gather", "'optim_grads_params'"),
    ):
        decided = planner.decisions[knob]
        if decided.source == "user" and not decided.value:
            planner.notes.append(
                f"{knob}=False ({decided.reason}) holds under Megatron-FSDP only with "
                f"data_parallel_sharding_strategy other than {strategies}: with those, "
                f"Megatron-FSDP sets {knob}=True itself."
            )
    if planner.value("align_param_gather"):
        planner.notes.append(
            "align_param_gather=True has no effect under Megatron-FSDP: only megatron-core's "
            "DistributedDataParallel reads it."
        )
    if f.num_buckets is not None:
        planner.notes.append(
            f"cfg.ddp.num_buckets={f.num_buckets} has no effect under Megatron-FSDP, which sizes "
            "its buckets by FSDP unit and bucket_size."
        )
    if planner.value("overlap_param_gather_with_optimizer_step"):
        planner.notes.append(
            "overlap_param_gather_with_optimizer_step=True has no effect under Megatron-FSDP: "
            "every optimizer step already starts each model chunk's parameter all-gather "
            "(DistributedOptimizer.step_with_ready_grads), and the extra start_param_sync("
            "force_dispatch=True) of the first chunk is one Megatron-FSDP does not distinguish."
        )
