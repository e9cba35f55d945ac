"""Layout checks: the job description's sizes, and the layout errors megatron-core hits at start.

:func:`check_job` checks what every plan needs (the parallel sizes are ints, the GPU trains in the
precision);
:func:`check_layout` adds the whole-world checks, which need the world size.
"""

from __future__ import annotations

from megatron.bridge.training import hardware
from megatron.bridge.training.job import JobDescription, check_limits
from megatron.bridge.training.model_rules import check_model
from megatron.bridge.training.parallel_layout import check_parallel_layout
from megatron.bridge.training.validators import check_int

__all__ = ["check_job", "check_layout"]


def check_job(job: JobDescription) -> None:
    """Raise ``ValueError`` for a parallel size that is not a positive int, or a precision the GPU
    cannot train in; ``LimitError`` (a ``ValueError``) for a size above its bound
    (``job.check_limits``), before anything is planned."""
    # ValueError for a wrong type too: the library builds job descriptions, so a bad one is a
    # bad layout value that reached it, not a programming error of the caller.
    for name in ("tp_size", "pp_size", "cp_size", "ep_size", "dp_size"):
        check_int("", name, getattr(job, name), type_error=ValueError)
    check_int(
        "",
        "virtual_pipeline_model_parallel_size",
        job.model.virtual_pipeline_model_parallel_size,
        optional=True,
        type_error=ValueError,
    )
    check_int(
        "cfg.ddp",
        "num_distributed_optimizer_instances",
        job.num_distributed_optimizer_instances,
        type_error=ValueError,
    )
    check_limits(job)
    if job.gpu is not None:
        hardware.check_precision_on_gpu(gpu=job.gpu, precision=job.compute_dtype)


def check_layout(job: JobDescription) -> None:
    """Raise ``ValueError`` for a layout megatron-core would reject when the job starts.

    Checks the whole layout: the world splits into TP x CP x PP x DP and into the expert grid,
    layers split across pipeline stages (and virtual stages), heads and query groups across TP
    ranks, experts across EP ranks, the sequence across CP ranks, the global batch into
    micro-batches the schedule runs, sequence parallelism has TP to split over, each layer's CP
    exchange is one Transformer Engine runs there, the GPU trains in the precision, and every rule
    megatron-core's ``TransformerConfig`` applies to the model's fields
    (``model_rules.check_model``: MoE biases and expert TP, recompute, CUDA graphs, ...). Needs
    the world size, so it runs where the whole layout is known: ``runtime_config_update``
    (before anything is written) and ``bridge-overlap explain``.
    """
    check_job(job)
    check_parallel_layout(
        world_size=job.world_size,
        tp_size=job.tp_size,
        pp_size=job.pp_size,
        vpp_size=job.model.virtual_pipeline_model_parallel_size,
        cp_size=job.cp_size,
        ep_size=job.ep_size,
        etp_size=job.model.expert_tensor_parallel_size,
        sequence_parallel=job.sequence_parallel,
        num_layers=job.model.num_layers,
        num_attention_heads=job.model.num_attention_heads,
        num_query_groups=job.model.num_query_groups,
        num_moe_experts=job.model.num_moe_experts,
        seq_length=job.model.seq_length,
        account_for_embedding_in_pipeline_split=job.model.account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split=job.model.account_for_loss_in_pipeline_split,
        pipeline_model_parallel_layout=job.model.pipeline_model_parallel_layout,
        num_layers_in_first_pipeline_stage=job.model.num_layers_in_first_pipeline_stage,
        num_layers_in_last_pipeline_stage=job.model.num_layers_in_last_pipeline_stage,
        mtp_num_layers=job.model.mtp_num_layers,
        hybrid_layer_pattern=job.model.hybrid_layer_pattern,
    )
    _check_optimizer_instances(job)
    _check_cp_exchange(job)
    _ = job.micro_batches  # the global batch splits and schedules (ValueError otherwise)
    # megatron-core reads "no Transformer Engine" as version 0.0.0 in its version rules.
    check_model(job.model, te_version=job.te_version if job.te_available else "0.0.0")


#: Transformer Engine's CP exchanges (attention/dot_product_attention/context_parallel.py
#: ``attn_forward_func_with_cp``, which raises ValueError for any other).
CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p")
#: The CP exchanges Transformer Engine runs a sliding window over (the same module's
#: ``attn_forward_func_with_cp`` asserts it).
_WINDOW_CP_COMM_TYPES = ("a2a", "all_gather")


