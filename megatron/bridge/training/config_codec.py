"""A ``ConfigContainer``'s sections as a plain document and back, and YAML in and out.

The codec ``ConfigContainer.to_dict`` / ``from_dict`` / ``to_yaml`` / ``from_yaml`` (and the
functions of ``serialization``) run. It never imports the container: the container hands it
its sections and their classes.

What is written is what round-trips, nothing else:

- plain values (None, bool, int, float, str) and lists as they are; tuples as ``{_tuple_: [...]}``;
- ``torch.dtype`` by name: ``{_dtype_: bfloat16}``;
- enums by class and member: ``{_enum_: "module:Class", name: MEMBER}``;
- functions and classes by import path: ``{_callable_: "module:qualname"}``, only when that
  path imports back to the very same object (``torch.nn.functional:gelu``); a lambda, a
  ``functools.partial`` or a bound method is refused with ``TypeError`` naming the field (set
  it in code after ``from_yaml``);
- each dataclass section as ``_target_: "module:Class"`` plus its init fields, so a provider
  subclass comes back as itself;
- ``comm_overlap.tp_comm_overlap_cfg``: a published userbuffers preset by its NAME, a custom
  preset as its GEMM -> knobs mapping (the layout ``load_tp_overlap_cfg`` reads), a file path
  as the path;
- ``derived_env``: what the recipe derived into ``env_vars`` and for which GPU and precision
  (``DerivedEnv``), so that a loaded container re-derives those variables for a changed job
  as the container it was saved from would. (The preset a recipe chose automatically is named
  by ``comm_overlap.preset_chosen_by``, a field, and is chosen again the same way.)

Anything else is refused with ``TypeError`` naming the field. Reading checks every value
against its field's annotation (``value_types.check_field``) and ``env_vars`` with
``check_env_vars``; an error names the file and the dotted key (``config.yaml:
model.sequence_parallel: expected bool, got str 'yes'``). A key given twice in one mapping is
refused too.

Reading imports the modules the file names (``_target_``, ``_callable_``, ``_enum_``): treat a
config file like code and load only files you trust; a ``_target_`` must be a subclass of the
section's type.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import enum
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from megatron.bridge.training import hardware, write_record, yaml_loader
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.env_vars import DerivedEnv, check_env_vars
from megatron.bridge.training.job import CLUSTER_FIELDS, check_cluster_field
from megatron.bridge.training.mixed_precision import (
    MixedPrecisionConfig,
    get_mixed_precision_config,
)
from megatron.bridge.training.userbuffers import (
    GEMM_NAMES,
    PUBLISHED_PRESETS,
    TransformerLayerTPOverlapCfg,
    preset_names_of,
)
from megatron.bridge.training.userbuffers_file import load_tp_overlap_cfg
from megatron.bridge.training.value_types import (
    ConfigValueError,
    check_field,
    check_value,
    import_object,
)
from megatron.bridge.training.yaml_loader import YamlLoader

__all__ = [
    "FORMAT_VERSION",
    "SECTIONS",
    "callable_path",
    "decode_container",
    "dump_document",
    "encode_container",
    "read_document",
]

FORMAT_VERSION = 1
"""Version of the YAML layout; bumped when a key changes meaning."""

SECTIONS = ("model", "train", "optimizer", "ddp")
"""The container's dataclass sections written field by field (``_target_`` plus init fields)."""

_TOP_KEYS = (
    "format_version",
    *SECTIONS,
    "mixed_precision",
    "comm_overlap",
    "gpu",
    *CLUSTER_FIELDS,
    "env_vars",
    "derived_env",
)
_TAGS = ("_dtype_", "_enum_", "_callable_", "_tuple_")


# --------------------------------------------------------------------------- values


def callable_path(fn: Any) -> str | None:
    """``"module:qualname"`` that imports back to ``fn`` itself, or None when there is none.

    Tries ``torch.nn.functional`` and ``torch`` first (torch's C functions name private modules
    such as ``torch._C._nn``), then the object's own module.
    """
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str) or "<" in qualname:  # lambdas, locals
        return None
    candidates = ["torch.nn.functional", "torch", getattr(fn, "__module__", None)]
    for module_name in candidates:
        if not module_name:
            continue
        try:
            if import_object(f"{module_name}:{qualname}", "") is fn:
                return f"{module_name}:{qualname}"
        except ValueError:
            continue
    return None


