"""Launch-time environment rules: the one place that knows them.

Some settings only take effect when they are in the process environment before CUDA (or
Transformer Engine, or NCCL) initializes; setting ``os.environ`` from inside the training
job is too late. This module decides what those variables should be, *and why*, from plain
inputs. It is pure (standard library only) so three thin consumers can share it:

- ``megatron.bridge.recipes.run_plugins.PerfEnvPlugin`` writes the plan onto a NeMo-Run
  executor,
- an "explain" command prints ``LaunchEnvPlan.explain()``,
- model-build code calls :func:`check_live_environment` to compare ``os.environ`` with
  what the resolved layout needs.

``CUDA_DEVICE_MAX_CONNECTIONS`` precedence (first match wins):

1. MoE flex dispatcher backend ``deepep`` or ``hybridep``: 32. These backends drive their
   own communication streams and need many hardware queues whatever the GPU generation.
2. Blackwell (SM100+), (TP > 1 or CP > 1) and (DP > 1 or PP > 1): 32, so TP/CP and DP/PP
   communication kernels do not serialize behind each other.
3. Hopper or older, (TP > 1 or CP > 1) and EP all-to-all overlap off: 1. One hardware
   queue makes kernels start in launch order, so the TP/CP communication kernel is queued
   before the GEMM it overlaps with. EP A2A overlap needs concurrent streams, so it keeps 8.
4. Otherwise 8 (CUDA's own default).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.parallel_layout import validate_parallel_size
from megatron.bridge.training.validators import check_bool, check_choice, check_int

if TYPE_CHECKING:
    from megatron.bridge.training.job import JobDescription

__all__ = [
    "CUDA_DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_LAYERNORM_SM_MARGIN",
    "LaunchEnvEntry",
    "LaunchEnvPlan",
    "MoeFlexDispatcherBackend",
    "check_live_environment",
    "cuda_device_max_connections",
    "launch_layout",
    "plan_launch_env",
    "plan_launch_env_for",
    "validate_layernorm_sm_margin",
    "validate_manual_gc_interval",
    "validate_moe_flex_dispatcher_backend",
    "validate_nccl_pp_comm_chunksize",
]

MoeFlexDispatcherBackend = Literal["deepep", "hybridep", "ncclep"]
"""Backends megatron-core 0.19 accepts for ``TransformerConfig.moe_flex_dispatcher_backend``."""

_MANY_QUEUE_FLEX_BACKENDS: frozenset[str] = frozenset({"deepep", "hybridep"})
# ncclep goes through TE's NCCL EP API on regular streams; only deepep and hybridep drive
# their own communication streams, so ncclep falls through to the generation rules.

CUDA_DEFAULT_MAX_CONNECTIONS = 8
"""What CUDA uses when ``CUDA_DEVICE_MAX_CONNECTIONS`` is unset."""

DEFAULT_LAYERNORM_SM_MARGIN = 16
"""SMs LayerNorm kernels leave free so DP collectives can run beside them."""

CUDA_DEVICE_MAX_CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"
NVTE_FWD_LAYERNORM_SM_MARGIN = "NVTE_FWD_LAYERNORM_SM_MARGIN"
NVTE_BWD_LAYERNORM_SM_MARGIN = "NVTE_BWD_LAYERNORM_SM_MARGIN"
NCCL_P2P_NET_CHUNKSIZE = "NCCL_P2P_NET_CHUNKSIZE"


# --------------------------------------------------------------------------- validation


def validate_layernorm_sm_margin(value: object, *, name: str = "layernorm_sm_margin") -> int:
    """Check that a LayerNorm SM margin is a non-negative int (number of SMs left free)."""
    return check_int(
        "",
        name,
        value,
        minimum=0,
        unit="number of SMs",
        hint=(
            f"The default is {DEFAULT_LAYERNORM_SM_MARGIN}; use 0 to leave no SMs free, or "
            "disable the margin with enable_layernorm_sm_margin=False."
        ),
    )


def validate_nccl_pp_comm_chunksize(
    value: object, *, name: str = "nccl_pp_comm_chunksize"
) -> int | None:
    """Check that an NCCL P2P chunk size is None (not set) or an int > 1 (bytes)."""
    return check_int(
        "",
        name,
        value,
        minimum=2,
        optional=True,
        unit="bytes",
        hint="Use None to keep NCCL's default chunk size.",
    )


def validate_manual_gc_interval(value: object, *, name: str = "manual_gc_interval") -> int:
    """Check that a manual GC interval is a non-negative int (0: no collection between steps)."""
    return check_int(
        "",
        name,
        value,
        minimum=0,
        unit="training steps",
        hint="Use 0 for no collection between steps.",
    )


def validate_moe_flex_dispatcher_backend(
    value: object, *, name: str = "moe_flex_dispatcher_backend"
) -> MoeFlexDispatcherBackend | None:
    """Check that a MoE flex dispatcher backend is None or one megatron-core accepts."""
    return check_choice(  # type: ignore[return-value]
        "",
        name,
        value,
        MoeFlexDispatcherBackend,
        optional=True,
        hint="None means the flex dispatcher is not used.",
    )


# --------------------------------------------------------------------------- rules


def _validated_layout(
    tp_size: int, cp_size: int, dp_size: int, pp_size: int, moe_flex_dispatcher_backend: str | None
) -> str | None:
    """Check the four parallel sizes and the flex backend; return the backend."""
    for name, value in (
        ("tp_size", tp_size),
        ("cp_size", cp_size),
        ("dp_size", dp_size),
        ("pp_size", pp_size),
    ):
        validate_parallel_size(name, value)
    return validate_moe_flex_dispatcher_backend(moe_flex_dispatcher_backend)


def cuda_device_max_connections(
    *,
    gpu_sm100_or_newer: bool,
    tp_size: int,
    cp_size: int,
    dp_size: int,
    pp_size: int,
    moe_flex_dispatcher_backend: str | None,
    a2a_overlap: bool,
) -> tuple[int, str]:
    """Return ``CUDA_DEVICE_MAX_CONNECTIONS`` for a layout and a one-line reason.

    Precedence is documented in the module docstring: flex backend, then GPU generation,
    then CUDA's default of 8.
    """
    backend = _validated_layout(tp_size, cp_size, dp_size, pp_size, moe_flex_dispatcher_backend)
    check_bool("", "gpu_sm100_or_newer", gpu_sm100_or_newer)
    check_bool("", "a2a_overlap", a2a_overlap)

    model_split = tp_size > 1 or cp_size > 1
    if backend in _MANY_QUEUE_FLEX_BACKENDS:
        return 32, f"MoE flex dispatcher backend {backend!r} needs many concurrent hardware queues"
    if gpu_sm100_or_newer:
        if model_split and (dp_size > 1 or pp_size > 1):
            return 32, (
                f"Blackwell (SM100+) with TP={tp_size}/CP={cp_size} and DP={dp_size}/PP={pp_size}: "
                "TP/CP and DP/PP communication need separate hardware queues"
            )
        return 8, "Blackwell (SM100+) without both TP/CP and DP/PP splits: CUDA default"
    if model_split:
        if a2a_overlap:
            return 8, (
                f"Hopper or older with TP={tp_size}/CP={cp_size} but EP all-to-all overlap on: "
                "it needs concurrent streams, so keep the CUDA default"
            )
        return 1, (
            f"Hopper or older with TP={tp_size}/CP={cp_size}: one hardware queue makes kernels "
            "start in launch order, so the TP/CP comm kernel is queued before the GEMM"
        )
    return 8, "no TP/CP split: CUDA default"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LaunchEnvEntry:
    """One launch-time environment variable and the decision about it."""

    name: str
    """Environment variable name."""
    value: str | None
    """Value to export; None means deliberately not set (``reason`` says why)."""
    reason: str
    """One line saying why this value (or why nothing)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LaunchEnvPlan:
    """The launch environment a layout needs: every variable considered, with reasons."""

    entries: tuple[LaunchEnvEntry, ...]
    """All variables considered, in a stable order; unset ones have ``value=None``."""

    @property
    def env(self) -> dict[str, str]:
        """The variables to export (entries whose value is not None)."""
        return {e.name: e.value for e in self.entries if e.value is not None}

    def entry(self, name: str) -> LaunchEnvEntry:
        """The entry for ``name``; KeyError lists the names this plan considered."""
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"{name!r} is not in this plan; it has {[e.name for e in self.entries]}")

    def explain(self) -> list[str]:
        """Human-readable lines, one per variable, for a CLI or a log."""
        lines = []
        for e in self.entries:
            shown = f"{e.name}={e.value}" if e.value is not None else f"{e.name} (not set)"
            lines.append(f"{shown}  # {e.reason}")
        return lines


