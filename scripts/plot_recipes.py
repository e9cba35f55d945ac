"""Draw one training step of every shipped recipe, at its published layout.

Writes ``docs/training/img/<recipe>_step.png`` (the step with the plan's overlap and with
every overlap off, lower-bound times) and prints each recipe's estimate table::

    uv run python scripts/plot_recipes.py [--out DIR] [--svg]

Needs the ``plot`` extra (matplotlib); plans without torch.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from megatron.bridge.recipes import RECIPES
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate_plot import plot_step

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Plot every shipped recipe; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "training" / "img")
    parser.add_argument("--svg", action="store_true", help="write SVG instead of PNG")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, target in RECIPES.items():
        spec = importlib.import_module(target.split(":")[0]).SPEC
        plan = spec.plan()
        estimate = estimate_step(plan)
        path = args.out / f"{name}_step.{'svg' if args.svg else 'png'}"
        f = plan.job
        layout = f"TP{f.tp_size} PP{f.pp_size}" + (f" VPP{f.vpp_size}" if f.vpp_size else "")
        layout += f" CP{f.cp_size} DP{f.dp_size}, {f.world_size} x {spec.gpu}, {spec.precision}"
        plot_step(estimate, path, title=f"{name}: {layout}")
        print(
            f"== {name} ({layout}) -> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
        )
        print(estimate.render())
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
