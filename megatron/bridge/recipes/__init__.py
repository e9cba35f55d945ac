"""Recipes and NeMo-Run launch plugins.

A recipe is a function returning a complete ``ConfigContainer`` in a published layout; every
size is a keyword override. Look one up by name::

    from megatron.bridge.recipes import get_recipe
    cfg = get_recipe("llama3_70b", gpu="b200")

Each shipped recipe module (importing one loads no torch) also has ``SPEC``, a torch-free
:class:`~megatron.bridge.recipes.spec.RecipeSpec` from which both the plan and the container
derive (its job description holds the published GPU count and GPU; ``spec(**overrides)``
applies the same overrides). The launch plugin of a recipe is
``PerfEnvPlugin.from_recipe(name)`` or ``PerfEnvPlugin.from_config(cfg, num_gpus=...)``.

Recipes of your own: name one as ``"package.module:function"`` wherever a recipe name is taken,
or register it under the ``megatron_bridge.recipes`` entry-point group of your package; the
function returns a ``RecipeSpec`` (plannable without torch) or a ``ConfigContainer``.

Kept import-light on purpose: ``import megatron.bridge.recipes`` pulls in neither NeMo-Run nor
megatron-core, and neither does planning a recipe that has a spec. Import
``megatron.bridge.recipes.run_plugins`` for ``PerfEnvPlugin`` and ``NsysPlugin`` (needs the
``run`` extra).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from megatron.bridge.recipes.spec import RecipeSpec
from megatron.bridge.training.comm_overlap import (
    PUBLISHED_PRESETS,
    OverlapPlan,
    TEStatus,
    te_status,
)
from megatron.bridge.training.job import CLUSTER_FIELDS
from megatron.bridge.training.precisions import canonical_precision
from megatron.bridge.utils.megatron_core_errors import megatron_core_rejection

if TYPE_CHECKING:
    from megatron.bridge.training.config import ConfigContainer

__all__ = [
    "ENTRY_POINT_GROUP",
    "RECIPES",
    "available_recipes",
    "change_container",
    "get_recipe",
    "plan_recipe",
    "recipe_function",
    "recipe_layout",
    "recipe_spec",
]

#: Shipped recipe name -> ``"module:function"`` of the function that builds its container.
RECIPES: Mapping[str, str] = MappingProxyType(
    {
        "deepseek_v3": "megatron.bridge.recipes.deepseek_v3:deepseek_v3",
        "deepseek_v4_flash": "megatron.bridge.recipes.deepseek_v4_flash:deepseek_v4_flash",
        "gpt3_175b": "megatron.bridge.recipes.gpt3_175b:gpt3_175b",
        "gpt_oss_120b": "megatron.bridge.recipes.gpt_oss_120b:gpt_oss_120b",
        "kimi_k2": "megatron.bridge.recipes.kimi_k2:kimi_k2",
        "llama3_8b": "megatron.bridge.recipes.llama3_8b:llama3_8b",
        "llama3_70b": "megatron.bridge.recipes.llama3_70b:llama3_70b",
        "llama31_405b": "megatron.bridge.recipes.llama31_405b:llama31_405b",
        "nemotron_3_5_lightning": (
            "megatron.bridge.recipes.nemotron_3_5_lightning:nemotron_3_5_lightning"
        ),
        "nemotron_3_nano": "megatron.bridge.recipes.nemotron_3_nano:nemotron_3_nano",
        "nemotron_3_super": "megatron.bridge.recipes.nemotron_3_super:nemotron_3_super",
        "nemotron_3_ultra": "megatron.bridge.recipes.nemotron_3_ultra:nemotron_3_ultra",
        "qwen3_235b_a22b": "megatron.bridge.recipes.qwen3_235b_a22b:qwen3_235b_a22b",
        "qwen3_30b_a3b": "megatron.bridge.recipes.qwen3_30b_a3b:qwen3_30b_a3b",
    }
)

ENTRY_POINT_GROUP = "megatron_bridge.recipes"
"""Entry-point group under which installed packages register recipes (name = "module:function")."""


def _entry_point_label(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    source = f", from {dist.name}" if dist is not None else ""
    return f"entry point {ep.name} = {ep.value!r} (group {ENTRY_POINT_GROUP}{source})"


class _Catalogue(NamedTuple):
    targets: dict[str, str]
    """Every recipe name -> its ``"module:function"`` target."""
    labels: dict[str, str]
    """Registered name -> its entry point, in words (for error messages)."""
    problems: dict[str, str]
    """Registered name -> why that name cannot be used."""
    shadowed: dict[str, str]
    """Shipped name -> the warning about an entry point that registers it again."""


def _group_may_be_registered() -> bool:
    """Whether an installed distribution may register a recipe, from a quick read of the
    ``entry_points.txt`` files of the ``*.dist-info`` / ``*.egg-info`` folders on ``sys.path``.

    True as soon as one names :data:`ENTRY_POINT_GROUP`, and for a ``sys.path`` entry that is
    not a folder (an egg or a zip, which only ``importlib.metadata`` reads).
    """
    header = f"[{ENTRY_POINT_GROUP}]"
    for entry in sys.path:
        folder = entry or "."
        if not os.path.isdir(folder):
            if os.path.exists(folder):
                return True
            continue
        try:
            names = os.listdir(folder)
        except OSError:
            return True
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(folder, name, "entry_points.txt"), encoding="utf-8") as f:
                    if header in f.read():
                        return True
            except FileNotFoundError:
                continue
            except OSError:
                return True
    return False


def _registered_entry_points() -> tuple[Any, ...]:
    """The installed entry points of :data:`ENTRY_POINT_GROUP`.

    ``importlib.metadata`` (some 50 ms to import) is read only when
    :func:`_group_may_be_registered` finds the group, so planning a shipped recipe stays fast.
    """
    if not _group_may_be_registered():
        return ()
    from importlib.metadata import entry_points

    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def _catalogue() -> _Catalogue:
    """The shipped recipes and the registered ones, with the registered names' problems.

    A registered name that shadows a shipped recipe is ignored: the shipped one keeps the name,
    and using it warns. A name registered twice with different targets is ambiguous: using it
    fails. Nothing here imports a recipe; an entry point whose target does not import fails
    when it is used (:func:`recipe_function`).
    """
    found = dict(RECIPES)
    labels: dict[str, str] = {}
    problems: dict[str, str] = {}
    shadowed: dict[str, str] = {}
    for ep in _registered_entry_points():
        label = _entry_point_label(ep)
        if ep.name in RECIPES:
            if ep.value != RECIPES[ep.name]:
                shadowed[ep.name] = (
                    f"The {label} shadows the shipped recipe {ep.name!r} and is ignored: "
                    f"{ep.name!r} is {RECIPES[ep.name]!r}. Register it under another name."
                )
            continue
        if ep.name in labels and found[ep.name] != ep.value:
            problems[ep.name] = (
                f"Recipe {ep.name!r} is registered twice with different targets: the "
                f"{labels[ep.name]} and the {label}. Uninstall one, or name the recipe by its "
                "target ('package.module:function')."
            )
        found[ep.name] = ep.value
        labels[ep.name] = label
    return _Catalogue(found, labels, problems, shadowed)


def available_recipes() -> dict[str, str]:
    """Every recipe by name: the shipped ones, then those registered under the entry-point group.

    A registered name that shadows a shipped recipe is left out (the name means the shipped
    recipe; using it warns about the entry point). A registered recipe is listed even when it
    is broken (its module does not import, or its name is registered twice with different
    targets): using it fails with the reason, and only using it.
    """
    return _catalogue().targets


def _import_target(target: str, label: str | None = None) -> Callable[..., Any]:
    """The function ``target`` names; an error message starts with ``label``."""
    label = label or f"Recipe {target!r}"
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{label}: a recipe target is 'package.module:function', got {target!r}.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{label}: cannot import {module_name!r} ({exc}).") from None
    except Exception as exc:
        if target in RECIPES.values():
            raise  # a shipped recipe module that fails to import is our bug, not the user's input
        raise ValueError(
            f"{label}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ValueError(f"{label}: {module_name} has no function {attribute!r}.")
    return function


def recipe_function(name: str) -> Callable[..., Any]:
    """The function behind a recipe name or a ``"module:function"`` target.

    ``ValueError`` for an unknown name, listing the known ones with a "did you mean", and for a
    registered recipe that cannot be used, naming its entry point and why. A shipped name that
    an entry point registers again means the shipped recipe, with a warning.
    """
    if not isinstance(name, str):
        raise ValueError(f"A recipe is named by a string, got {name!r}.")
    if ":" in name:
        return _import_target(name)
    known, labels, problems, shadowed = _catalogue()
    if name in problems:
        raise ValueError(problems[name])
    if name in shadowed:
        warnings.warn(shadowed[name], stacklevel=2)
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"Unknown recipe {name!r}.{hint} known recipes: {', '.join(sorted(known))}; or name "
            "your own as 'package.module:function'."
        )
    if name in RECIPES:
        return _import_target(known[name])
    return _import_target(known[name], f"Recipe {name!r}, the {labels[name]}")


@contextlib.contextmanager
def _quiet_megatron_import() -> Iterator[None]:
    with warnings.catch_warnings():
        # megatron-core warns on import that TE / Apex are missing *here*; a recipe describes
        # the job where they are installed, so that noise would only mislead.
        warnings.filterwarnings(
            "ignore", r"(Transformer Engine and Apex are|Apex is) not installed"
        )
        # megatron-core 0.19 ships a docstring with an invalid escape; Python warns on compile.
        warnings.filterwarnings("ignore", category=SyntaxWarning)
        yield


def _call_recipe(name: str, overrides: Mapping[str, Any]) -> RecipeSpec | ConfigContainer:
    """What recipe ``name`` returns for ``overrides``: a shipped recipe's spec, else its result.

    The result is checked once here: a recipe returns a ``RecipeSpec`` or a ``ConfigContainer``
    (``TypeError`` otherwise). An exception a recipe of the user's raises, other than a
    ``ValueError``/``TypeError`` or megatron-core refusing a config, becomes a ``ValueError``
    naming the recipe: it is a fault of that recipe, not of this package.
    """
    function = recipe_function(name)
    shipped = name in RECIPES
    if shipped:
        function = importlib.import_module(RECIPES[name].partition(":")[0]).spec
    with _quiet_megatron_import():
        try:
            result = function(**overrides)
        except (ValueError, TypeError):
            raise
        except Exception as exc:
            if shipped or megatron_core_rejection(exc) is not None:
                raise
            raise ValueError(f"Recipe {name!r} failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(result, RecipeSpec):
        return result
    # A ConfigContainer exists only once its module is imported, so looking the module up in
    # sys.modules refuses any other result without importing megatron-core.
    config = sys.modules.get("megatron.bridge.training.config")
    if config is not None and isinstance(result, config.ConfigContainer):
        return result
    raise TypeError(
        f"Recipe {name!r} returned {type(result).__name__}; a recipe returns a RecipeSpec or a "
        "ConfigContainer."
    )


def recipe_spec(name: str, **overrides: Any) -> RecipeSpec | None:
    """The torch-free spec of a recipe with ``overrides``, or None for a container-only recipe.

    A shipped recipe's spec comes from its module's ``spec`` function; a recipe of your own has
    one when its function returns a ``RecipeSpec``. ``TypeError`` when the function returns
    neither a ``RecipeSpec`` nor a ``ConfigContainer``.
    """
    result = _call_recipe(name, overrides)
    return result if isinstance(result, RecipeSpec) else None


def get_recipe(name: str, **overrides: Any) -> ConfigContainer:
    """Build recipe ``name`` with keyword ``overrides`` (``gpu``, ``precision``, ``tp_size``, ...).

    ``TypeError`` when its function returns neither a ``RecipeSpec`` nor a ``ConfigContainer``.
    """
    result = _call_recipe(name, overrides)
    if isinstance(result, RecipeSpec):
        with _quiet_megatron_import():
            return result.build()
    return result


#: Change keys a container-only recipe takes, beyond ``model.<field>``: where each lands.
_CONTAINER_CHANGES = (
    "world_size",
    "gpu",
    *CLUSTER_FIELDS,
    "micro_batch_size",
    "global_batch_size",
    "use_distributed_optimizer",
    "preset",
    "overlap",
    "tp_comm_overlap",
    "precision",
)


def plan_recipe(
    name: str,
    *,
    world_size: int | None = None,
    te: str | TEStatus = "assume",
    changes: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> OverlapPlan:
    """The overlap plan of recipe ``name``, as the job will resolve it.

    ``overrides`` are the recipe's keywords (``gpu``, ``precision``, ``tp_size``, ...);
    ``changes`` change fields by their job-description name (``model.<field>``, ``world_size``,
    ``use_distributed_optimizer``, ...) or spec field (``preset``, ``overlap``, ...), as
    :meth:`RecipeSpec.changed` takes them. A recipe with a spec is planned without torch; one
    that only builds a container is resolved like ``runtime_config_update`` does, on copies,
    and then needs ``world_size``. ``te`` is "assume" (TE is installed where the job runs) or
    "detect".
    """
    result = _call_recipe(name, overrides)
    changes = dict(changes or {})
    if world_size is not None:
        changes["world_size"] = world_size
    if isinstance(result, RecipeSpec):
        return result.changed(**changes).plan(te=te)
    world = change_container(name, result, changes)
    # megatron-core: only for a recipe that builds a container.
    from megatron.bridge.training.resolve import resolve_config

    return resolve_config(
        result, world_size=world, te=te_status(te) if isinstance(te, str) else te
    ).plan


def change_container(name: str, cfg: ConfigContainer, changes: Mapping[str, Any]) -> int:
    """Apply job changes (as :meth:`RecipeSpec.changed` takes them) to recipe ``name``'s container.

    Returns the world size, which a container does not hold and ``changes`` must give.
    """
    # megatron-core: only for a recipe that builds a container.
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    changes = dict(changes)
    world = changes.pop("world_size", None)
    if world is None:
        raise ValueError(
            f"Recipe {name!r} returns a ConfigContainer, which does not say its GPU count: "
            "pass the world size (--world-size)."
        )
    if cfg.comm_overlap is None:
        raise ValueError(f"Recipe {name!r} has no comm_overlap request: there is no plan.")
    request: dict[str, Any] = dict(changes.pop("overlap", ()))
    for key, value in changes.items():
        if key.startswith("model."):
            setattr(cfg.model, key.removeprefix("model."), value)
        elif key == "use_distributed_optimizer":
            cfg.ddp.use_distributed_optimizer = value
            cfg.optimizer.use_distributed_optimizer = value
        elif key in ("micro_batch_size", "global_batch_size"):
            setattr(cfg.train, key, value)
        elif key == "gpu" or key in CLUSTER_FIELDS:
            setattr(cfg, key, value)
        elif key == "precision":
            cfg.mixed_precision = get_mixed_precision_config(canonical_precision(value))
        elif key == "preset":
            if value != "auto":
                request["tp_comm_overlap_cfg"] = (
                    None if value == "none" else PUBLISHED_PRESETS[value]
                )
        elif key == "tp_comm_overlap":
            request[key] = value
        else:
            raise TypeError(
                f"Recipe {name!r} returns a ConfigContainer: it takes model.<field> and "
                f"{list(_CONTAINER_CHANGES)}, not {key!r}."
            )
    if request:
        cfg.comm_overlap = dataclasses.replace(cfg.comm_overlap, **request)
    return world


def recipe_layout(name: str, **overrides: Any) -> dict[str, Any]:
    """The resolved layout of recipe ``name`` as plain values (what ``explain --recipe`` shows).

    Read from the plan the recipe resolves to (:func:`plan_recipe`), not re-derived. Keys: ``tp``,
    ``pp``, ``vpp`` (None without interleaving), ``cp``, ``ep``, ``dp``, ``world_size`` (the
    published GPU count), ``gpu``, ``precision``, ``seq_length``, ``micro_batch_size``,
    ``hidden_size``, ``sequence_parallel``, ``distributed_optimizer``, ``num_moe_experts`` and
    ``moe_token_dispatcher`` (None for dense models), and ``preset``: the published name of the
    userbuffers preset in use, or ``"none"``.
    """
    plan = plan_recipe(name, **overrides)
    f = plan.job
    return {
        "tp": f.tp_size,
        "pp": f.pp_size,
        "vpp": f.vpp_size,
        "cp": f.cp_size,
        "ep": f.ep_size,
        "dp": f.dp_size,
        "world_size": f.world_size,
        "gpu": f.gpu,
        "precision": f.precision,
        "seq_length": f.model.seq_length,
        "micro_batch_size": f.micro_batch_size,
        "hidden_size": f.model.hidden_size,
        "sequence_parallel": f.sequence_parallel,
        "distributed_optimizer": f.use_distributed_optimizer,
        "num_moe_experts": f.model.num_moe_experts,
        "moe_token_dispatcher": f.model.token_dispatcher,
        "preset": plan.preset_name or "none",
    }
