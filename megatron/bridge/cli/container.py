"""Plan a recipe's ``ConfigContainer`` with KEY=VALUE overrides (:func:`_plan_container`).

The container is built, overridden and resolved the way ``runtime_config_update`` resolves it,
and its ``env_vars`` are checked against the plan. This is the one part of ``explain`` that
imports megatron-core (and torch): :mod:`megatron.bridge.cli.planning` imports it only when
overrides are given.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from megatron.bridge.cli.flags import FLAG_FIELDS, flag_changes, flags_spec, te_of
from megatron.bridge.recipes import change_container, get_recipe, recipe_spec
from megatron.bridge.training.comm_overlap import OverlapPlan
from megatron.bridge.training.env_vars import user_env_vars
from megatron.bridge.training.job import CLUSTER_FIELDS
from megatron.bridge.training.overrides import apply_overrides, parse_override
from megatron.bridge.training.resolve import check_launch_environment, resolve_config


def _plan_container(args: argparse.Namespace) -> OverlapPlan:
    """Plan a recipe with KEY=VALUE overrides: build its container, override, resolve it.

    The container is the one the spec with the flags applied builds (a recipe without a spec
    builds its own and takes the flags as changes), so flags mean the same with and without
    overrides.
    """
    if recipe_spec(args.recipe) is not None:
        spec = flags_spec(args)
        cfg, world = spec.build(), spec.num_gpus
    else:
        cfg = get_recipe(args.recipe)
        world = change_container(args.recipe, cfg, flag_changes(args))
    apply_overrides(cfg, args.overrides)
    _check_flags_agree(args, cfg)
    if cfg.comm_overlap is None:
        raise ValueError(_no_request_message(args.recipe, args.overrides))
    resolved = resolve_config(cfg, world_size=world, te=te_of(args))
    # The environment the job gets from the container (the launcher may add to it), checked as
    # at model-build time: a value the job fails with is refused, any other contradicting the
    # layout warns, or is refused with --strict.
    # The recipe's derived variables follow the GPU, precision and layout the overrides set.
    env = {name: str(value) for name, value in resolved.env_vars.items()}
    problems = check_launch_environment(cfg, resolved, env=env)
    args._env_problems = [f"launch environment (cfg.env_vars): {p}" for p in problems]
    # The variables the user set (not the recipe's derived ones): explain's launch environment
    # shows them as written, beside the plan's.
    args._user_env_vars = user_env_vars(resolved.env_vars, resolved.derived_env)
    return resolved.plan


#: The override keys that set the field a flag sets, beyond ``model.<field>`` (which share the
#: job description's names). ``gpu=`` and ``mixed_precision=`` are no longer overrides here:
#: ``flags.overrides_as_flags`` made them ``--gpu`` and ``--precision``, refusing a conflict.
_OVERRIDE_KEYS = {
    "micro_batch_size": ("train.micro_batch_size",),
    "global_batch_size": ("train.global_batch_size",),
    "use_distributed_optimizer": (
        "ddp.use_distributed_optimizer",
        "optimizer.use_distributed_optimizer",
    ),
    "tp_comm_overlap": ("comm_overlap.tp_comm_overlap",),
    **{name: (name,) for name in CLUSTER_FIELDS},
}


def _check_flags_agree(args: argparse.Namespace, cfg: object) -> None:
    """A flag and an override that set one field to different values: ``ValueError`` naming
    both (neither silently wins)."""
    given = {parse_override(text)[0]: text for text in args.overrides}
    changes = flag_changes(args)
    for dest, field in FLAG_FIELDS.items():
        if getattr(args, dest, None) is None or field not in changes:
            continue
        keys = (field,) if field.startswith("model.") else _OVERRIDE_KEYS.get(field, ())
        for key in keys:
            if key not in given:
                continue
            section, _, name = key.partition(".")
            value = getattr(getattr(cfg, section), name) if name else getattr(cfg, section)
            if value != changes[field]:
                flag = "--" + dest.replace("_", "-")
                raise ValueError(
                    f"{flag} {getattr(args, dest)} and the override {given[key]!r} set "
                    f"{field} to different values ({changes[field]!r} and {value!r}); give one "
                    "of them."
                )


def _no_request_message(recipe: str, overrides: Sequence[str]) -> str:
    """Why a recipe whose overrides leave it without a ``comm_overlap`` request has no plan."""
    dropped = [o for o in overrides if o.partition("=")[0].strip() == "comm_overlap"]
    cause = f"the override {dropped[-1]!r}" if dropped else "the overrides"
    return (
        f"Recipe {recipe!r}: {cause} leaves it without a comm_overlap request, so there is no "
        "overlap plan to explain. Drop that override to explain the recipe's request, or turn "
        "single overlaps off instead (e.g. comm_overlap.tp_comm_overlap=false)."
    )