def plan_launch_env(
    *,
    gpu_sm100_or_newer: bool,
    tp_size: int = 1,
    cp_size: int = 1,
    dp_size: int = 1,
    pp_size: int = 1,
    moe_flex_dispatcher_backend: str | None = None,
    a2a_overlap: bool = False,
    enable_layernorm_sm_margin: bool = True,
    layernorm_sm_margin: int = DEFAULT_LAYERNORM_SM_MARGIN,
    nccl_pp_comm_chunksize: int | None = None,
) -> LaunchEnvPlan:
    """Decide the launch environment for a layout; pure, validates every input."""
    check_bool("", "enable_layernorm_sm_margin", enable_layernorm_sm_margin)
    margin = validate_layernorm_sm_margin(layernorm_sm_margin)
    chunk = validate_nccl_pp_comm_chunksize(nccl_pp_comm_chunksize)
    connections, why = cuda_device_max_connections(
        gpu_sm100_or_newer=gpu_sm100_or_newer,
        tp_size=tp_size,
        cp_size=cp_size,
        dp_size=dp_size,
        pp_size=pp_size,
        moe_flex_dispatcher_backend=moe_flex_dispatcher_backend,
        a2a_overlap=a2a_overlap,
    )
    if enable_layernorm_sm_margin:
        margin_setting = (
            str(margin),
            f"LayerNorm kernels leave {margin} SMs free for overlapped DP collectives",
        )
    else:
        margin_setting = (None, "enable_layernorm_sm_margin=False: TE default")
    if chunk is None:
        chunk_setting = (None, "nccl_pp_comm_chunksize not given: NCCL default")
    elif pp_size > 1:
        chunk_setting = (
            str(chunk),
            f"PP={pp_size}: pipeline P2P sends use {chunk}-byte network chunks",
        )
    else:
        chunk_setting = (
            None,
            f"nccl_pp_comm_chunksize={chunk} ignored: PP=1 has no pipeline P2P traffic",
        )
    settings = (
        (CUDA_DEVICE_MAX_CONNECTIONS, (str(connections), why)),
        (NVTE_FWD_LAYERNORM_SM_MARGIN, margin_setting),
        (NVTE_BWD_LAYERNORM_SM_MARGIN, margin_setting),
        (NCCL_P2P_NET_CHUNKSIZE, chunk_setting),
    )
    return LaunchEnvPlan(
        entries=tuple(
            LaunchEnvEntry(name=name, value=value, reason=reason)
            for name, (value, reason) in settings
        )
    )


