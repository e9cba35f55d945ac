"""What ``bridge-overlap search`` prints: the JSON document of a result (:func:`document`, its
schema ``megatron/bridge/search.schema.json``) and the text (:func:`render`)."""

from __future__ import annotations

from typing import Any

from megatron.bridge.search.engine import Candidate, SearchResult
from megatron.bridge.training.estimate.memory.report import gib

__all__ = ["SEARCH_SCHEMA_FILE", "SEARCH_SCHEMA_VERSION", "document", "layout_label", "render"]

#: The schema's file name inside the ``megatron.bridge`` package.
SEARCH_SCHEMA_FILE = "search.schema.json"
#: Version of the ``search --json`` document; changes when a field changes meaning or goes away.
SEARCH_SCHEMA_VERSION = 1

#: The overlap knobs a row names when the plan turns them on.
_SHOWN_KNOBS = (
    "tp_comm_overlap",
    "overlap_p2p_comm",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "overlap_moe_expert_parallel_comm",
)


def layout_label(candidate: Candidate) -> str:
    """One line naming the layout: ``TP2 PP4 VPP5 CP1 EP1 mbs1 selective dist-opt``."""
    job = candidate.spec.job
    m = job.model
    parts = [f"TP{job.tp_size}", f"PP{job.pp_size}"]
    if job.vpp_size:
        parts.append(f"VPP{job.vpp_size}")
    if m.pipeline_model_parallel_layout is not None:
        parts.append("custom-layout")
    if m.num_layers_in_first_pipeline_stage is not None:
        parts.append(f"first{m.num_layers_in_first_pipeline_stage}")
    if m.num_layers_in_last_pipeline_stage is not None:
        parts.append(f"last{m.num_layers_in_last_pipeline_stage}")
    if m.account_for_embedding_in_pipeline_split:
        parts.append("+emb")
    if m.account_for_loss_in_pipeline_split:
        parts.append("+loss")
    parts += [f"CP{job.cp_size}", f"EP{job.ep_size}"]
    if m.num_moe_experts is not None:
        parts.append(f"ETP{job.etp_size}")
    parts.append(f"mbs{job.micro_batch_size}")
    recompute = m.recompute_granularity or "none"
    if recompute == "selective" and m.recompute_modules is not None:
        recompute += ":" + "+".join(m.recompute_modules)
    parts.append(recompute)
    if job.use_megatron_fsdp:
        parts.append("fsdp")
    else:
        parts.append("dist-opt" if job.use_distributed_optimizer else "ddp")
    return " ".join(parts)


def _overlap_on(candidate: Candidate) -> list[str]:
    on = []
    for knob in _SHOWN_KNOBS:
        try:
            value = candidate.plan.value(knob)
        except KeyError:
            continue
        if value:
            on.append(knob)
    return on


def _row(candidate: Candidate, rank: int) -> dict[str, Any]:
    job = candidate.spec.job
    m = job.model
    prediction = candidate.estimate.prediction
    assert prediction is not None  # estimate_step always predicts
    return {
        "rank": rank,
        "published": candidate.published,
        "label": layout_label(candidate),
        "layout": {
            "world_size": job.world_size,
            "tp": job.tp_size,
            "pp": job.pp_size,
            "vpp": job.vpp_size,
            "cp": job.cp_size,
            "ep": job.ep_size,
            "etp": job.etp_size,
            "dp": job.dp_size,
            "micro_batch_size": job.micro_batch_size,
            "num_layers_in_first_pipeline_stage": m.num_layers_in_first_pipeline_stage,
            "num_layers_in_last_pipeline_stage": m.num_layers_in_last_pipeline_stage,
            "account_for_embedding_in_pipeline_split": m.account_for_embedding_in_pipeline_split,
            "account_for_loss_in_pipeline_split": m.account_for_loss_in_pipeline_split,
            "pipeline_model_parallel_layout": (
                None
                if m.pipeline_model_parallel_layout is None
                else str(m.pipeline_model_parallel_layout)
            ),
            "recompute_granularity": m.recompute_granularity,
            "recompute_modules": (
                None if m.recompute_modules is None else list(m.recompute_modules)
            ),
            "use_distributed_optimizer": job.use_distributed_optimizer,
            "use_megatron_fsdp": job.use_megatron_fsdp,
        },
        "tokens_per_s_per_gpu": prediction.tokens_per_s_per_gpu,
        "step_seconds": prediction.step_seconds,
        "bubble_seconds": prediction.bubble_seconds,
        "exposed_seconds": prediction.exposed_seconds,
        "overlap": _overlap_on(candidate),
        "memory": {
            "total_bytes": candidate.memory.total_bytes,
            "capacity_bytes": candidate.memory.capacity_bytes,
            "headroom_bytes": candidate.memory.headroom_bytes,
            "parts": {name: value for name, value in candidate.memory.parts},
        },
    }


