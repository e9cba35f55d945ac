"""``bridge-overlap recipes``: every available recipe with its default layout and the systems
and precisions it has published runs for, as rows (:func:`list_recipes`) and as text."""

from __future__ import annotations

from typing import Any

from megatron.bridge.cli.errors import _REJECTED
from megatron.bridge.recipes import available_recipes, recipe_spec
from megatron.bridge.utils.megatron_core_errors import megatron_core_rejection


def list_recipes() -> list[dict[str, Any]]:
    """Every available recipe with its target and, when it has a spec, its default layout and
    ``published``: the (GPU, precision) pairs of its published runs (``gpu=``/``precision=``
    pick them), each with its GPU count.

    A recipe that cannot be used (its module does not import, it fails or returns the wrong
    type) is listed with ``error`` set to why; the others have ``error`` None.
    """
    rows = []
    for name, target in sorted(available_recipes().items()):
        row: dict[str, Any] = {
            "name": name,
            "target": target,
            "layout": None,
            "published": [],
            "error": None,
        }
        try:
            spec = recipe_spec(name)
        except Exception as exc:
            rejection = megatron_core_rejection(exc)
            if rejection is None and not isinstance(exc, ValueError | TypeError):
                raise
            row["error"] = str(exc) if rejection is None else _REJECTED + rejection
            rows.append(row)
            continue
        if spec is not None:
            job = spec.job
            row["layout"] = {
                "world_size": job.world_size,
                "gpu": job.gpu,
                "precision": spec.precision,
                "tp": job.tp_size,
                "pp": job.pp_size,
                "vpp": job.vpp_size,
                "cp": job.cp_size,
                "ep": job.ep_size,
                "num_layers": job.model.num_layers,
                "hidden_size": job.model.hidden_size,
                "seq_length": job.model.seq_length,
            }
            row["published"] = [
                {
                    "gpu": run.gpu,
                    "precision": run.precision,
                    "world_size": run.changes["world_size"],
                }
                for run in spec.published
            ]
        rows.append(row)
    return rows


def _render_recipes(rows: list[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        lay = row["layout"]
        if row.get("error"):
            shape = f"BROKEN: {row['error']}"
        elif lay is None:
            shape = "builds a ConfigContainer (plan it with --world-size)"
        else:
            shape = (
                f"{lay['world_size']} x {lay['gpu'].upper()} {lay['precision']}  TP{lay['tp']} "
                f"PP{lay['pp']} VPP{lay['vpp'] or '-'} CP{lay['cp']} EP{lay['ep']}  "
                f"{lay['num_layers']} layers, hidden {lay['hidden_size']}, seq {lay['seq_length']}"
            )
        lines.append(f"{row['name']:<16} {shape}  [{row['target']}]")
        if row.get("published"):
            runs = ", ".join(
                f"{r['gpu']} {r['precision']} ({r['world_size']})" for r in row["published"]
            )
            lines.append(f"{'':<16} published runs (gpu= precision=): {runs}")
    return "\n".join(lines)