# --------------------------------------------------------------------------- runtime check


def check_live_environment(
    *,
    tp_comm_overlap: bool,
    tp_size: int,
    cp_size: int,
    dp_size: int,
    pp_size: int,
    a2a_overlap: bool,
    moe_flex_dispatcher_backend: str | None,
    gpu_sm100_or_newer: bool | None,
    env: Mapping[str, str],
) -> list[str]:
    """Compare a live environment with what the layout needs; return readable problems.

    ``env`` is usually ``os.environ``. ``gpu_sm100_or_newer=None`` means the GPU generation
    is unknown (e.g. no GPU visible): generation-specific rules are then not checked, only
    the flex-backend rule, which holds on every generation. An empty list means no problem.
    The caller decides whether to warn or raise.
    """
    backend = _validated_layout(tp_size, cp_size, dp_size, pp_size, moe_flex_dispatcher_backend)

    raw = env.get(CUDA_DEVICE_MAX_CONNECTIONS)
    if raw is None:
        live, shown = CUDA_DEFAULT_MAX_CONNECTIONS, "unset (CUDA default 8)"
    else:
        try:
            live = int(raw.strip())
        except ValueError:
            return [
                f"{CUDA_DEVICE_MAX_CONNECTIONS}={raw!r} is not an integer; CUDA ignores it. "
                "Set it at launch time (e.g. with PerfEnvPlugin)."
            ]
        shown = str(live)

    if gpu_sm100_or_newer is None:
        if backend not in _MANY_QUEUE_FLEX_BACKENDS:
            return []
        # The flex-backend rule ranks above the generation rules, so it is safe to check.
        generation = False
    else:
        generation = gpu_sm100_or_newer

    expected, why = cuda_device_max_connections(
        gpu_sm100_or_newer=generation,
        tp_size=tp_size,
        cp_size=cp_size,
        dp_size=dp_size,
        pp_size=pp_size,
        moe_flex_dispatcher_backend=backend,
        a2a_overlap=a2a_overlap,
    )
    if live == expected:
        return []
    message = (
        f"{CUDA_DEVICE_MAX_CONNECTIONS} is {shown} but this layout needs {expected} ({why}). "
        "It must be set before CUDA starts: put it on the launcher (PerfEnvPlugin does)."
    )
    if tp_comm_overlap and expected == 1:
        message = (
            "TP communication overlap is on, but the comm kernels will not be ordered before "
            "the GEMMs: " + message
        )
    return [message]


