"""Expert-parallel rules: EP all-to-all overlap, delayed wgrad compute, and their CUDA-graph limits.

A torch-free mirror of megatron-core's checks on ``overlap_moe_expert_parallel_comm`` and
``delay_wgrad_compute``: a request megatron-core would reject raises ``ValueError`` naming every
failed condition and the fix.
"""

from __future__ import annotations

from typing import Literal, get_args

from megatron.bridge.training.comm_overlap.rules.planner import Planner
from megatron.bridge.training.comm_overlap.te import TE_REQUIREMENTS, te_version_at_least
from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.upstream_divergence import differs_from_upstream

__all__ = ["EPDispatcher", "decide_ep", "unused_flex_backend"]

EPDispatcher = Literal["alltoall", "flex"]
"""MoE token dispatchers that EP all-to-all overlap works with."""


@differs_from_upstream(
    "moe_flex_dispatcher_backend without the flex dispatcher is a warning (upstream says nothing "
    "at run time)"
)
def unused_flex_backend(model: ModelDescription) -> str | None:
    """The sentence saying a flex dispatcher backend is set but not used, or None.

    megatron-core reads ``moe_flex_dispatcher_backend`` only when
    ``moe_token_dispatcher_type="flex"``; setting the backend alone dispatches as before
    (upstream Megatron-Bridge lists this as a pitfall).
    """
    if not model.moe or model.moe_token_dispatcher_type == "flex":
        return None
    return (
        f"moe_flex_dispatcher_backend={model.moe_flex_dispatcher_backend!r} has no effect: the "
        f"token dispatcher is {model.moe_token_dispatcher_type!r}, and megatron-core reads the "
        "backend only with moe_token_dispatcher_type='flex'. Set the dispatcher to flex to use it."
    )


def decide_ep(planner: Planner) -> None:
    """Decide EP all-to-all overlap and delayed wgrad compute; raise where megatron-core would."""
    f, user = planner.job, planner.user
    # The default backend cannot be told apart from an untouched field; another one was set.
    default_backend = ModelDescription.moe_flex_dispatcher_backend
    if f.model.moe_flex_dispatcher_backend != default_backend:
        unused = unused_flex_backend(f.model)
        if unused is not None:
            planner.warnings.append(unused)
    ep = user.overlap_moe_expert_parallel_comm
    if ep:
        failed = [
            text
            for bad, text in (
                (f.ep_size <= 1, f"expert_model_parallel_size > 1 (got {f.ep_size})"),
                (
                    not f.model.num_moe_experts or f.model.num_moe_experts <= 1,
                    f"more than one expert (num_moe_experts={f.model.num_moe_experts})",
                ),
                (
                    f.model.token_dispatcher not in get_args(EPDispatcher),
                    f"moe_token_dispatcher_type alltoall or flex (got {f.model.token_dispatcher!r})",
                ),
                (not (f.model.bf16 or f.model.fp16), "bf16 or fp16 training"),
                (
                    # TransformerConfig checks the size is set (1 too): EP overlap runs in the
                    # combined-1F1B path, which only the interleaved pipeline schedule has.
                    f.pp_size > 1 and not f.interleaved_schedule,
                    "virtual_pipeline_model_parallel_size set when PP > 1 (1 will do)",
                ),
                (
                    f.model.recompute_granularity == "full",
                    "no full activation recompute (recompute_granularity='full')",
                ),
                (
                    f.model.recompute_method is not None,
                    f"recompute_method=None (got {f.model.recompute_method!r})",
                ),
                (
                    f.model.recompute_num_layers is not None,
                    f"recompute_num_layers=None (got {f.model.recompute_num_layers})",
                ),
                ("moe" in (f.model.recompute_modules or ()), "'moe' not in recompute_modules"),
                (f.model.moe_shared_expert_overlap, "moe_shared_expert_overlap=False"),
                (
                    f.model.mtp_num_layers not in (None, 0, 1),
                    f"mtp_num_layers None, 0 or 1 (got {f.model.mtp_num_layers})",
                ),
            )
            if bad
        ]
        if f.model.overlap_dispatch_backward_with_experts_wgrad:
            failed.append("overlap_dispatch_backward_with_experts_wgrad=False on cfg.model")
        if f.model.cuda_graph_impl == "transformer_engine":
            graphed = [m for m in ("moe", "mlp") if m in f.model.cuda_graph_modules]
            if graphed:
                failed.append(
                    f"no {' or '.join(graphed)} in cuda_graph_modules with "
                    "cuda_graph_impl='transformer_engine'"
                )
        if failed:
            raise ValueError(
                "overlap_moe_expert_parallel_comm=True needs: " + "; ".join(failed) + ". Fix "
                "these or set overlap_moe_expert_parallel_comm=False."
            )
        planner.set(
            "overlap_moe_expert_parallel_comm",
            True,
            "user",
            f"set in CommOverlapConfig; EP={f.ep_size}, {f.model.num_moe_experts} experts",
        )
        if f.interleaved_schedule and not f.interleaved:
            planner.notes.append(
                f"overlap_moe_expert_parallel_comm=True on PP={f.pp_size} with "
                "virtual_pipeline_model_parallel_size=1: megatron-core runs its interleaved "
                "schedule with one model chunk per rank, whose combined-1F1B path overlaps the "
                "all-to-alls (the non-interleaved schedule has no EP-overlap path)."
            )
    elif ep is False:
        planner.set("overlap_moe_expert_parallel_comm", False, "user", "set in CommOverlapConfig")
    else:
        planner.set("overlap_moe_expert_parallel_comm", False, "default", "off unless requested")

    if f.model.ep_overlap_early_attn_memory_release and not planner.value(
        "overlap_moe_expert_parallel_comm"
    ):
        raise ValueError(
            "ep_overlap_early_attn_memory_release=True on cfg.model needs "
            "overlap_moe_expert_parallel_comm=True: request EP overlap in CommOverlapConfig or "
            "set cfg.model.ep_overlap_early_attn_memory_release=False."
        )

    delay = user.delay_wgrad_compute
    if delay:
        if not planner.value("overlap_moe_expert_parallel_comm"):
            raise ValueError(
                "delay_wgrad_compute=True needs overlap_moe_expert_parallel_comm=True."
            )
        _check_delayed_wgrad_with_cuda_graphs(planner)
        needs_recent_te = (
            planner.value("overlap_grad_reduce") or f.model.gradient_accumulation_fusion
        )
        te_version = f.te_version if f.te_available else None
        _require_te(
            te_version,
            "delay_wgrad_compute with overlap_grad_reduce or gradient_accumulation_fusion",
            when=needs_recent_te,
            fix="",
        )
        planner.set("delay_wgrad_compute", True, "user", "set in CommOverlapConfig")
    elif delay is False:
        planner.set("delay_wgrad_compute", False, "user", "set in CommOverlapConfig")
    else:
        planner.set("delay_wgrad_compute", False, "default", "off unless requested")


