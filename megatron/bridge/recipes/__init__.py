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

import importlib
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from megatron.bridge.training.config import ConfigContainer

__all__ = ["RECIPES", "get_recipe", "recipe_function", "recipe_layout"]

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


def recipe_layout(name: str, **overrides: Any) -> dict[str, Any]:
    """The layout of recipe ``name`` as plain values, for ``bridge-overlap explain --recipe``.

    Keys: ``tp``, ``pp``, ``vpp`` (None without interleaving), ``cp``, ``ep``, ``world_size``
    (the published GPU count), ``gpu``, ``precision``, ``seq_length``, ``micro_batch_size``,
    ``hidden_size``, ``sequence_parallel``, ``distributed_optimizer``, ``num_moe_experts`` and
    ``moe_token_dispatcher`` (None for dense models), and ``preset``: the published name of the
    userbuffers preset the recipe picked, or ``"none"``.
    """
    with warnings.catch_warnings():
        # megatron-core warns on import that TE / Apex are missing *here*; the layout describes
        # the job where they are installed, so that noise would only mislead an explain.
        warnings.filterwarnings(
            "ignore", r"(Transformer Engine and Apex are|Apex is) not installed"
        )
        # megatron-core 0.19 ships a docstring with an invalid escape; Python warns on compile.
        warnings.filterwarnings("ignore", category=SyntaxWarning)
        module, function_name = _target(name)
        cfg = getattr(module, function_name)(**overrides)
    from megatron.bridge.recipes import common

    published = module.PUBLISHED
    gpu = overrides.get("gpu", published.gpu)
    model = cfg.model
    moe = model.num_moe_experts
    return {
        "tp": model.tensor_model_parallel_size,
        "pp": model.pipeline_model_parallel_size,
        "vpp": model.virtual_pipeline_model_parallel_size,
        "cp": model.context_parallel_size,
        "ep": model.expert_model_parallel_size,
        "world_size": published.num_gpus,
        "gpu": gpu,
        "precision": common.precision_of(cfg),
        "seq_length": model.seq_length,
        "micro_batch_size": cfg.train.micro_batch_size,
        "hidden_size": model.hidden_size,
        "sequence_parallel": model.sequence_parallel,
        "distributed_optimizer": cfg.ddp.use_distributed_optimizer,
        "num_moe_experts": moe,
        "moe_token_dispatcher": model.moe_token_dispatcher_type if moe else None,
        "preset": common.picked_preset_name(cfg, gpu=gpu) or "none",
    }
