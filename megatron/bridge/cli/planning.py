"""``bridge-overlap explain``: plan the job a command line describes (:func:`explain`).

Flags, a shipped recipe, a recipe that builds a container, and KEY=VALUE overrides of a recipe's
container all end in one overlap plan, its launch environment, its step estimate and its
``--json`` document. Without overrides or a container-only recipe nothing here imports torch or
megatron-core; a recipe's container (with overrides, or a container-only recipe's) is planned
by :mod:`megatron.bridge.cli.container`, imported only then.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from megatron.bridge.cli.flags import flags_spec, overrides_as_flags, te_of
from megatron.bridge.cli.json_document import document
from megatron.bridge.cli.quiet_import import quiet_third_party_import
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.recipes.spec import RecipeSpec
from megatron.bridge.training import launch_env
from megatron.bridge.training.comm_overlap import OverlapPlan, OverlapRefusedError
from megatron.bridge.training.comm_overlap.rules.ep import unused_flex_backend
from megatron.bridge.training.env_vars import with_user_env
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.memory import MemoryEstimate, estimate_memory
from megatron.bridge.training.validators import LimitError


def _preset_info(args: argparse.Namespace, spec: RecipeSpec | None) -> dict[str, Any]:
    """Where the preset came from: --preset, an override, the recipe, or the automatic choice."""
    if args.preset == "none":
        return {"source": "none", "detail": "--preset none"}
    if args.preset not in (None, "auto"):
        return {"source": "user", "detail": f"--preset {args.preset}"}
    if any(o.startswith("comm_overlap.tp_comm_overlap_cfg=") for o in args.overrides or ()):
        return {"source": "user", "detail": "comm_overlap.tp_comm_overlap_cfg override"}
    if args.recipe:
        return {"source": "recipe", "detail": "picked by the recipe"}
    return {"source": "auto", "detail": spec.preset_choice().detail}


def explain(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], OverlapPlan, launch_env.LaunchEnvPlan]:
    """Build the explanation document, the overlap plan and the launch-environment plan."""
    overrides = getattr(args, "overrides", None) or []
    if args.recipe is not None and not args.recipe.strip():
        raise ValueError(
            f"--recipe {args.recipe!r} names no recipe; give a name (see 'bridge-overlap "
            "recipes') or 'package.module:function', or drop --recipe to explain the reference "
            "layout."
        )
    if overrides and not args.recipe:
        raise ValueError(
            f"KEY=VALUE overrides ({overrides[0]!r}, ...) apply to a recipe's container: "
            "give --recipe NAME."
        )
    # The overrides' text is checked, and gpu=/mixed_precision= become the flags they mean,
    # before a recipe is called or megatron-core imported (seconds).
    overrides_as_flags(args)
    overrides = args.overrides
    if args.plot is not None:
        _check_plot_path(args.plot)  # before planning, which can take seconds
    spec = None
    if overrides:
        # megatron-core: only for a recipe container.
        with quiet_third_party_import():
            from megatron.bridge.cli.container import _plan_container

        plan = _plan_container(args)
    elif args.recipe and (base := recipe_spec(args.recipe)) is None:
        # A container-only recipe: resolved from its container, whose env_vars are the user's.
        with quiet_third_party_import():
            from megatron.bridge.cli.container import _plan_container

        plan = _plan_container(args)
    else:
        spec = flags_spec(args, base if args.recipe else None)
        plan = spec.plan(te=te_of(args))
    # The plan's launch environment with the variables the user set in the container's
    # cfg.env_vars laid over it, as PerfEnvPlugin.from_config applies it.
    env_plan = with_user_env(
        launch_env.plan_launch_env_for(
            plan.job,
            a2a_overlap=plan.a2a_overlap,
            layernorm_sm_margin=args.layernorm_sm_margin,
            nccl_pp_comm_chunksize=args.nccl_pp_chunksize,
        ),
        getattr(args, "_user_env_vars", {}),
        layout=launch_env.launch_layout(plan.job),
        a2a_overlap=plan.a2a_overlap,
    )
    refused = None
    try:
        estimate = estimate_step(plan)
    except LimitError:
        raise  # a size above its bound is invalid input (exit 2), not a missing fact
    except ValueError as exc:  # the job lacks what the estimate needs; the document says what
        estimate, refused = None, str(exc)
    memory, memory_refused = _memory(plan)
    if memory is not None and not memory.fits and args.strict:
        raise OverlapRefusedError(memory.error)
    doc = document(
        plan, env_plan, recipe=args.recipe, te_mode=args.te, preset_info=_preset_info(args, spec)
    )
    doc["warnings"].extend(getattr(args, "_env_problems", []))
    doc["warnings"].extend(getattr(args, "_flag_notes", []))
    if memory is not None and memory.warning is not None:
        doc["warnings"].append(memory.warning)
    unused = unused_flex_backend(plan.job.model) if args.moe_flex_backend is not None else None
    if unused is not None and unused not in plan.warnings:
        doc["warnings"].append(f"--moe-flex-backend {args.moe_flex_backend}: {unused}")
    doc["estimate"] = None if estimate is None else estimate.to_dict()
    doc["estimate_refused"] = refused
    doc["memory"] = None if memory is None else {**memory.to_dict(), "error": memory.error}
    doc["memory_refused"] = memory_refused
    args._estimate = estimate
    args._memory = memory
    if args.plot is not None:
        if estimate is None:
            raise ValueError(f"--plot needs the step estimate, which was refused: {refused}")
        # The picture module (matplotlib's part) loads only for --plot.
        from megatron.bridge.training.estimate_plot import plot_step

        try:
            plot_step(estimate, args.plot, title=args.recipe)
        except (ValueError, ImportError, OSError) as exc:
            raise ValueError(f"--plot {args.plot}: {exc}") from None
    return doc, plan, env_plan


def _memory(plan: OverlapPlan) -> tuple[MemoryEstimate | None, str | None]:
    """The plan's memory per GPU, or None and why the job lacks what it needs."""
    try:
        return estimate_memory(plan), None
    except LimitError:
        raise  # a size above its bound is invalid input (exit 2)
    except ValueError as exc:
        return None, str(exc)


def _check_plot_path(path: str) -> None:
    """Refuse a ``--plot`` path whose file cannot be created, naming the flag and the fix."""
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        raise ValueError(
            f"--plot {path}: the directory {str(folder)!r} does not exist; create it or give a "
            "path in an existing directory."
        )
    if target.is_dir():
        raise ValueError(f"--plot {path}: is a directory; give a file name ending in .png or .svg.")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"--plot {path}: the directory {str(folder)!r} is not writable.")
