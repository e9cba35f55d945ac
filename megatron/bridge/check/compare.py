"""Comparing the ranks' reports: every disagreement between them, one readable line each.

Plain values only (the reports are JSON-ready dictionaries); nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SHARED_KEYS", "compare_reports"]

#: What each report must hold identically on every rank (the parameter table differs by rank).
SHARED_KEYS = ("recipe", "layout", "model", "device", "notes", "plan", "launch_env")


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where ``a`` and ``b`` first differ, as a readable path (None when equal)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}.{key}: present on one rank only".lstrip(".")
            found = _first_difference(a[key], b[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries != {len(b)}".lstrip(".")
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            label = str(index)
            if isinstance(x, Mapping) and ("knob" in x or "name" in x):
                label = str(x.get("knob", x.get("name")))
            found = _first_difference(x, y, f"{path}[{label}]")
            if found is not None:
                return found
        return None
    if a != b or type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}".lstrip(".")
    return None


def compare_reports(reports: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every disagreement between the ranks' reports, one readable line each (empty: all agree).

    Checked: every shared part (recipe, layout, model, device, notes, the plan, the launch
    environment) is the same as rank 0's; each rank holds one chunk per virtual stage, and each
    chunk's embedding / output placement is where megatron-core puts the first / last stage;
    every rank sits at its own (TP, PP, CP, DP) position and together they fill the layout;
    the ranks that hold the same pipeline chunk (TP, CP and DP peers) hold the same number of
    parameters; one copy of each chunk adds up to the model's layers.
    """
    if not reports:
        return ["no reports to compare"]
    problems: list[str] = []
    first = reports[0]
    for report in reports[1:]:
        for key in SHARED_KEYS:
            where = _first_difference(first[key], report[key])
            if where is not None:
                problems.append(
                    f"rank {report['rank']}: {key} differs from rank {first['rank']}'s at {where}"
                )

    layout = first["layout"]
    chunks_per_rank = layout["vpp"] or 1
    positions: dict[tuple[int, ...], int] = {}
    stages: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}
    for report in reports:
        rank, coords = report["rank"], report["coords"]
        position = (coords["tp"], coords["pp"], coords["cp"], coords["dp"])
        if position in positions:
            problems.append(
                f"rank {rank} and rank {positions[position]} both sit at (tp, pp, cp, dp) = "
                f"{position}"
            )
        positions[position] = rank
        held = [chunk["vp_stage"] for chunk in report["chunks"]]
        if held != list(range(chunks_per_rank)):
            problems.append(
                f"rank {rank} holds chunks {held}, expected {list(range(chunks_per_rank))}"
            )
        for chunk in report["chunks"]:
            for built, expected, what in (
                ("pre_process", "first_stage", "embedding (pre_process)"),
                ("post_process", "last_stage", "output layer (post_process)"),
            ):
                if chunk[built] != chunk[expected]:
                    problems.append(
                        f"rank {rank} chunk {chunk['vp_stage']}: {what} is {chunk[built]} but "
                        f"megatron-core's {expected} is {chunk[expected]}"
                    )
            stage = (coords["pp"], chunk["vp_stage"])
            stages.setdefault(stage, {})[rank] = (chunk["params"], chunk["layers"])

    expected_ranks = layout["world_size"]
    if len(reports) != expected_ranks:
        problems.append(f"{len(reports)} reports for a world of {expected_ranks}")
    missing = [
        (pp, vp)
        for pp in range(layout["pp"])
        for vp in range(chunks_per_rank)
        if (pp, vp) not in stages
    ]
    if missing:
        problems.append(f"no rank holds (pp rank, chunk) {missing}")
    layers = 0
    for (pp, vp), held_by in sorted(stages.items()):
        counts = {params for params, _ in held_by.values()}
        if len(counts) > 1:
            shown = ", ".join(f"rank {r}: {p}" for r, (p, _) in sorted(held_by.items()))
            problems.append(
                f"pp rank {pp} chunk {vp}: its TP/CP/DP peers hold different parameter counts "
                f"({shown})"
            )
        layers += next(iter(held_by.values()))[1]
    if not missing and layers != first["model"]["num_layers"]:
        problems.append(
            f"the chunks hold {layers} layers in all, the model has {first['model']['num_layers']}"
        )
    return problems
