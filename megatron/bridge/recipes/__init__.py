"""Recipes and NeMo-Run launch plugins.

A recipe is a function returning a complete ``ConfigContainer`` in a published layout; every
size is a keyword override. Look one up by name::

    from megatron.bridge.recipes import get_recipe
    cfg = get_recipe("llama3_70b", gpu="b200")

Each recipe module also defines ``PUBLISHED`` (the GPU count and GPU model of the published
run) and ``perf_env_plugin(cfg, num_gpus=..., gpu=...)``, the NeMo-Run ``PerfEnvPlugin`` built
from the config so the launch does not repeat the parallel sizes.

Kept import-light on purpose: ``import megatron.bridge.recipes`` pulls in neither NeMo-Run nor
megatron-core; a recipe module is imported when it is asked for. Import
``megatron.bridge.recipes.run_plugins`` for ``PerfEnvPlugin`` and ``NsysPlugin`` (needs the
``run`` extra).
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from megatron.bridge.training.config import ConfigContainer, ResolvedConfig

__all__ = [
    "RECIPES",
    "get_recipe",
    "plan_recipe",
    "recipe_function",
    "recipe_layout",
    "recipe_published",
]

#: Recipe name -> ``"module:function"`` of the function that builds it.
RECIPES: Mapping[str, str] = MappingProxyType(
    {
        "gpt3_175b": "megatron.bridge.recipes.gpt3_175b:gpt3_175b",
        "llama3_70b": "megatron.bridge.recipes.llama3_70b:llama3_70b",
        "llama31_405b": "megatron.bridge.recipes.llama31_405b:llama31_405b",
    }
)


def _target(name: str) -> tuple[Any, str]:
    if not isinstance(name, str) or name not in RECIPES:
        raise ValueError(f"Unknown recipe {name!r}; known recipes: {', '.join(sorted(RECIPES))}.")
    module_name, function_name = RECIPES[name].split(":")
    return importlib.import_module(module_name), function_name


def recipe_function(name: str) -> Any:
    """The function that builds recipe ``name``; ``ValueError`` listing the names otherwise."""
    module, function_name = _target(name)
    return getattr(module, function_name)


def get_recipe(name: str, **overrides: Any) -> ConfigContainer:
    """Build recipe ``name`` with keyword ``overrides`` (``gpu``, ``precision``, ``tp_size``, ...)."""
    return recipe_function(name)(**overrides)


def recipe_published(name: str) -> Any:
    """The ``PUBLISHED`` run (GPU count and GPU model) of recipe ``name``."""
    module, _ = _target(name)
    return module.PUBLISHED


def plan_recipe(
    name: str,
    *,
    world_size: int | None = None,
    te: str = "assume",
    model_fields: Mapping[str, Any] | None = None,
    distributed_optimizer: bool | None = None,
    request_fields: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> ResolvedConfig:
    """Build recipe ``name`` and resolve it as the job will at model-build time, without writing.

    ``overrides`` are the recipe's keywords (``gpu``, ``precision``, ``tp_size``, ...);
    ``model_fields`` are then set on ``cfg.model`` (megatron-core field names),
    ``distributed_optimizer`` on both ``cfg.ddp`` and ``cfg.optimizer``, and ``request_fields``
    on the recipe's ``CommOverlapConfig``. ``world_size`` defaults to the published GPU count;
    ``te`` is ``"assume"`` (TE is installed where the job runs) or ``"detect"``.
    """
    with warnings.catch_warnings():
        # megatron-core warns on import that TE / Apex are missing *here*; the plan describes
        # the job where they are installed, so that noise would only mislead.
        warnings.filterwarnings(
            "ignore", r"(Transformer Engine and Apex are|Apex is) not installed"
        )
        # megatron-core 0.19 ships a docstring with an invalid escape; Python warns on compile.
        warnings.filterwarnings("ignore", category=SyntaxWarning)
        from megatron.bridge.training.comm_overlap import te_status
        from megatron.bridge.training.config import resolve_config

        module, function_name = _target(name)
        try:
            cfg = getattr(module, function_name)(**overrides)
        except TypeError as exc:  # a keyword this recipe does not take
            raise ValueError(f"recipe {name}: {exc}") from None
    for field, value in (model_fields or {}).items():
        setattr(cfg.model, field, value)
    if distributed_optimizer is not None:
        cfg.ddp.use_distributed_optimizer = distributed_optimizer
        cfg.optimizer.use_distributed_optimizer = distributed_optimizer
    if request_fields:
        if cfg.comm_overlap is None:
            raise ValueError(f"recipe {name} has no comm_overlap request to change.")
        cfg.comm_overlap = dataclasses.replace(cfg.comm_overlap, **request_fields)
    world = module.PUBLISHED.num_gpus if world_size is None else world_size
    return resolve_config(cfg, world_size=world, te=te_status(te))


def recipe_layout(name: str, **overrides: Any) -> dict[str, Any]:
    """The resolved layout of recipe ``name`` as plain values (what ``explain --recipe`` shows).

    Read from the plan the recipe resolves to (``plan_recipe``), not re-derived. Keys: ``tp``,
    ``pp``, ``vpp`` (None without interleaving), ``cp``, ``ep``, ``dp``, ``world_size`` (the
    published GPU count), ``gpu``, ``precision``, ``seq_length``, ``micro_batch_size``,
    ``hidden_size``, ``sequence_parallel``, ``distributed_optimizer``, ``num_moe_experts`` and
    ``moe_token_dispatcher`` (None for dense models), and ``preset``: the published name of the
    userbuffers preset in use, or ``"none"``.
    """
    from megatron.bridge.training.userbuffers import published_name_for

    resolved = plan_recipe(name, **overrides)
    f = resolved.facts
    precision = "fp8" if f.fp8 else "bf16"
    plan = resolved.plan
    preset = None
    if plan is not None and plan.value("tp_comm_overlap"):
        preset = published_name_for(
            plan.preset_names,
            gpu=f.gpu,
            precision=precision,
            hidden_size=f.hidden_size,
            tp_size=f.tp_size,
        )
    return {
        "tp": f.tp_size,
        "pp": f.pp_size,
        "vpp": f.vpp_size,
        "cp": f.cp_size,
        "ep": f.ep_size,
        "dp": f.dp_size,
        "world_size": f.world_size,
        "gpu": f.gpu,
        "precision": precision,
        "seq_length": f.seq_length,
        "micro_batch_size": f.micro_batch_size,
        "hidden_size": f.hidden_size,
        "sequence_parallel": f.sequence_parallel,
        "distributed_optimizer": f.use_distributed_optimizer,
        "num_moe_experts": f.num_moe_experts,
        "moe_token_dispatcher": f.moe_token_dispatcher_type,
        "preset": preset or "none",
    }
