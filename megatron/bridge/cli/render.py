"""The text ``explain`` prints without ``--json``: the document, the plan, the launch environment
and the step estimate, for a reader."""

from __future__ import annotations

from typing import Any

from megatron.bridge.training import launch_env
from megatron.bridge.training.comm_overlap import OverlapPlan
from megatron.bridge.training.estimate import Estimate
from megatron.bridge.training.estimate.memory import MemoryEstimate


def _render(
    doc: dict[str, Any],
    plan: OverlapPlan,
    env_plan: launch_env.LaunchEnvPlan,
    estimate: Estimate | None = None,
    memory: MemoryEstimate | None = None,
) -> str:
    lay = doc["layout"]
    domain = f"  NVLink domain {lay['nvlink_ranks']}" if lay["nvlink_ranks"] else ""
    head = (
        f"Layout: {lay['world_size']} x {(lay['gpu'] or 'GPU').upper()}  TP{lay['tp']} "
        f"PP{lay['pp']} VPP{lay['vpp'] or '-'} CP{lay['cp']} EP{lay['ep']} -> DP{lay['dp']}{domain}"
        f"  SP {'on' if lay['sequence_parallel'] else 'off'}"
        f"  dist-opt {'on' if lay['distributed_optimizer'] else 'off'}"
        f"  {lay['compute_dtype'] or 'custom quantization'} ({lay['precision']} presets)"
        f"  hidden {lay['hidden_size']} seq {lay['seq_length']} mbs {lay['micro_batch_size']}"
        f" gbs {plan.job.effective_global_batch_size or '-'}"
    )
    if lay["expert_dp"] is not None:
        head += f"\nExperts: {lay['num_moe_experts']} over EP{lay['ep']} x ETP{lay['etp']} -> expert-DP{lay['expert_dp']}"
    if doc["recipe"]:
        head = f"Recipe: {doc['recipe']}\n{head}"
    te = doc["transformer_engine"]
    state = "available" if te["available"] else "NOT available"
    detail = te["reason"] or (
        f"assumed present where the job runs, version {te['version']}"
        if te["mode"] == "assume"
        else te["version"] or "found here"
    )
    lines = [head, f"Transformer Engine: {te['mode']} ({state}; {detail})"]
    p = doc["preset"]
    if p["name"]:
        fit = {True: "matches the model", False: "does NOT match the model", None: "unused"}[
            p["matches_model"]
        ]
        lines.append(f"Userbuffers preset: {p['name']} ({p['detail']}; {fit})")
    else:
        lines.append(f"Userbuffers preset: none ({p['detail']})")
    lines.append("")
    lines.append(plan.render())
    lines.append("")
    lines.append("Launch environment (PerfEnvPlugin):")
    lines.extend(f"  {line}" for line in env_plan.explain())
    if estimate is not None:
        lines.append("")
        lines.append(
            "One step, per GPU of the busiest pipeline stage (bounds at peak, then the prediction):"
        )
        lines.extend(f"  {line}" for line in estimate.render().splitlines())
    elif doc.get("estimate_refused"):
        lines.append("")
        lines.append(f"No step estimate: {doc['estimate_refused']}")
    if memory is not None:
        lines.append("")
        lines.append("Memory per GPU at its peak, busiest pipeline rank:")
        lines.extend(f"  {line}" for line in memory.render())
    elif doc.get("memory_refused"):
        lines.append("")
        lines.append(f"No memory estimate: {doc['memory_refused']}")
    extra = [w for w in doc["warnings"] if w not in plan.warnings]
    lines.extend(f"WARNING: {w}" for w in extra)
    if memory is not None and memory.error is not None:
        lines.append(f"ERROR: {memory.error}")
    return "\n".join(lines)