def document(result: SearchResult, *, top: int, recipe: str | None) -> dict[str, Any]:
    """The ``search --json`` document: the job searched, the counts, the best ``top`` rows and
    the published layout's row (:data:`SEARCH_SCHEMA_FILE` describes every field)."""
    job = result.base.job
    published = None
    if result.published is not None:
        rank = result.published_rank
        assert rank is not None
        published = _row(result.published, rank) | {"gap_to_top": result.published_gap}
    return {
        "schema_version": SEARCH_SCHEMA_VERSION,
        "recipe": recipe,
        "gpu": job.gpu,
        "precision": result.base.precision,
        "world_sizes": list(result.world_sizes),
        "global_batch_size": result.global_batch_size,
        "counts": dict(result.counts),
        "top": [_row(c, i + 1) for i, c in enumerate(result.ranked[:top])],
        "published": published,
        "published_note": result.published_note,
    }


def render(result: SearchResult, *, top: int, recipe: str | None) -> str:
    """The text ``search`` prints: what was searched and counted, then one block per row."""
    job = result.base.job
    counts = result.counts
    sizes = ", ".join(str(w) for w in result.world_sizes)
    lines = [
        f"Search: {recipe or 'model flags'} on {sizes} x {(job.gpu or '?').upper()} "
        f"{result.base.precision}, global batch {result.global_batch_size}",
        f"  layouts {counts['layouts']}: {counts['pruned']} pruned by their weights, "
        f"{counts['rejected']} refused by a rule, {counts['no_fit']} do not fit, "
        f"{counts['skipped']} skipped (throughput bound below the best), "
        f"{counts['costed']} costed",
        "",
    ]
    rows = list(result.ranked[:top])
    if result.published is not None and result.published not in rows:
        rows.append(result.published)
    for candidate in rows:
        rank = 1 + sum(
            c.tokens_per_s_per_gpu > candidate.tokens_per_s_per_gpu for c in result.ranked
        )
        prediction = candidate.estimate.prediction
        assert prediction is not None
        mark = "  (published)" if candidate.published else ""
        lines.append(
            f"#{rank:<3} {prediction.tokens_per_s_per_gpu:8.0f} tokens/s/GPU  "
            f"{layout_label(candidate)}{mark}"
        )
        overlap = ", ".join(_overlap_on(candidate)) or "none"
        lines.append(
            f"      memory {gib(candidate.memory.total_bytes)} of "
            f"{gib(candidate.memory.capacity_bytes)} (headroom "
            f"{gib(candidate.memory.headroom_bytes)}); step {prediction.step_seconds:.2f} s, "
            f"bubble {prediction.bubble_seconds:.2f} s, exposed communication "
            f"{prediction.exposed_seconds:.2f} s; overlap: {overlap}"
        )
    if result.published is not None:
        gap = result.published_gap or 0.0
        lines += ["", f"Published layout: rank {result.published_rank}, {gap:.1%} below the top."]
    elif result.published_note:
        lines += ["", f"Published layout not ranked: {result.published_note}"]
    return "\n".join(lines)