def _encode(value: Any, where: str) -> Any:
    import torch

    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.dtype):
        return {"_dtype_": str(value).removeprefix("torch.")}
    if isinstance(value, enum.Enum):
        cls = type(value)
        return {"_enum_": f"{cls.__module__}:{cls.__qualname__}", "name": value.name}
    if isinstance(value, list):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"_tuple_": [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: key {k!r} is not a str; YAML keys here must be.")
            out[k] = _encode(v, f"{where}.{k}")
        return out
    if callable(value):
        path = callable_path(value)
        if path is None:
            raise TypeError(
                f"{where} = {value!r} cannot be written to YAML: only functions and classes "
                "importable as 'module:qualname' can (not lambdas, functools.partial or bound "
                "methods). Set it in code after from_yaml."
            )
        return {"_callable_": path}
    raise TypeError(
        f"{where} = {type(value).__name__} ({value!r:.80}) cannot be written to YAML; only "
        "plain values, dtypes, enums and importable functions can. Set it in code after "
        "from_yaml."
    )


def _decode(value: Any, where: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, Mapping):
        return value
    tags = [t for t in _TAGS if t in value]
    if not tags:
        return {k: _decode(v, f"{where}.{k}") for k, v in value.items()}
    tag = tags[0]
    if tag == "_dtype_":
        import torch

        dtype = getattr(torch, str(value["_dtype_"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{where}: {value['_dtype_']!r} is not a torch dtype name.")
        return dtype
    if tag == "_enum_":
        cls = import_object(value["_enum_"], where)
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise ValueError(f"{where}: {value['_enum_']!r} is not an Enum class.")
        try:
            return cls[value["name"]]
        except KeyError:
            raise ValueError(
                f"{where}: {cls.__name__} has no member {value.get('name')!r}; it has "
                f"{[m.name for m in cls]}."
            ) from None
    if tag == "_callable_":
        return import_object(value["_callable_"], where)
    return tuple(_decode(v, f"{where}[{i}]") for i, v in enumerate(value["_tuple_"]))


def _did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, choices, n=3)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _encode_dataclass(obj: Any, where: str) -> dict[str, Any]:
    cls = type(obj)
    out: dict[str, Any] = {"_target_": f"{cls.__module__}:{cls.__qualname__}"}
    for f in dataclasses.fields(obj):
        if f.init and not f.name.startswith("_"):
            out[f.name] = _encode(getattr(obj, f.name), f"{where}.{f.name}")
    return out


def _decode_dataclass(data: Any, base: type, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigValueError(
            where,
            f"expected a mapping of {base.__name__} fields, got {type(data).__name__} {data!r:.80}",
        )
    target = data.get("_target_")
    cls = base if target is None else import_object(str(target), f"{where}._target_")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{where}._target_ {target!r} is not a {base.__name__}.")
    fields = [f for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")]
    names = [f.name for f in fields]
    kwargs = {}
    for key, raw in data.items():
        if key == "_target_":
            continue
        if key not in names:
            raise ValueError(
                f"{where}.{key} is not a field of {cls.__name__}.{_did_you_mean(key, names)}"
            )
        kwargs[key] = check_field(cls, key, _decode(raw, f"{where}.{key}"), f"{where}.{key}")
    missing = [
        f.name
        for f in fields
        if f.name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{where}: {cls.__name__} needs {', '.join(missing)}; set them here.")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        kind = TypeError if isinstance(exc, TypeError) else ValueError
        raise kind(f"{where}: {cls.__name__} refused these values: {exc}") from exc


# --------------------------------------------------------------------------- comm overlap


def _encode_preset(preset: Any, where: str) -> Any:
    if preset is None or isinstance(preset, str | os.PathLike):
        return None if preset is None else os.fspath(preset)
    if isinstance(preset, Mapping):
        return _encode(dict(preset), where)
    if not isinstance(preset, TransformerLayerTPOverlapCfg):
        raise TypeError(f"{where}: a {type(preset).__name__} cannot be written to YAML.")
    names = preset_names_of(preset)
    if names:
        return names[0]
    out: dict[str, Any] = {}
    for gemm in GEMM_NAMES:
        cfg = getattr(preset, gemm)
        if cfg is not None:
            out[gemm] = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return out


def _decode_preset(value: Any, where: str) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        if value in PUBLISHED_PRESETS:
            return PUBLISHED_PRESETS[value]
        return value  # a file path, loaded and checked by CommOverlapConfig.finalize
    if isinstance(value, Mapping):
        return load_tp_overlap_cfg(value, origin=where)
    raise TypeError(f"{where} must be a preset name, a mapping or a path, got {value!r}.")


# --------------------------------------------------------------------------- container


def _encode_derived_env(derived: DerivedEnv | None) -> dict[str, Any] | None:
    if derived is None:
        return None
    return {"gpu": derived.gpu, "precision": derived.precision, "env": dict(derived.env)}


def _decode_derived_env(value: Any, where: str) -> DerivedEnv | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigValueError(
            where,
            "expected a mapping with gpu, precision and env (what the recipe derived) or null, "
            f"got {type(value).__name__} {value!r:.80}",
        )
    keys = ("gpu", "precision", "env")
    for key in value:
        if key not in keys:
            raise ValueError(
                f"{where}.{key} is not a key of derived_env (it has {', '.join(keys)})."
                f"{_did_you_mean(str(key), keys)}"
            )
    gpu = check_value(value.get("gpu"), str | None, f"{where}.gpu")
    if gpu is not None:
        try:
            gpu = hardware.gpu_spec(gpu).name
        except ValueError as exc:
            raise ValueError(f"{where}.gpu: {exc}") from None
    precision = check_value(value.get("precision"), str, f"{where}.precision")
    env = value.get("env")
    env = {} if env is None else env
    return DerivedEnv(gpu=gpu, precision=precision, env=check_env_vars(env, owner=f"{where}.env"))


def encode_container(
    cfg: Any, sections: Mapping[str, Any], derived_env: DerivedEnv | None
) -> dict[str, Any]:
    """The plain-value document of container ``cfg``.

    ``sections`` holds the ``model``/``train``/``optimizer``/``ddp`` objects to write (the
    megatron-core configs as the user wrote them, without what an update derived);
    ``derived_env`` what the recipe derived into ``cfg.env_vars``. The caller checks the
    values first (``check_config_types``, ``check_env_vars``).
    """
    doc: dict[str, Any] = {"format_version": FORMAT_VERSION}
    for name in SECTIONS:
        doc[name] = _encode_dataclass(sections[name], f"cfg.{name}")
    mixed = cfg.mixed_precision
    doc["mixed_precision"] = (
        mixed
        if mixed is None or isinstance(mixed, str)
        else _encode_dataclass(mixed, "cfg.mixed_precision")
    )
    overlap = cfg.comm_overlap
    if overlap is None:
        doc["comm_overlap"] = None
    else:
        section = _encode_dataclass(
            dataclasses.replace(overlap, tp_comm_overlap_cfg=None), "cfg.comm_overlap"
        )
        section["tp_comm_overlap_cfg"] = _encode_preset(
            overlap.tp_comm_overlap_cfg, "cfg.comm_overlap.tp_comm_overlap_cfg"
        )
        doc["comm_overlap"] = section
    doc["gpu"] = cfg.gpu
    for name in CLUSTER_FIELDS:
        doc[name] = getattr(cfg, name)
    doc["env_vars"] = dict(cfg.env_vars)
    doc["derived_env"] = _encode_derived_env(derived_env)
    return doc


def decode_container(
    doc: Any, *, bases: Mapping[str, type], origin: str | None = None
) -> tuple[dict[str, Any], DerivedEnv | None]:
    """The container's keyword arguments of an :func:`encode_container` document, and its
    ``derived_env``.

    ``bases`` maps each of :data:`SECTIONS` to the class its ``_target_`` must be (a
    subclass of). Every value is checked against its field's annotation
    (``value_types.check_field``) and ``env_vars`` by ``check_env_vars``, before anything is
    built. Errors name ``origin`` (the file, when there is one) and the dotted key:
    ``config.yaml: model.sequence_parallel: expected bool, got str 'yes'``.
    """
    at = f"{origin}: " if origin else ""
    if not isinstance(doc, Mapping):
        raise ConfigValueError(
            origin or "document",
            f"expected a mapping of ConfigContainer sections, got {type(doc).__name__}",
        )
    for key in doc:
        if key not in _TOP_KEYS:
            raise ValueError(
                f"{at}{key!r} is not a ConfigContainer section.{_did_you_mean(str(key), _TOP_KEYS)}"
            )
    version = doc.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{at}format_version {version!r} is not supported (this library writes "
            f"{FORMAT_VERSION})."
        )
    if "model" not in doc:
        raise ValueError(f"{at}the document has no 'model' section; a ConfigContainer needs one.")
    kwargs: dict[str, Any] = {}
    for name in SECTIONS:
        if name in doc:
            kwargs[name] = _decode_dataclass(doc[name], bases[name], f"{at}{name}")
            if name in write_record.TYPED_SECTIONS:
                _record_listed_fields(kwargs[name], doc[name])
    mixed = doc.get("mixed_precision")
    if isinstance(mixed, Mapping):
        mixed = _decode_dataclass(mixed, MixedPrecisionConfig, f"{at}mixed_precision")
    elif mixed is not None:
        check_value(mixed, str, f"{at}mixed_precision")
        try:
            get_mixed_precision_config(mixed)
        except ValueError as exc:
            raise ValueError(f"{at}mixed_precision: {exc}") from None
    kwargs["mixed_precision"] = mixed
    overlap = doc.get("comm_overlap")
    if overlap is not None:
        if not isinstance(overlap, Mapping):
            raise ConfigValueError(
                f"{at}comm_overlap",
                "expected a mapping of CommOverlapConfig fields or null, got "
                f"{type(overlap).__name__} {overlap!r:.80}",
            )
        preset = _decode_preset(
            overlap.get("tp_comm_overlap_cfg"), f"{at}comm_overlap.tp_comm_overlap_cfg"
        )
        rest = {k: v for k, v in overlap.items() if k != "tp_comm_overlap_cfg"}
        overlap = dataclasses.replace(
            _decode_dataclass(rest, CommOverlapConfig, f"{at}comm_overlap"),
            tp_comm_overlap_cfg=preset,
        )
    kwargs["comm_overlap"] = overlap
    gpu = check_value(doc.get("gpu"), str | None, f"{at}gpu")
    if gpu is not None:
        try:
            hardware.gpu_spec(gpu)
        except ValueError as exc:
            raise ValueError(f"{at}{exc}") from None
    kwargs["gpu"] = gpu
    for name in CLUSTER_FIELDS:
        kwargs[name] = check_cluster_field(name, doc.get(name), f"{at}{name}")
    env_vars = doc.get("env_vars")
    env_vars = {} if env_vars is None else env_vars
    check_env_vars(env_vars, owner=f"{at}env_vars")
    kwargs["env_vars"] = dict(env_vars)
    return kwargs, _decode_derived_env(doc.get("derived_env"), f"{at}derived_env")


def _record_listed_fields(config: Any, section: Mapping[str, Any]) -> None:
    """A megatron-core section that lists some of its fields, not all (a hand-written document;
    ``to_dict`` writes every field), holds the user's values: each field it lists is recorded as
    typed, so the plan honours it even where it equals megatron-core's default. A complete
    section tells typed values from written-out defaults by nothing, and records none."""
    names = [f.name for f in dataclasses.fields(config) if f.init and not f.name.startswith("_")]
    listed = [name for name in names if name in section]
    if len(listed) == len(names):
        return
    write_record.record(
        config, "typed", {name: (getattr(config, name), write_record.NOTHING) for name in listed}
    )


def dump_document(doc: Mapping[str, Any]) -> str:
    """A document as YAML text, sections in the order written."""
    return yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False)


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and (text.endswith((".yaml", ".yml")) or "/" in text or os.sep in text)


class _UniqueKeyLoader(YamlLoader):
    """``YamlLoader`` (booleans true/false only) that refuses a key given twice in one mapping (PyYAML keeps the last
    one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, collections.abc.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} appears twice in one mapping (first on line {seen[key] + 1})",
                    key_node.start_mark,
                )
            if isinstance(key, collections.abc.Hashable):
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def read_document(source: str | os.PathLike[str]) -> tuple[Mapping[str, Any], str | None]:
    """The document in YAML text or in a file, and the file's name (None for text).

    A path object, or a str that looks like a path (one line ending in ``.yaml``/``.yml`` or
    holding a path separator), is read as a file: ``FileNotFoundError`` naming it when there is
    none. Any other str is YAML text.
    """
    if isinstance(source, os.PathLike) or (isinstance(source, str) and _looks_like_path(source)):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(
                f"from_yaml: config file {os.fspath(source)!r} does not exist. (A str ending in "
                ".yaml/.yml or holding a path separator is read as a path; YAML text is a "
                "document of several lines.)"
            )
        text, origin, label = path.read_text(), os.fspath(source), os.fspath(source)
    elif isinstance(source, str):
        text, origin, label = source, None, "YAML text"
    else:
        raise TypeError(f"from_yaml takes YAML text or a path, got {type(source).__name__}.")
    try:
        doc = yaml_loader.load(text, _UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ValueError(f"{label} is not valid YAML: {exc}") from None
    if not isinstance(doc, Mapping):
        raise ValueError(
            f"{label} does not hold a ConfigContainer document (a mapping of sections), got "
            f"{type(doc).__name__}."
        )
    return doc, origin