def _check_cp_exchange(job: JobDescription) -> None:
    """Under CP, each layer's exchange (``cp_comm_type``) is one Transformer Engine runs, and the
    layer can run it, where core attention is Transformer Engine's ``DotProductAttention``:

    - ``attn_forward_func_with_cp`` knows :data:`CP_COMM_TYPES` only.
    - The all-to-all over heads (``AttnFuncWithCPAndQKVOA2A``, also inside "a2a+p2p") asserts
      "The number of attention heads needs to be divisible by CP size!" on the heads and the
      query groups of a TP rank.
    - An off-by-one or learnable softmax runs under CP only in FusedAttention with "a2a"
      (``get_attention_backend``, attention/dot_product_attention/utils.py: FlashAttention takes
      only the vanilla softmax, FusedAttention drops the softmax types under CP with any other
      exchange, UnfusedDotProductAttention has no CP); ``DotProductAttention`` then fails with
      "No dot product attention backend is available".
    - A layer with a sliding window (``ModelDescription.sliding_window`` on a layer that
      ``uses_window``) runs under CP only over "a2a" or "all_gather": ``attn_forward_func_with_cp``
      asserts "Context parallelism does not support sliding window attention with
      cp_comm_type=...", and ``get_attention_backend`` drops FusedAttention for it.
    """
    m = job.model
    cp = job.cp_size
    if cp <= 1 or m.experimental_attention_variant is not None:
        # An experimental variant's attention exchanges its sequence itself (megatron-core's
        # DSAttention all-gathers it); megatron-core's own rule on it is check_model's.
        return
    kinds = set(m.cp_comm_types)
    unknown = sorted(kinds - set(CP_COMM_TYPES))
    if unknown:
        raise ValueError(
            f"cp_comm_type {unknown[0]!r}: Transformer Engine's context parallelism runs "
            f"{', '.join(map(repr, CP_COMM_TYPES))}; set cp_comm_type to one of them."
        )
    if m.cp_splits_heads and m.num_attention_heads is not None:
        tp = job.tp_size
        heads, groups = m.num_attention_heads // tp, m.query_groups // tp
        if heads % cp or groups % cp:
            raise ValueError(
                f"cp_comm_type a2a with context_parallel_size={cp}: the all-to-all splits each "
                f"TP rank's {heads} attention heads and {groups} query groups over the CP ranks, "
                "and CP divides neither evenly. Use a CP size that divides both, or "
                "cp_comm_type='p2p'."
            )
    softmax = m.softmax_type
    if softmax != "vanilla" and kinds != {"a2a"}:
        others = sorted(kinds - {"a2a"})
        raise ValueError(
            f"softmax_type={softmax!r} with context_parallel_size={cp} and cp_comm_type "
            f"{others[0]!r}: Transformer Engine runs this softmax under context parallelism "
            "only in cuDNN fused attention with cp_comm_type='a2a'; no attention backend takes "
            "it otherwise. Set cp_comm_type='a2a' (on every layer), or context_parallel_size=1."
        )
    if m.sliding_window:
        windowed = [
            (i, kind)
            for i, kind in enumerate(m.cp_comm_types)
            if m.uses_window(i) and kind not in _WINDOW_CP_COMM_TYPES
        ]
        if windowed:
            first, kind = windowed[0]
            raise ValueError(
                f"cp_comm_type {kind!r} on a layer with the sliding window {m.window_size} "
                f"(layer {first + 1}, {len(windowed)} such layer(s)) with "
                f"context_parallel_size={cp}: Transformer Engine's context parallelism runs a "
                "sliding window only over 'a2a' or 'all_gather' (attn_forward_func_with_cp "
                "asserts it). Set cp_comm_type to 'a2a' or 'all_gather' on those layers, or "
                "context_parallel_size=1."
            )


def _check_optimizer_instances(job: JobDescription) -> None:
    """megatron-core's ``initialize_model_parallel`` asserts that the DP x CP ranks and the
    expert-DP ranks both split into ``num_distributed_optimizer_instances`` groups."""
    instances = job.num_distributed_optimizer_instances
    if instances == 1:
        return
    for what, ranks in (
        ("data-parallel x context-parallel", job.dp_size * job.cp_size),
        ("expert data-parallel", job.expert_data_parallel_size),
    ):
        if ranks is not None and ranks % instances:
            raise ValueError(
                f"cfg.ddp.num_distributed_optimizer_instances={instances} does not divide the "
                f"{ranks} {what} ranks: megatron-core's initialize_model_parallel asserts it. "
                "Pick a divisor of both the DP x CP and the expert-DP size."
            )
