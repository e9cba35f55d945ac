"""The check's report as text: rank 0's document rendered for a terminal, errors by rank.

:func:`_error_lines` groups the failed outcomes by error (``ranks 0-3: ValueError: ...``);
:func:`_render` prints the layout, model, notes, plan, launch environment, the table of every
rank's chunks, the verdict and, on CUDA, the step timings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from megatron.bridge.check.cuda import CUDA_STEPS
from megatron.bridge.check.layout import Layout


def _ranks_text(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _error_lines(outcomes: Sequence[Mapping[str, Any]]) -> list[str]:
    by_error: dict[str, list[int]] = {}
    for outcome in outcomes:
        if not outcome["ok"]:
            by_error.setdefault(outcome["error"], []).append(outcome["rank"])
    return [f"{_ranks_text(ranks)}: {error}" for error, ranks in by_error.items()]


def _render(document: Mapping[str, Any], plan_text: str | None) -> str:
    lines = [f"bridge-overlap check: recipe {document['recipe']}, world {document['world_size']}"]
    if document["errors"]:
        lines.append("ERROR:")
        lines += [f"  {line}" for line in document["errors"]]
        lines.append(f"exit code {document['exit_code']}")
        return "\n".join(lines)
    first = document["reports"][0]
    layout = Layout(**{k: v for k, v in first["layout"].items() if k != "world_size"})
    model = first["model"]
    lines += [
        f"layout: {layout.describe()} on {first['device']} ({document['backend']}); planned "
        f"for {first['recipe']['gpu'] or 'no GPU'} in {first['recipe']['precision']}",
        f"model: {model['num_layers']} layer{'' if model['num_layers'] == 1 else 's'}, hidden "
        f"{model['hidden_size']}, "
        f"{model['num_attention_heads']} heads, seq {model['seq_length']}, vocab "
        f"{model['vocab_size']}, {model['layer_spec']} layer spec, sequence parallel "
        f"{'on' if model['sequence_parallel'] else 'off'}",
    ]
    if first["notes"]:
        lines.append("notes:")
        lines += [f"  - {note}" for note in first["notes"]]
    lines += ["", "Overlap plan:", plan_text or "", "", "Launch environment:"]
    for entry in first["launch_env"]:
        shown = (
            f"{entry['name']}={entry['value']}"
            if entry["value"] is not None
            else (f"{entry['name']} (not set)")
        )
        lines.append(f"  {shown}  # {entry['reason']}")
    lines += ["", "Parameters per rank:"]
    header = (
        "rank",
        "tp",
        "pp",
        "cp",
        "dp",
        "chunk",
        "embed",
        "output",
        "layers",
        "params",
        "plan",
    )
    rows = [header]
    for report in document["reports"]:
        c = report["coords"]
        for chunk in report["chunks"]:
            rows.append(
                (
                    str(report["rank"]),
                    str(c["tp"]),
                    str(c["pp"]),
                    str(c["cp"]),
                    str(c["dp"]),
                    str(chunk["vp_stage"]),
                    "yes" if chunk["pre_process"] else "-",
                    "yes" if chunk["post_process"] else "-",
                    str(chunk["layers"]),
                    f"{chunk['params']:,}",
                    _digest(report["plan"]),
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        lines.append("  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    lines.append("")
    if document["disagreements"]:
        lines.append(f"DISAGREEMENT between the {document['world_size']} ranks:")
        lines += [f"  - {problem}" for problem in document["disagreements"]]
    else:
        who = (
            f"All {document['world_size']} ranks agree"
            if document["world_size"] > 1
            else ("The one rank is consistent")
        )
        lines.append(
            f"{who} on the layout, the overlap plan and the launch environment; every chunk is "
            "built where megatron-core places it."
        )
    timings = document.get("cuda_timings")
    if timings:
        planned, off = timings["planned_s"], timings["all_off_s"]
        lines.append(
            f"Step time (slowest rank, mean of {CUDA_STEPS - 1} steps): overlap as planned "
            f"{planned * 1e3:.1f} ms, all overlap off {off * 1e3:.1f} ms "
            f"({off / planned:.2f}x)."
        )
    lines.append(f"exit code {document['exit_code']}")
    return "\n".join(lines)


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
