"""Whether the installed megatron-core can build a described model, read without importing it.

A job description can hold a model that the installed megatron-core has no modules for:
DeepSeek-V4's hybrid attention (``experimental_attention_variant="dsv4_hybrid"``), which
Megatron-Bridge builds through its DeepSeek-V4 provider (``models/deepseek/deepseek_v4_bridge.py``)
on a megatron-core whose ``TransformerConfig`` declares the fields of
:data:`DSV4_HYBRID_FIELDS`. Such a model is planned and costed like any other; building it is
refused with :func:`cannot_build_reason`'s sentence, which names the fields megatron-core lacks.

:func:`installed_config_fields` reads the field names of the installed megatron-core's
``TransformerConfig`` from its source (``ast``), so the plan can say so without torch; the model
builder passes the imported class's own fields instead (:func:`check_buildable`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Collection
from pathlib import Path

from megatron.bridge.training.job import ModelDescription

__all__ = [
    "DSV4_HYBRID",
    "DSV4_HYBRID_FIELDS",
    "cannot_build_reason",
    "check_buildable",
    "installed_config_fields",
]

DSV4_HYBRID = "dsv4_hybrid"
"""The attention variant name of DeepSeek-V4's hybrid attention (Megatron-Bridge's provider)."""

DSV4_HYBRID_FIELDS = (
    "o_lora_rank",
    "o_groups",
    "csa_compress_ratios",
    "csa_window_size",
    "enable_hyper_connections",
    "num_residual_streams",
    "moe_n_hash_layers",
)
"""The TransformerConfig fields Megatron-Bridge's DeepSeek-V4 provider sets for its attention,
hyper-connections and hash routing (``deepseek_v4_bridge.py`` ``provider_bridge``)."""


def _core_source(relative: str) -> Path | None:
    """A source file of the installed megatron-core, found without importing it (only the
    ``megatron`` namespace package is looked at); None when megatron-core is not installed."""
    spec = importlib.util.find_spec("megatron.core")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        source = Path(location) / relative
        if source.is_file():
            return source
    return None


@functools.cache
def installed_config_fields() -> frozenset[str]:
    """The field names the installed megatron-core's ``TransformerConfig`` declares (its class
    body's annotated names, read from ``megatron/core/transformer/transformer_config.py``);
    empty when megatron-core is not installed."""
    source = _core_source("transformer/transformer_config.py")
    if source is None:
        return frozenset()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == "TransformerConfig":
            return frozenset(
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            )
    return frozenset()


@functools.cache
def _installed_version() -> str:
    """``MAJOR.MINOR.PATCH`` of the installed megatron-core, from its ``package_info.py``
    (read, not imported: package metadata is slow to import); empty when unknown."""
    source = _core_source("package_info.py")
    if source is None:
        return ""
    parts: dict[str, int] = {}
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, int)
        ):
            parts[node.targets[0].id] = node.value.value
    if not {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return ""
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def cannot_build_reason(
    model: ModelDescription, declared: Collection[str] | None = None
) -> str | None:
    """Why megatron-core cannot build ``model``, or None when nothing stands in the way.

    ``declared``: the field names of megatron-core's ``TransformerConfig`` (default: the
    installed one's, :func:`installed_config_fields`). A model with DeepSeek-V4's hybrid
    attention needs every field of :data:`DSV4_HYBRID_FIELDS`.
    """
    if model.experimental_attention_variant != DSV4_HYBRID:
        return None
    fields = installed_config_fields() if declared is None else declared
    missing = [name for name in DSV4_HYBRID_FIELDS if name not in fields]
    if not missing:
        return None
    version = _installed_version()
    core = f"megatron-core {version}" if version else "megatron-core"
    return (
        f"{core} (installed) cannot build "
        f"experimental_attention_variant={DSV4_HYBRID!r} (DeepSeek-V4's compressed sparse "
        f"attention, hyper-connections and hash routing): its TransformerConfig has no "
        f"{', '.join(missing)}. The job is planned and costed from its description; build it "
        "with Megatron-Bridge's DeepSeek-V4 provider on a megatron-core that declares them."
    )


def check_buildable(model: ModelDescription, declared: Collection[str] | None = None) -> None:
    """``ValueError`` with :func:`cannot_build_reason`'s sentence when megatron-core cannot
    build ``model``."""
    reason = cannot_build_reason(model, declared)
    if reason is not None:
        raise ValueError(reason)
