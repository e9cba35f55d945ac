"""The ``explain --json`` document of a plan (:func:`document`) and its layout version
(:data:`JSON_SCHEMA_VERSION`); its JSON Schema is ``megatron/bridge/explain.schema.json``."""

from __future__ import annotations

from typing import Any

from megatron.bridge.training import launch_env
from megatron.bridge.training.comm_overlap import OverlapPlan
from megatron.bridge.training.userbuffers import preset_fits_model

#: Version of the ``--json`` document layout; bumped when a key changes meaning or goes away.
JSON_SCHEMA_VERSION = 2


def document(
    plan: OverlapPlan,
    env_plan: launch_env.LaunchEnvPlan,
    *,
    recipe: str | None,
    te_mode: str,
    preset_info: dict[str, Any],
) -> dict[str, Any]:
    """The ``--json`` document of a plan (its JSON Schema is ``explain.schema.json`` here)."""
    f = plan.job
    on = bool(plan.value("tp_comm_overlap"))
    name = plan.preset_name
    matches = None
    if on and plan.preset_names:
        matches = preset_fits_model(
            plan.preset_names,
            hidden_size=f.model.hidden_size,
            tp_size=f.tp_size,
            precision=f.precision,
            gpu=f.gpu,
        )
    elif on and plan.value("tp_comm_overlap_cfg") is not None:
        preset_info = {**preset_info, "detail": "a custom userbuffers config"}
    if on and plan.value("tp_comm_overlap_cfg") is None and preset_info["source"] == "recipe":
        preset_info = {**preset_info, "detail": "the recipe found no published preset: TE defaults"}
    if not on:
        preset_info = {**preset_info, "detail": "TP overlap is off: no preset"}
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "recipe": recipe,
        "layout": {
            "world_size": f.world_size,
            "tp": f.tp_size,
            "pp": f.pp_size,
            "vpp": f.vpp_size,
            "cp": f.cp_size,
            "ep": f.ep_size,
            "etp": f.etp_size,
            "dp": f.dp_size,
            "expert_dp": f.expert_data_parallel_size,
            "sequence_parallel": f.sequence_parallel,
            "distributed_optimizer": f.use_distributed_optimizer,
            "gpu": f.gpu,
            "nvlink_ranks": f.nvlink_ranks,
            "precision": f.precision,
            "compute_dtype": f.compute_dtype,
            "num_layers": f.model.num_layers,
            "hidden_size": f.model.hidden_size,
            "num_attention_heads": f.model.num_attention_heads,
            "num_query_groups": f.model.num_query_groups,
            "num_moe_experts": f.model.num_moe_experts,
            "seq_length": f.model.seq_length,
            "micro_batch_size": f.micro_batch_size,
        },
        "transformer_engine": {
            "mode": te_mode,
            "available": f.te_available,
            "version": f.te_version,
            "reason": f.te_reason,
        },
        "preset": {"name": name, **preset_info, "matches_model": matches},
        "overlap": plan.to_dict(),
        "launch_env": [
            {
                "name": e.name,
                "value": e.value,
                "reason": e.reason,
                "source": e.source,
                "note": e.note,
            }
            for e in env_plan.entries
        ],
        "warnings": list(plan.warnings),
    }
