"""What ``bridge-overlap search`` prints: the JSON document of a result (:func:`document`, its
schema ``megatron/bridge/search.schema.json``) and the text (:func:`render`).

Each row names its band, its GPU count and data-parallel size beside the layout, its memory
headroom, the overlap its plan runs and the launch environment that overlap needs
(``launch_env.plan_launch_env_for`` of the row's plan, what ``explain`` prints for it)."""

from __future__ import annotations

import textwrap
from typing import Any

from megatron.bridge.search.candidate import SEARCHED_KNOBS, Candidate, knob_on
from megatron.bridge.search.engine import SearchResult
from megatron.bridge.search.rank import SIMPLICITY
from megatron.bridge.training.estimate.memory.report import gib
from megatron.bridge.training.launch_env import plan_launch_env_for

__all__ = [
    "SEARCH_SCHEMA_FILE",
    "SEARCH_SCHEMA_VERSION",
    "bands_sentence",
    "document",
    "layout_label",
    "render",
]

#: The schema's file name inside the ``megatron.bridge`` package.
SEARCH_SCHEMA_FILE = "search.schema.json"
#: Version of the ``search --json`` document; changes when a field changes meaning or goes away.
SEARCH_SCHEMA_VERSION = 2

#: What each overlap mode does, in words (``search.overlap``).
_MODE_WORDS = {
    "auto": "searched on and off",
    "on": "requested on every layout",
    "off": "off",
}

#: The overlap knobs a row names when the plan turns them on.
_SHOWN_KNOBS = (
    "tp_comm_overlap",
    "overlap_p2p_comm",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "overlap_moe_expert_parallel_comm",
)


def layout_label(candidate: Candidate) -> str:
    """One line naming the layout and the overlap choice the search made for it:
    ``TP2 PP4 VPP5 CP1 EP1 mbs1 selective dist-opt tp-overlap`` (``tp-overlap``, ``ep-overlap``:
    the plan runs TP overlap, EP all-to-all overlap)."""
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
    for knob, mark in zip(SEARCHED_KNOBS, ("tp-overlap", "ep-overlap"), strict=True):
        if knob_on(candidate.plan, knob):
            parts.append(mark)
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


def _launch_env(candidate: Candidate) -> dict[str, str]:
    """The variables the row's plan needs exported at launch."""
    plan = candidate.plan
    return plan_launch_env_for(plan.job, a2a_overlap=plan.a2a_overlap).env


def _row(candidate: Candidate, rank: int) -> dict[str, Any]:
    job = candidate.spec.job
    m = job.model
    prediction = candidate.estimate.prediction
    assert prediction is not None  # estimate_step always predicts
    return {
        "rank": rank,
        "band": candidate.band,
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
        "launch_env": _launch_env(candidate),
        "memory": {
            "total_bytes": candidate.memory.total_bytes,
            "capacity_bytes": candidate.memory.capacity_bytes,
            "headroom_bytes": candidate.memory.headroom_bytes,
            "parts": {name: value for name, value in candidate.memory.parts},
        },
    }


def bands_sentence(result: SearchResult) -> str:
    """How the rows are ordered, in words: the band width and where it comes from, and the
    simplicity order within a band (:mod:`.rank`)."""
    accuracy = result.accuracy
    if result.band_width > 0:
        source = (
            f"the step estimate's median error over {accuracy.rows} published rows of "
            f"{accuracy.description}"
        )
        width = f"Bands of {result.band_width:.1%} ({source})"
    else:
        width = (
            f"Bands of equal predictions only (no published row measures the estimate on "
            f"{accuracy.description})"
        )
    order = ", then ".join(words for words, _value in SIMPLICITY)
    return (
        f"{width}: a row within that of its band's fastest is not told apart from it. Within a "
        f"band the simpler layout comes first: {order}."
    )


def _overlap_words(result: SearchResult) -> str:
    words = f"TP overlap {_MODE_WORDS[result.tp_overlap]}"
    if result.base.job.model.moe:
        words += f", EP overlap {_MODE_WORDS[result.ep_overlap]}"
    return words


