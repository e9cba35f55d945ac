"""Transformer Engine userbuffers for tensor-parallel communication overlap.

When the resolved model config keeps ``tp_comm_overlap=True``, TE needs its userbuffer
communicators created once per process, before the first TE layer runs:
:func:`initialize_tp_communicators` does that with the shape, TP size, preset, bootstrap
backend and quantization mode the model needs. TE refuses a second initialization, so this
module remembers that it ran (:func:`reset_tp_communicators` undoes it, e.g. between tests).

Transformer Engine is imported only when a communicator is actually created.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from megatron.bridge.training.comm_overlap import tp_overlap_buffer_rows
from megatron.bridge.training.userbuffers import TransformerLayerTPOverlapCfg
from megatron.bridge.training.userbuffers_file import load_tp_overlap_cfg
from megatron.bridge.training.validators import check_int

__all__ = [
    "UserbufferSettings",
    "initialize_tp_communicators",
    "reset_tp_communicators",
    "resolve_ub_cfgs",
    "tp_communicators_settings",
]

logger = logging.getLogger(__name__)

_TE_BASE_MODULE = "transformer_engine.pytorch.module.base"


@dataclass(frozen=True)
class UserbufferSettings:
    """What the TE userbuffers were initialized with in this process."""

    shape: tuple[int, int]
    """Communication buffer shape: (seq_length * micro_batch_size // cp, hidden_size)."""
    tp_size: int
    """Tensor-parallel size."""
    ub_cfgs: Mapping[str, Mapping[str, Any]] | None
    """Per-GEMM userbuffer configs passed to TE (None: TE defaults)."""
    bootstrap_backend: str
    """Backend that bootstrapped the communicators."""
    fp8: bool
    """Whether FP8 userbuffers were requested."""


_SETTINGS: UserbufferSettings | None = None


def tp_communicators_settings() -> UserbufferSettings | None:
    """The settings of the userbuffers this process initialized, or None if it has not."""
    return _SETTINGS


def reset_tp_communicators() -> None:
    """Forget (and, when TE is loaded, destroy) the userbuffers this process initialized."""
    global _SETTINGS
    if _SETTINGS is not None:
        import sys

        te_base = sys.modules.get(_TE_BASE_MODULE)
        destroy = getattr(te_base, "destroy_ub", None)
        if destroy is not None:
            destroy()
    _SETTINGS = None


def resolve_ub_cfgs(cfg: Any) -> dict[str, dict[str, Any]] | None:
    """The ``ub_cfgs`` dict for TE from a preset object, a plain dict, a YAML file path or None.

    A dict or file goes through :func:`load_tp_overlap_cfg`, so it is validated (GEMM and knob
    names, value types, TE's method rules) before anything reaches TE.
    """
    if cfg is None:
        return None
    if isinstance(cfg, Mapping | str | os.PathLike):
        cfg = load_tp_overlap_cfg(cfg, origin="tp_comm_overlap_cfg")
    if isinstance(cfg, TransformerLayerTPOverlapCfg):
        return cfg.to_ub_cfgs()
    raise TypeError(
        "tp_comm_overlap_cfg must be a TransformerLayerTPOverlapCfg preset, a dict, a YAML file "
        f"path or None, got {type(cfg).__name__}."
    )


def _import_te_base() -> Any:
    try:
        return importlib.import_module(_TE_BASE_MODULE)
    except Exception as exc:  # TE raises RuntimeError/OSError, not only ImportError, without CUDA
        raise RuntimeError(
            "tp_comm_overlap=True needs Transformer Engine's userbuffers, but "
            f"{_TE_BASE_MODULE} failed to import ({type(exc).__name__}: {exc}). Install the "
            "'te' extra on a CUDA machine (pip install 'megatron-bridge-overlap[te]') or set "
            "CommOverlapConfig(tp_comm_overlap=False)."
        ) from exc


def _buffer_shape(model_config: Any, micro_batch_size: int) -> tuple[int, int]:
    seq_length = check_int(
        "model_config",
        "seq_length",
        getattr(model_config, "seq_length", None),
        hint=(
            "TP comm overlap sizes its buffers from it: use a model provider with seq_length "
            "set (e.g. GPTModelProvider)."
        ),
        type_error=ValueError,
    )
    rows = tp_overlap_buffer_rows(
        seq_length=seq_length,
        micro_batch_size=micro_batch_size,
        cp_size=model_config.context_parallel_size,
        tp_size=model_config.tensor_model_parallel_size,
    )
    return (rows, model_config.hidden_size)


def initialize_tp_communicators(model_config: Any, micro_batch_size: int) -> bool:
    """Create TE's userbuffer communicators for TP overlap, once per process.

    Does nothing (returns False) when ``model_config.tp_comm_overlap`` is False or this process
    already initialized them with the same settings; returns True when it called TE's
    ``initialize_ub``. Different settings after a first initialization raise ``RuntimeError``
    (TE cannot re-create its communicators; call :func:`reset_tp_communicators` first).

    The preset comes from ``model_config.tp_comm_overlap_cfg`` (a preset object, a dict or a
    YAML file path; None lets TE use its defaults). With FP8 the FP8 userbuffers are
    requested, plus plain ones when the first/last layers stay in bf16.
    """
    global _SETTINGS
    if not model_config.tp_comm_overlap:
        logger.debug("tp_comm_overlap is off: no TE userbuffers to initialize.")
        return False
    check_int("", "micro_batch_size", micro_batch_size, type_error=ValueError)

    shape = _buffer_shape(model_config, micro_batch_size)
    tp_size = model_config.tensor_model_parallel_size
    ub_cfgs = resolve_ub_cfgs(getattr(model_config, "tp_comm_overlap_cfg", None))
    backend = model_config.tp_comm_bootstrap_backend
    fp8 = model_config.fp8 is not None
    settings = UserbufferSettings(shape, tp_size, ub_cfgs, backend, fp8)

    if _SETTINGS is not None:
        if settings == _SETTINGS:
            logger.debug("TE userbuffers already initialized with these settings; skipping.")
            return False
        raise RuntimeError(
            f"TE userbuffers are already initialized in this process with {_SETTINGS}; the "
            f"model now needs {settings}. TE cannot re-create them: call "
            "reset_tp_communicators() first (or build one model config per process)."
        )

    te_base = _import_te_base()
    params = inspect.signature(te_base.initialize_ub).parameters
    kwargs: dict[str, Any] = {"shape": list(shape), "tp_size": tp_size, "ub_cfgs": ub_cfgs}

    if "quantization_modes" in params:
        # TE >= 2.7: one communicator set per quantization mode.
        mode = te_base.UserBufferQuantizationMode
        modes = [mode.FP8 if fp8 else mode.NONE]
        bf16_layers = model_config.first_last_layers_bf16 and (
            model_config.num_layers_at_start_in_bf16 > 0
            or model_config.num_layers_at_end_in_bf16 > 0
        )
        if fp8 and bf16_layers:
            # Layers kept out of FP8 run their GEMMs on non-FP8 userbuffers.
            modes.append(mode.NONE)
        kwargs["quantization_modes"] = modes
    else:
        kwargs["use_fp8"] = fp8
        if fp8 and model_config.first_last_layers_bf16:
            logger.warning(
                "This Transformer Engine's initialize_ub takes use_fp8 only, so the bf16 first/"
                "last layers get no userbuffers of their own; upgrade TE (>= 2.7) for "
                "quantization_modes."
            )

    if "dtype" in params:
        import torch

        # TE's non-FP8 buffer dtype; its default (bf16) would be wrong for fp16 training.
        kwargs["dtype"] = torch.float16 if model_config.fp16 else torch.bfloat16

    if "bootstrap_backend" in params:
        kwargs["bootstrap_backend"] = backend
    elif backend != "nccl":
        logger.warning(
            "This Transformer Engine's initialize_ub has no bootstrap_backend; "
            "tp_comm_bootstrap_backend=%r is ignored and TE picks its own.",
            backend,
        )

    logger.info(
        "Initializing TE userbuffers: shape=%s tp_size=%d backend=%s fp8=%s preset=%s",
        list(shape),
        tp_size,
        backend,
        fp8,
        "TE defaults" if ub_cfgs is None else sorted(ub_cfgs),
    )
    te_base.initialize_ub(**kwargs)
    _SETTINGS = settings
    return True
