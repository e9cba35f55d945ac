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
    micro-batches the schedule runs, sequence parallelism has TP to split over, the GPU trains in
    the precision, and every rule megatron-core's
    ``TransformerConfig`` applies to the model's fields (``model_rules.check_model``: MoE biases
    and expert TP, recompute, CUDA graphs, ...). Needs the world size, so it runs where the whole
    layout is known: ``runtime_config_update`` (before anything is written) and
    ``bridge-overlap explain``.
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
    _ = job.micro_batches  # the global batch splits and schedules (ValueError otherwise)
    # megatron-core reads "no Transformer Engine" as version 0.0.0 in its version rules.
    check_model(job.model, te_version=job.te_version if job.te_available else "0.0.0")


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