def document(result: SearchResult, *, top: int, recipe: str | None) -> dict[str, Any]:
    """The ``search --json`` document: the job searched, the counts, the best ``top`` rows and
    the published layout's row (:data:`SEARCH_SCHEMA_FILE` describes every field)."""
    job = result.base.job
    published = None
    if result.published is not None:
        rank = result.published_rank
        assert rank is not None
        published = _row(result.published, rank) | {"gap_to_top": result.published_gap}
    fastest = result.fastest
    return {
        "schema_version": SEARCH_SCHEMA_VERSION,
        "recipe": recipe,
        "gpu": job.gpu,
        "precision": result.base.precision,
        "world_sizes": list(result.world_sizes),
        "global_batch_size": result.global_batch_size,
        "counts": dict(result.counts),
        "bands": {
            "width": result.band_width,
            "accuracy": result.accuracy.to_dict(),
            "simplicity": [words for words, _value in SIMPLICITY],
        },
        "overlap_search": {"tp_comm_overlap": result.tp_overlap, "ep_overlap": result.ep_overlap},
        "fastest_tokens_per_s_per_gpu": None if fastest is None else fastest.tokens_per_s_per_gpu,
        "top": [_row(c, i + 1) for i, c in enumerate(result.ranked[:top])],
        "published": published,
        "published_note": result.published_note,
    }


def render(result: SearchResult, *, top: int, recipe: str | None) -> str:
    """The text ``search`` prints: what was searched and counted, how the rows are ordered,
    then one block per row."""
    job = result.base.job
    counts = result.counts
    sizes = ", ".join(str(w) for w in result.world_sizes)
    lines = [
        f"Search: {recipe or 'model flags'} on {sizes} x {(job.gpu or '?').upper()} "
        f"{result.base.precision}, global batch {result.global_batch_size}; "
        f"{_overlap_words(result)}",
        f"  layouts {counts['layouts']}: {counts['pruned']} pruned by their weights, "
        f"{counts['rejected']} refused by a rule, "
        + (
            f"{counts['overlap_refused']} with an EP overlap megatron-core's gate refuses, "
            if counts["overlap_refused"]
            else ""
        )
        + f"{counts['no_fit']} do not fit, "
        f"{counts['skipped']} skipped (throughput bound below the bands shown), "
        f"{counts['costed']} costed",
        textwrap.fill(bands_sentence(result), 100, initial_indent="  ", subsequent_indent="  "),
    ]
    rows = list(result.ranked[:top])
    if result.published is not None and all(c.key != result.published.key for c in rows):
        rows.append(result.published)
    envs = [_launch_env(c) for c in rows]
    # What every row exports is said once; each row names the rest.
    common = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)} if envs else {}
    if common:
        lines.append("  Launch, every row: " + " ".join(f"{k}={v}" for k, v in common.items()))
    lines.append("")
    for candidate, env in zip(rows, envs, strict=True):
        prediction = candidate.estimate.prediction
        assert prediction is not None
        mark = "  (published)" if candidate.published else ""
        spec = candidate.spec.job
        lines.append(
            f"#{result.rank_of(candidate):<3} band {candidate.band:<2} "
            f"{prediction.tokens_per_s_per_gpu:8.0f} tokens/s/GPU  {spec.world_size} GPUs "
            f"DP{spec.dp_size}: {layout_label(candidate)}{mark}"
        )
        lines.append(
            f"      memory {gib(candidate.memory.total_bytes)} of "
            f"{gib(candidate.memory.capacity_bytes)} (headroom "
            f"{gib(candidate.memory.headroom_bytes)}); step {prediction.step_seconds:.2f} s, "
            f"bubble {prediction.bubble_seconds:.2f} s, exposed communication "
            f"{prediction.exposed_seconds:.2f} s"
        )
        overlap = ", ".join(_overlap_on(candidate)) or "none"
        own = " ".join(f"{k}={v}" for k, v in env.items() if k not in common)
        lines.append(f"      overlap: {overlap}" + (f"; launch: {own}" if own else ""))
    fastest = result.fastest
    if fastest is not None and result.ranked and fastest.key != result.ranked[0].key:
        above = fastest.tokens_per_s_per_gpu / result.ranked[0].tokens_per_s_per_gpu - 1
        lines += [
            "",
            f"Top pick: the simplest of band 1. The fastest, #{result.rank_of(fastest)}, "
            f"predicts {above:.1%} more, within the estimate's error.",
        ]
    if result.published is not None:
        gap = result.published_gap or 0.0
        lines += [
            "",
            f"Published layout: rank {result.published_rank}, band {result.published_band}, "
            f"{gap:.1%} below the top pick.",
        ]
    elif result.published_note:
        lines += ["", f"Published layout not ranked: {result.published_note}"]
    return "\n".join(lines)
