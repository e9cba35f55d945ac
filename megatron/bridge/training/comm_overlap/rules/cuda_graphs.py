"""CUDA graphs together with each overlap: what megatron-core runs, and what the plan says.

The combinations megatron-core refuses are refused where their overlap is decided: EP all-to-all
overlap with ``moe``/``mlp`` captured by Transformer Engine graphs and delayed wgrad compute with
graphs on an older TE (``ep``), EP overlap with per-layer graphs under Megatron-FSDP (``fsdp``),
and the graph/recompute rules of ``TransformerConfig.__post_init__`` (``model_rules``). The rest
run, and this module says what the run depends on:

- TP comm overlap, p2p overlap, gradient-reduce overlap: no rule reads CUDA graphs with them
  (upstream's Llama-3 recipes run TP overlap with Transformer Engine graphs);
- parameter-gather overlap with Transformer Engine graphs: a captured layer does not run DDP's
  forward pre-hook, so megatron-core's ``TECudaGraphHelper.cuda_graph_set_manual_hooks`` puts
  the all-gather waits on the graphed layers; the training loop installs them after capture;
- EP overlap with Transformer Engine graphs: ``TECudaGraphHelper`` captures in the EP-overlap
  schedule's order, and with delayed wgrad compute whose weights sit in a captured scope
  (``attn``, or ``moe_router`` with non-overlapped shared experts) the wgrad in graphs of its own;
- any Transformer Engine graph: ``TECudaGraphHelper.__init__`` refuses
  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` unless ``NCCL_GRAPH_REGISTER=0``, a launch
  setting the plan can only name.
"""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.rules.planner import Planner

__all__ = ["note_cuda_graphs"]


def note_cuda_graphs(planner: Planner) -> None:
    """Add the notes CUDA graphs bring to the overlaps that run with them."""
    f = planner.job
    if f.model.cuda_graph_impl != "transformer_engine":
        return
    modules = f.model.cuda_graph_modules
    scope = f"cuda_graph_modules={list(modules)}" if modules else "the whole layer"
    planner.notes.append(
        f"Transformer Engine CUDA graphs ({scope}): megatron-core's TECudaGraphHelper refuses "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless NCCL_GRAPH_REGISTER=0 is set "
        "too; set both on the launcher, or neither."
    )
    if planner.value("overlap_param_gather") and f.megatron_ddp and not f.use_megatron_fsdp:
        planner.notes.append(
            "overlap_param_gather with Transformer Engine CUDA graphs: a captured layer skips "
            "DDP's forward pre-hook, so the training loop must install megatron-core's manual "
            "hooks after capture (TECudaGraphHelper.cuda_graph_set_manual_hooks; Megatron-LM's "
            "and upstream Megatron-Bridge's loops do) or the graphed layers read parameters "
            "before their all-gather finished."
        )
    if planner.value("overlap_moe_expert_parallel_comm"):
        delayed_in_graph = planner.value("delay_wgrad_compute") and (
            "attn" in modules
            or (
                "moe_router" in modules
                and f.model.moe_shared_expert_intermediate_size is not None
                and not f.model.moe_shared_expert_overlap
            )
        )
        planner.notes.append(
            "EP all-to-all overlap with Transformer Engine CUDA graphs: megatron-core captures "
            "each layer in the EP-overlap schedule's order (TECudaGraphHelper)"
            + (
                ", and the delayed weight gradients of the captured scopes in graphs of their own."
                if delayed_in_graph
                else "."
            )
        )