# --------------------------------------------------------------------------- from a plan


def launch_layout(job: JobDescription) -> dict[str, Any]:
    """The job's parallel layout, as the keywords the rules above take (``tp_size`` ...)."""
    return {
        "tp_size": job.tp_size,
        "cp_size": job.cp_size,
        "dp_size": job.dp_size,
        "pp_size": job.pp_size,
        "moe_flex_dispatcher_backend": job.model.flex_backend,
    }


def plan_launch_env_for(
    job: JobDescription,
    *,
    a2a_overlap: bool,
    gpu_sm100_or_newer: bool | None = None,
    enable_layernorm_sm_margin: bool = True,
    layernorm_sm_margin: int = DEFAULT_LAYERNORM_SM_MARGIN,
    nccl_pp_comm_chunksize: int | None = None,
) -> LaunchEnvPlan:
    """The launch environment a resolved layout needs: what every consumer exports and checks.

    ``job`` is a resolved plan's (``plan.job``) and ``a2a_overlap`` whether EP all-to-all
    overlap survived in it. The GPU generation comes from the job's GPU when it names one,
    else from ``gpu_sm100_or_newer`` (which must then be given).
    """
    if job.gpu is not None:
        generation = gpu_spec(job.gpu).sm100_or_newer
        if gpu_sm100_or_newer is not None and gpu_sm100_or_newer != generation:
            raise ValueError(
                f"gpu_sm100_or_newer={gpu_sm100_or_newer} contradicts the layout's gpu "
                f"{job.gpu!r}; pass one of them."
            )
    elif gpu_sm100_or_newer is None:
        raise ValueError(
            "The GPU generation is unknown: name the gpu in the layout (e.g. gpu='h100') or pass "
            "gpu_sm100_or_newer."
        )
    else:
        generation = gpu_sm100_or_newer
    return plan_launch_env(
        gpu_sm100_or_newer=generation,
        **launch_layout(job),
        a2a_overlap=a2a_overlap,
        enable_layernorm_sm_margin=enable_layernorm_sm_margin,
        layernorm_sm_margin=layernorm_sm_margin,
        nccl_pp_comm_chunksize=nccl_pp_comm_chunksize,
    )
