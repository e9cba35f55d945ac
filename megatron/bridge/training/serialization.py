"""A ``ConfigContainer`` as YAML, and the resolved plan written beside it.

:func:`to_yaml` gives the container as YAML text, every section as the user wrote it (``model``,
``train``, ``optimizer``, ``ddp``, ``mixed_precision``, ``comm_overlap``, ``gpu``, ``env_vars``)
and what the recipe derived into ``env_vars`` (``derived_env``); :func:`from_yaml` reads it
back; :func:`write_run_config` writes ``config.yaml`` (the container) and ``plan.json`` (what
it resolves to: layout facts, overlap plan, launch environment) into a run directory, so a
run's results carry both. The same as the container's methods (``cfg.to_yaml(path)``,
``ConfigContainer.from_yaml(path)``, upstream Megatron-Bridge's names); ``config_codec`` says
what is written and how values are checked on the way in.

A container that ``runtime_config_update`` already resolved is written with the derived fields
and the overlap writes taken back (on copies); the precision fields mixed precision wrote stay,
as it writes the same values again. Either way the file resolves to the same plan, and a loaded
container follows a later change (another GPU, precision or layout) as the saved one would.

``from_yaml`` imports the modules the file names (``_target_``, ``_callable_``, ``_enum_``):
treat a config file like code and load only files you trust; a ``_target_`` must be a subclass
of the section's type.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from megatron.bridge.training import launch_env
from megatron.bridge.training.config_codec import FORMAT_VERSION, dump_document
from megatron.bridge.training.container import ConfigContainer
from megatron.bridge.training.env_vars import check_env_vars, user_env_vars
from megatron.bridge.training.resolve import resolve_config

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import TEMode, TEStatus

__all__ = [
    "CONFIG_FILE",
    "FORMAT_VERSION",
    "PLAN_FILE",
    "from_dict",
    "from_yaml",
    "to_dict",
    "to_yaml",
    "write_run_config",
]

CONFIG_FILE = "config.yaml"
"""Name of the container file :func:`write_run_config` writes."""

PLAN_FILE = "plan.json"
"""Name of the resolved-plan file :func:`write_run_config` writes."""


def to_dict(cfg: ConfigContainer) -> dict[str, Any]:
    """The plain-value document :func:`to_yaml` writes (``ConfigContainer.to_dict``)."""
    if not isinstance(cfg, ConfigContainer):
        raise TypeError(f"to_yaml expects a ConfigContainer, got {type(cfg).__name__}.")
    return cfg.to_dict()


def to_yaml(cfg: ConfigContainer) -> str:
    """``cfg`` as YAML text; :func:`from_yaml` reads it back. ``TypeError`` names a field that
    cannot be written (see ``config_codec``)."""
    return dump_document(to_dict(cfg))


def from_dict(doc: Mapping[str, Any], *, origin: str | None = None) -> ConfigContainer:
    """The container of a :func:`to_dict` document (``ConfigContainer.from_dict``).

    Every value is checked against its field's annotation (``value_types.check_field``) and
    ``env_vars`` by ``check_env_vars``, before anything is built. Errors name ``origin`` (the
    file, when there is one) and the dotted key: ``config.yaml: model.sequence_parallel:
    expected bool, got str 'yes'``.
    """
    return ConfigContainer.from_dict(doc, origin=origin)


def from_yaml(source: str | os.PathLike[str]) -> ConfigContainer:
    """The container of :func:`to_yaml` text, or of a file holding it.

    A path object, or a str that looks like a path (one line ending in ``.yaml``/``.yml`` or
    holding a path separator), is read as a file: ``FileNotFoundError`` naming it when there is
    none. Any other str is YAML text. Errors name the file (when there is one) and the dotted
    key (:func:`from_dict`).
    """
    return ConfigContainer.from_yaml(source)


def write_run_config(
    cfg: ConfigContainer,
    directory: str | os.PathLike[str],
    *,
    world_size: int | None = None,
    te: TEStatus | TEMode | None = "assume",
) -> tuple[Path, Path]:
    """Write ``config.yaml`` (:func:`to_yaml`) and ``plan.json`` into ``directory``.

    ``plan.json`` is what ``cfg`` resolves to on ``world_size`` GPUs (``resolve_config``, on
    copies: ``cfg`` is not changed): ``world_size``, ``data_parallel_size``, ``gpu``, ``job``
    (``JobDescription.to_dict``), ``overlap_plan`` (``OverlapPlan.to_dict``, null without
    comm_overlap), ``env_vars`` (what ``runtime_config_update`` exports for this job where the
    launcher sets nothing, as strings: the recipe's derived variables derived again for its
    layout, GPU and precision, the user's as written), ``derived_env_vars`` (the names among them
    the recipe derived; the rest are the user's) and ``launch_env`` (the launch environment the
    layout needs, each entry with its value, reason, source and note; null when the GPU is
    unknown). A variable among ``env_vars`` with which the job fails when it starts
    (``launch_env.failing_environment``) is a ``ValueError``, as at ``runtime_config_update``.
    ``te`` defaults to "assume". Both files are written only after both documents were built.
    Returns their paths.
    """
    text = to_yaml(cfg)
    resolved = resolve_config(cfg, world_size=world_size, te=te)
    launch = None
    if resolved.gpu is not None:
        launch = [
            {
                "name": e.name,
                "value": e.value,
                "reason": e.reason,
                "source": e.source,
                "note": e.note,
            }
            for e in resolved.launch_env().entries
        ]
    exported = check_env_vars(resolved.env_vars)
    failing = launch_env.failing_environment(**launch_env.launch_layout(resolved.job), env=exported)
    if failing:
        raise ValueError(
            f"cfg.env_vars: the job fails when it starts with it: {failing[0]} Fix the value in "
            "cfg.env_vars; nothing was written."
        )
    users = user_env_vars(resolved.env_vars, resolved.derived_env)
    plan = {
        "format_version": FORMAT_VERSION,
        "world_size": resolved.job.world_size,
        "data_parallel_size": resolved.data_parallel_size,
        "gpu": resolved.gpu,
        "job": resolved.job.to_dict(),
        "overlap_plan": None if resolved.plan is None else resolved.plan.to_dict(),
        "env_vars": exported,
        "derived_env_vars": sorted(name for name in exported if name not in users),
        "launch_env": launch,
    }
    plan_text = json.dumps(plan, indent=2)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    config_path, plan_path = out / CONFIG_FILE, out / PLAN_FILE
    config_path.write_text(text)
    plan_path.write_text(plan_text + "\n")
    return config_path, plan_path
