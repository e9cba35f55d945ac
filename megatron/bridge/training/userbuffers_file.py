"""Load and validate a TE userbuffer config written as a mapping or a YAML file.

Megatron-LM users write their TP comm-overlap settings as a YAML file (``--tp-comm-overlap-cfg``)
in the layout Transformer Engine's ``initialize_ub(ub_cfgs=...)`` takes: GEMM name -> knobs.
:func:`load_tp_overlap_cfg` turns such a file or mapping into the typed
:class:`~megatron.bridge.training.userbuffers.TransformerLayerTPOverlapCfg` and refuses what TE
would ignore or fail on much later, on the GPU: a misspelt GEMM or knob name, a knob the chosen
method does not take, a value of the wrong type, an overlap method TE rejects for that GEMM.

Importing this module loads neither torch nor Transformer Engine; PyYAML is imported only to
read a file.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, get_args

from megatron.bridge.training.userbuffers import (
    GEMM_NAMES,
    PUBLISHED_PRESETS,
    GemmOverlapCfg,
    TransformerLayerTPOverlapCfg,
)

__all__ = ["PresetSource", "load_preset", "load_tp_overlap_cfg", "reads_file"]

#: The config type for each TE overlap method name (read from the types' ``method`` default).
_CFG_BY_METHOD: Mapping[str, type] = MappingProxyType(
    {
        next(f.default for f in dataclasses.fields(cls) if f.name == "method"): cls
        for cls in get_args(GemmOverlapCfg)
    }
)

#: The knobs each method's config type holds; these are the keys a GEMM entry may use.
_KNOBS_BY_METHOD: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        method: tuple(f.name for f in dataclasses.fields(cls))
        for method, cls in _CFG_BY_METHOD.items()
    }
)

# TE's initialize_ub starts every GEMM from a default config whose method comes from the GEMM
# name, then ``update``s it with the user's entry; an entry without ``method`` keeps this one.
_TE_DEFAULT_METHOD: Mapping[str, str] = MappingProxyType(
    {
        "qkv_fprop": "ring_exchange",
        "fc1_fprop": "ring_exchange",
        "proj_dgrad": "ring_exchange",
        "fc2_dgrad": "ring_exchange",
        "proj_fprop": "pipeline",
        "fc2_fprop": "pipeline",
        "qkv_dgrad": "bulk",
        "qkv_wgrad": "bulk",
        "fc1_dgrad": "bulk",
        "fc1_wgrad": "bulk",
    }
)

# TE overlaps these with the ring exchange of their dgrad (method "external") and builds their
# communicators itself; a user entry for them has nothing to configure here.
_TE_EXTERNAL_GEMMS: Mapping[str, str] = MappingProxyType(
    {"proj_wgrad": "proj_dgrad", "fc2_wgrad": "fc2_dgrad"}
)

# Keyword arguments TE's add_ub accepts that no config type here models. TE would take them, so
# they get their own message instead of "unknown".
_TE_UNMODELLED_KNOBS = frozenset(
    {
        "is_reduce_scatter",
        "use_ce",
        "comm_priority",
        "gemm_priority",
        "pipeline_rs_overlap_first_gemm",
    }
)

# GEMMs TE overlaps with a reduce-scatter; TE refuses the pipeline method on the others
# (all-gather GEMMs). A dgrad listed in _TE_DGRAD_WGRAD becomes a reduce-scatter GEMM when its
# method is not bulk.
_TE_REDUCE_SCATTER_GEMMS = frozenset({"proj_fprop", "fc2_fprop", "qkv_wgrad", "fc1_wgrad"})
_TE_DGRAD_WGRAD: Mapping[str, str] = MappingProxyType(
    {"qkv_dgrad": "qkv_wgrad", "fc1_dgrad": "fc1_wgrad"}
)


def _did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _read_yaml(path: str, label: str) -> Any:
    try:
        # Deliberately lazy: PyYAML only where a preset is read from a file.
        import yaml

        from megatron.bridge.training import yaml_loader
    except ImportError as exc:
        raise ImportError(
            f"Reading {label} needs PyYAML: pip install pyyaml, or "
            "pass the config as a mapping or a TransformerLayerTPOverlapCfg."
        ) from exc
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{label} does not exist (working directory "
            f"{os.getcwd()!r}); fix the path, or pass the config as a mapping or a "
            "TransformerLayerTPOverlapCfg preset."
        ) from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{label} is not UTF-8 text: {exc}.") from exc
    try:
        return yaml_loader.load(text, yaml_loader.BoundedSafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ValueError(
            f"{label}{where}: invalid YAML ({problem}). Expected a "
            "mapping of GEMM name to knobs, e.g. 'qkv_fprop: {method: ring_exchange, num_sm: 1}'."
        ) from exc


def _method_of(label: str, gemm: str, knobs: Mapping[Any, Any]) -> str:
    method = knobs.get("method")
    if method is None:
        return _TE_DEFAULT_METHOD[gemm]
    if not isinstance(method, str):
        raise TypeError(
            f"{label}: GEMM {gemm!r} has method {method!r} ({type(method).__name__}); it must "
            f"be one of {', '.join(map(repr, _CFG_BY_METHOD))}."
        )
    if method not in _CFG_BY_METHOD:
        hint = _did_you_mean(method, list(_CFG_BY_METHOD))
        if method == "external":
            hint = " TE uses 'external' only for proj_wgrad and fc2_wgrad, which it sets up itself."
        raise ValueError(
            f"{label}: GEMM {gemm!r} has method {method!r}.{hint} Valid methods: "
            f"{', '.join(_CFG_BY_METHOD)} (leave 'method' out for TE's default for this GEMM, "
            f"{_TE_DEFAULT_METHOD[gemm]!r})."
        )
    return method


def _check_knob_names(label: str, gemm: str, method: str, knobs: Mapping[Any, Any]) -> None:
    valid = _KNOBS_BY_METHOD[method]
    for knob in knobs:
        if knob in valid:
            continue
        listing = f"Valid knobs for method {method!r}: {', '.join(valid)}."
        if not isinstance(knob, str):
            raise TypeError(
                f"{label}: GEMM {gemm!r} has a knob name {knob!r} ({type(knob).__name__}); "
                f"knob names are strings. {listing}"
            )
        owners = [m for m, names in _KNOBS_BY_METHOD.items() if knob in names]
        if owners:
            reason = f"is not a knob of method {method!r} (only of {', '.join(map(repr, owners))})."
        elif knob in _TE_UNMODELLED_KNOBS:
            reason = (
                "is a Transformer Engine knob this config type does not set; remove it and TE "
                "uses its own default."
            )
        else:
            reason = f"is not a userbuffer knob.{_did_you_mean(knob, valid)}"
        raise ValueError(f"{label}: GEMM {gemm!r}: knob {knob!r} {reason} {listing}")


def _gemm_cfg(label: str, gemm: str, knobs: Mapping[Any, Any]) -> Any:
    method = _method_of(label, gemm, knobs)
    _check_knob_names(label, gemm, method, knobs)
    # A null knob means "TE's default", which is what leaving it out gives the config type.
    kwargs = {k: v for k, v in knobs.items() if k != "method" and v is not None}
    try:
        return _CFG_BY_METHOD[method](**kwargs)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{label}: GEMM {gemm!r} (method {method!r}): {exc}") from exc


def _check_te_method_rules(label: str, gemms: Mapping[str, Any]) -> None:
    # TE raises both of these only inside initialize_ub, i.e. on the GPU after model setup.
    for dgrad, wgrad in _TE_DGRAD_WGRAD.items():
        cfg = gemms.get(dgrad)
        if cfg is not None and cfg.method != "bulk" and gemms.get(wgrad) is not None:
            raise ValueError(
                f"{label}: {dgrad!r} uses method {cfg.method!r}, so TE overlaps its "
                f"reduce-scatter in place of the {wgrad!r} bulk overlap and refuses a config for "
                f"{wgrad!r}; remove {wgrad!r} or make {dgrad!r} bulk."
            )
    for gemm, cfg in gemms.items():
        if cfg is None or cfg.method != "pipeline":
            continue
        reduce_scatter = gemm in _TE_REDUCE_SCATTER_GEMMS or gemm in _TE_DGRAD_WGRAD
        if not reduce_scatter:
            raise ValueError(
                f"{label}: GEMM {gemm!r} overlaps an all-gather, and TE supports the 'pipeline' "
                "method only for reduce-scatter GEMMs; use 'ring_exchange' (TE's default for "
                f"{gemm!r})."
            )


def load_tp_overlap_cfg(
    source: str | os.PathLike[str] | Mapping[str, Any], *, origin: str | None = None
) -> TransformerLayerTPOverlapCfg:
    """Build a :class:`TransformerLayerTPOverlapCfg` from a ``ub_cfgs``-style mapping or YAML file.

    ``source`` is a mapping of GEMM name (``qkv_fprop``, ``fc2_dgrad``, ...) to its knobs, the
    layout TE's ``initialize_ub(ub_cfgs=...)`` takes, or the path of a YAML file holding one.
    Each entry's ``method`` (``bulk``, ``ring_exchange`` or ``pipeline``) picks its config type;
    without one the GEMM gets TE's default method for its name. A null entry or knob means TE's
    default; GEMMs the source leaves out stay None. ``origin`` names the setting the source came
    from (e.g. ``"CommOverlapConfig.tp_comm_overlap_cfg"``) in error messages.

    Raises ``ValueError`` for an unknown GEMM name, knob or method (with a did-you-mean and the
    valid names), a knob the method does not take, a method TE refuses for that GEMM, a file
    that is not valid YAML (with its line) or whose top level is not a mapping; ``TypeError``
    for a value of the wrong type; ``FileNotFoundError`` for a missing file. Every message
    names the file (or "mapping") and the GEMM.
    """
    if isinstance(source, Mapping):
        label = f"{origin} (mapping)" if origin else "Userbuffer config mapping"
        raw: Any = source
    elif isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        label = f"{origin} file {path!r}" if origin else f"Userbuffer config file {path!r}"
        raw = _read_yaml(path, label)
        if raw is None:
            raise ValueError(
                f"{label} is empty; write a mapping of GEMM name to knobs in it, or pass None "
                "instead of the file for TE's defaults."
            )
    else:
        raise TypeError(
            f"{origin or 'The userbuffer config source'} must be a mapping or a YAML file path, "
            f"got {type(source).__name__}."
        )
    if not isinstance(raw, Mapping):
        raise TypeError(
            f"{label} must hold a mapping of GEMM name to knobs (one config for all "
            f"quantization modes), got {type(raw).__name__}."
        )

    gemms: dict[str, Any] = {}
    for gemm, knobs in raw.items():
        if gemm not in _TE_DEFAULT_METHOD:
            if gemm in _TE_EXTERNAL_GEMMS:
                hint = (
                    f" TE overlaps {gemm!r} with the ring exchange of "
                    f"{_TE_EXTERNAL_GEMMS[gemm]!r} and configures it itself; remove the entry."
                )
            else:
                hint = _did_you_mean(str(gemm), GEMM_NAMES)
            raise ValueError(
                f"{label}: unknown GEMM name {gemm!r}.{hint} Valid names: {', '.join(GEMM_NAMES)}."
            )
        if knobs is None:
            continue
        if not isinstance(knobs, Mapping):
            raise TypeError(
                f"{label}: GEMM {gemm!r} must map to its knobs (method, num_sm, ...) or null, "
                f"got {type(knobs).__name__}."
            )
        gemms[gemm] = _gemm_cfg(label, gemm, knobs)
    _check_te_method_rules(label, gemms)
    return TransformerLayerTPOverlapCfg(**gemms)


PresetSource = TransformerLayerTPOverlapCfg | Mapping[str, Any] | str | os.PathLike[str]
"""A userbuffers config as a user may give it: a preset object, a mapping or a YAML file path."""


def reads_file(value: object) -> bool:
    """Whether a ``tp_comm_overlap_cfg`` value is a YAML file path, read by each
    :func:`load_preset`."""
    return isinstance(value, str | os.PathLike)


def load_preset(
    value: object, *, owner: str = "CommOverlapConfig"
) -> TransformerLayerTPOverlapCfg | None:
    """The typed userbuffers config for a ``tp_comm_overlap_cfg`` value, loaded and checked.

    A preset object is returned as it is; a mapping (GEMM name -> knobs) or a YAML file path is
    loaded and checked GEMM by GEMM and knob by knob (an unknown name gets a "did you mean").
    """
    if value is None or isinstance(value, TransformerLayerTPOverlapCfg):
        return value
    if isinstance(value, str) and value in PUBLISHED_PRESETS and not os.path.exists(value):
        raise TypeError(
            f"{owner}.tp_comm_overlap_cfg={value!r} is a preset name, not a file: import the "
            "preset object, e.g. `from megatron.bridge.training.comm_overlap import "
            f"{value}`."
        )
    if isinstance(value, Mapping) or reads_file(value):
        return load_tp_overlap_cfg(value, origin=f"{owner}.tp_comm_overlap_cfg")
    raise TypeError(
        f"{owner}.tp_comm_overlap_cfg must be a TransformerLayerTPOverlapCfg (one of the "
        "published userbuffers_* presets or your own), a mapping of GEMM name to knobs, a YAML "
        f"file path, or None; got {type(value).__name__}."
    )