def _check_delayed_wgrad_with_cuda_graphs(planner: Planner) -> None:
    f = planner.job
    te_version = f.te_version if f.te_available else None
    _require_te(
        te_version,
        "delay_wgrad_compute with cuda_graph_impl='transformer_engine'",
        when=f.model.cuda_graph_impl == "transformer_engine",
        fix=": upgrade TE, or set cuda_graph_impl='none' or delay_wgrad_compute=False",
    )
    # The per-layer graph implementations capture the delayed wgrad too when the captured
    # region holds weights whose wgrad is delayed: attention, or the router region when it
    # runs non-overlapped shared experts (megatron-core's TECudaGraphHelper condition).
    attn = "attn" in f.model.cuda_graph_modules
    shared_experts_in_router = (
        "moe_router" in f.model.cuda_graph_modules
        and f.model.moe_shared_expert_intermediate_size is not None
        and not f.model.moe_shared_expert_overlap
    )
    if f.model.cuda_graph_impl not in ("local", "transformer_engine") or not (
        attn or shared_experts_in_router
    ):
        return
    scope = "attn" if attn else "moe_router with shared experts"
    _require_te(
        te_version,
        "delay_wgrad_compute with a CUDA graph scope holding delayed weights",
        when=True,
        fix=f": upgrade TE, or drop {scope.split()[0]} from cuda_graph_modules",
        what=f"delay_wgrad_compute=True with a CUDA graph scope covering {scope}",
    )
    if not f.model.gradient_accumulation_fusion:
        raise ValueError(
            f"delay_wgrad_compute=True with a CUDA graph scope covering {scope} needs "
            "gradient_accumulation_fusion=True on cfg.model: without it the delayed wgrad "
            "accumulates into buffers whose addresses change, which a CUDA graph cannot "
            f"replay. Set cfg.model.gradient_accumulation_fusion=True or drop "
            f"{scope.split()[0]} from cuda_graph_modules."
        )
    if attn and f.model.attention_bias:
        raise ValueError(
            "delay_wgrad_compute=True with 'attn' in cuda_graph_modules does not support "
            "attention bias: set cfg.model.add_bias_linear=False and "
            "cfg.model.add_qkv_bias=False, or drop 'attn' from cuda_graph_modules."
        )


def _require_te(
    version: str | None, need: str, *, when: bool, fix: str, what: str | None = None
) -> None:
    # One refusal for every TE-version rule: the requirement's version from TE_REQUIREMENTS.
    minimum = TE_REQUIREMENTS[need]
    if when and not te_version_at_least(version, minimum):
        what = what or need.replace("delay_wgrad_compute", "delay_wgrad_compute=True", 1)
        raise ValueError(
            f"{what} needs Transformer Engine >= {minimum[0]}.{minimum[1]} (found "
            f"{version or 'none'}){fix}."
        )
