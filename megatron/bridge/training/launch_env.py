"""Launch-time environment rules: the one place that knows them.

Some settings only take effect when they are in the process environment before CUDA (or
Transformer Engine, NCCL, HybridEP) initializes; setting ``os.environ`` from inside the training
job is too late. This module decides what those variables should be, *and why*, from plain
inputs. It is pure (standard library only) so its consumers share it:

- ``megatron.bridge.recipes.run_plugins.PerfEnvPlugin`` writes the plan onto a NeMo-Run
  executor, warns about executor values that break a requirement and refuses those with which
  the job fails,
- ``RecipeSpec.build`` puts the plan in ``cfg.env_vars``; ``bridge-overlap explain`` prints
  ``LaunchEnvPlan.explain()``,
- model-build code calls :func:`check_live_environment` to compare ``os.environ`` with what
  the resolved layout *requires*.

The variables a user set in ``cfg.env_vars`` are theirs: ``env_vars.with_user_env`` lays them
over a plan (entries of source ``user``), kept as written, or refused where they break what the
layout requires.

Two kinds of value live here, kept apart:

- **Required**: a value outside it breaks an enabled feature (:func:`check_live_environment`
  holds every such rule; :func:`failing_environment` the ones without which the job fails when
  it starts, which are refused rather than warned about). ``CUDA_DEVICE_MAX_CONNECTIONS`` must be
  above 1 when EP all-to-all overlap runs: megatron-core issues the all-to-alls on their own
  stream (``pipeline_parallel/utils.set_streams``) to overlap them with another micro-batch's
  compute, and one hardware queue runs the two streams' kernels one after the other. It must
  not be 1 under Megatron-FSDP either: its all-gathers and reduce-scatters run on their own
  streams beside compute, and upstream Megatron-Bridge refuses 1 with it at config validation
  (``ConfigContainer._validate_and_apply_megatron_fsdp_v1_configs``), as Megatron-LM's
  ``validate_args`` does. HybridEP's ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` must divide
  the EP size (its ``HybridEPBuffer`` asserts it when the buffer is built).
  ``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` must be 1 or more when gated experts run Transformer
  Engine's op fuser (:func:`cutedsl_fused_grouped_mlp`): megatron-core's ``TEGroupedMLP``
  asserts that its fused implementation is supported, which it is for a SwiGLU or quick-GeGLU
  only with that variable set (``moe/experts.py`` ``_is_fused_impl_supported``).
- **Tuned**: a value that works either way and that upstream Megatron-Bridge's performance
  recipes measured to be fastest; the plan exports it and accepts any other value a recipe or a
  user sets. ``CUDA_DEVICE_MAX_CONNECTIONS`` (:func:`cuda_device_max_connections`): 32 on
  Blackwell (SM100) and newer, 1 on Hopper and older with TP or CP split, EP all-to-all
  overlap off and no Megatron-FSDP (kernels start in launch order, so each TP/CP comm kernel is
  queued before the GEMM it overlaps), else 32. The LayerNorm SM margins: 20
  (:data:`DEFAULT_LAYERNORM_SM_MARGIN`).

HybridEP's topology variables (:func:`hybrid_ep_environment`) are derived from the EP layout and
the GPU catalogue's NVLink domain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from megatron.bridge.training.hardware import gpu_spec, nvlink_ranks
from megatron.bridge.training.model_rules import fused_glu, fused_grouped_mlp
from megatron.bridge.training.parallel_layout import validate_parallel_size
from megatron.bridge.training.validators import (
    LIMITS,
    check_bool,
    check_choice,
    check_int,
    check_limit,
)

if TYPE_CHECKING:
    from megatron.bridge.training.job import JobDescription, ModelDescription

__all__ = [
    "CUDA_DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_LAYERNORM_SM_MARGIN",
    "HYBRID_EP_ENV_NAMES",
    "LaunchEnvEntry",
    "LaunchEnvPlan",
    "LaunchEnvSource",
    "MoeFlexDispatcherBackend",
    "check_live_environment",
    "cuda_device_max_connections",
    "cutedsl_fused_grouped_mlp",
    "failing_environment",
    "hybrid_ep_environment",
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

CUDA_DEFAULT_MAX_CONNECTIONS = 8
"""What CUDA uses when ``CUDA_DEVICE_MAX_CONNECTIONS`` is unset."""

DEFAULT_LAYERNORM_SM_MARGIN = 20
"""SMs LayerNorm kernels leave free so DP collectives can run beside them (tuned, not required).

Upstream Megatron-Bridge's performance recipes (``perf_recipes/*/<system>/*.py``) set 20 on
every system; nothing breaks at another value, the overlapped collectives only get more or
fewer SMs.
"""

CUDA_DEVICE_MAX_CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"
NVTE_FWD_LAYERNORM_SM_MARGIN = "NVTE_FWD_LAYERNORM_SM_MARGIN"
NVTE_BWD_LAYERNORM_SM_MARGIN = "NVTE_BWD_LAYERNORM_SM_MARGIN"
NCCL_P2P_NET_CHUNKSIZE = "NCCL_P2P_NET_CHUNKSIZE"
NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN = "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"
NVLINK_DOMAIN_SIZE = "NVLINK_DOMAIN_SIZE"
USE_MNNVL = "USE_MNNVL"
NVTE_CUTEDSL_FUSED_GROUPED_MLP = "NVTE_CUTEDSL_FUSED_GROUPED_MLP"

HYBRID_EP_ENV_NAMES: tuple[str, ...] = (
    NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN,
    NVLINK_DOMAIN_SIZE,
    USE_MNNVL,
)
"""The HybridEP topology variables, read by DeepEP's ``HybridEPBuffer`` (hybrid-ep branch) when
megatron-core builds it for ``moe_flex_dispatcher_backend="hybridep"``; megatron-core reads none
of them itself. ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN``: EP ranks per NVLink domain (the
buffer's ``num_of_ranks_per_node``; without it HybridEP detects the ranks it can reach and
warns when the variable differs). ``NVLINK_DOMAIN_SIZE``: GPUs of one physical NVLink domain
(earlier HybridEP releases derive the ranks per domain from it, default 8). ``USE_MNNVL``:
1 makes HybridEP share buffers through fabric (multi-node NVLink) memory handles, needed when
a domain spans nodes (earlier releases read it, default 0). DeepEP's own ``Buffer`` (backend
``deepep``) reads no launch variable: it sets the ``NVSHMEM_*`` variables it needs itself before
NVSHMEM starts."""


# --------------------------------------------------------------------------- validation


def validate_layernorm_sm_margin(value: object, *, name: str = "layernorm_sm_margin") -> int:
    """Check that a LayerNorm SM margin is an int within ``LIMITS["layernorm_sm_margin"]``
    (number of SMs left free): the check of the ``--layernorm-sm-margin`` flag and the plugin."""
    margin = check_int(
        "",
        name,
        value,
        minimum=LIMITS["layernorm_sm_margin"].minimum,
        unit="number of SMs",
        hint=(
            f"The default is {DEFAULT_LAYERNORM_SM_MARGIN}; use 0 to leave no SMs free, or "
            "disable the margin with enable_layernorm_sm_margin=False."
        ),
    )
    check_limit("layernorm_sm_margin", margin, label=name)  # the top, as --layernorm-sm-margin
    return margin


def validate_nccl_pp_comm_chunksize(
    value: object, *, name: str = "nccl_pp_comm_chunksize"
) -> int | None:
    """Check that an NCCL P2P chunk size is None (not set) or an int within
    ``LIMITS["nccl_pp_comm_chunksize"]`` (bytes): the check of ``--nccl-pp-chunksize`` and the
    plugin."""
    chunk = check_int(
        "",
        name,
        value,
        minimum=LIMITS["nccl_pp_comm_chunksize"].minimum,
        optional=True,
        unit="bytes",
        hint="Use None to keep NCCL's default chunk size.",
    )
    check_limit("nccl_pp_comm_chunksize", chunk, label=name)  # the top, as --nccl-pp-chunksize
    return chunk


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
    a2a_overlap: bool,
    megatron_fsdp: bool,
) -> tuple[int, str]:
    """Return the tuned ``CUDA_DEVICE_MAX_CONNECTIONS`` for a layout and a one-line reason.

    The values upstream Megatron-Bridge's performance recipes set (``perf_recipes/*/<system>/
    *.py``, ``cfg.env_vars``): 32 on Blackwell (SM100) and newer whatever the layout; on Hopper
    and older 1 with a TP or CP split, EP all-to-all overlap off and no Megatron-FSDP
    (``megatron_fsdp``, which needs more than 1), else 32. No upstream Hopper recipe runs
    Megatron-FSDP with a TP or CP split; there the plan takes 32, upstream's value wherever it
    does not set 1. A value is *required* only where :func:`check_live_environment` says so.
    """
    for name, value in (("tp_size", tp_size), ("cp_size", cp_size)):
        validate_parallel_size(name, value)
    check_bool("", "gpu_sm100_or_newer", gpu_sm100_or_newer)
    check_bool("", "a2a_overlap", a2a_overlap)
    check_bool("", "megatron_fsdp", megatron_fsdp)

    if gpu_sm100_or_newer:
        return 32, (
            "Blackwell (SM100+): many hardware queues so TP/CP, DP/PP and EP communication "
            "kernels run beside compute (upstream's tuned value on every Blackwell recipe)"
        )
    if megatron_fsdp:
        return 32, (
            "Hopper or older with Megatron-FSDP: its collectives need their own hardware queues "
            "(required: more than 1; upstream Megatron-Bridge refuses 1), so TP/CP comm kernels "
            "are not ordered by one queue"
        )
    if (tp_size > 1 or cp_size > 1) and not a2a_overlap:
        return 1, (
            f"Hopper or older with TP={tp_size}/CP={cp_size}: one hardware queue starts kernels "
            "in launch order, so each TP/CP comm kernel is queued before the GEMM it overlaps"
        )
    if a2a_overlap:
        return 32, (
            "Hopper or older with EP all-to-all overlap: its stream needs its own hardware "
            "queues (required: more than 1; 32 is upstream's tuned value)"
        )
    return 32, "Hopper or older without a TP/CP split: upstream's tuned value"


def cutedsl_fused_grouped_mlp(model: ModelDescription) -> bool:
    """The routed experts run Transformer Engine's CuTe DSL fused grouped MLP
    (``model_rules.fused_grouped_mlp``) with a gated SwiGLU or quick-GeGLU
    (``model_rules.fused_glu``), the activations whose fused path megatron-core takes only with
    ``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` set (``moe/experts.py``
    ``TEGroupedMLP._is_fused_impl_supported``; upstream Megatron-Bridge's performance scripts
    set it with the op fuser, ``scripts/performance/utils/utils.py``
    ``cutedsl_fused_grouped_mlp``)."""
    return fused_grouped_mlp(model) and fused_glu(model)


def hybrid_ep_environment(
    *,
    ep_size: int,
    etp_size: int = 1,
    gpu: str | None,
    nvlink_domain: int | None = None,
    gpus_per_node: int | None = None,
) -> tuple[LaunchEnvEntry, ...]:
    """HybridEP's topology variables (:data:`HYBRID_EP_ENV_NAMES`) for an EP layout on a GPU.

    The NVLink domain is the cluster's (:func:`~megatron.bridge.training.hardware.nvlink_ranks`:
    ``nvlink_domain`` where the job gives it, else the catalogue's, e.g. 72 on GB200 NVL72, else
    one node of ``gpus_per_node`` GPUs, default the catalogue's), with ``USE_MNNVL=1`` when it
    spans more than a node. megatron-core lays expert-tensor-parallel ranks innermost, so one domain
    holds ``domain // etp_size`` ranks of an EP group: the EP ranks per domain are the EP size
    when it fits, else that count when it divides the EP size (HybridEP asserts EP % ranks == 0).
    Otherwise, or without a GPU and a cluster, the variable is left unset and HybridEP detects
    the ranks it can reach (upstream refuses EP groups above a 72-GPU domain); without a GPU the
    given ``nvlink_domain`` / ``gpus_per_node`` alone set the domain, and ``USE_MNNVL`` needs
    ``gpus_per_node`` to be decided. Placement is assumed to fill
    domains in EP-aligned blocks (e.g. 64 ranks of a 72-GPU rack), as upstream's recipes do.
    """
    validate_parallel_size("ep_size", ep_size)
    validate_parallel_size("etp_size", etp_size)
    for name, value in (("nvlink_domain", nvlink_domain), ("gpus_per_node", gpus_per_node)):
        if value is not None:
            validate_parallel_size(name, value)
    spec = None if gpu is None else gpu_spec(gpu)
    domain = nvlink_ranks(spec, nvlink_domain=nvlink_domain, gpus_per_node=gpus_per_node)
    if domain is None:
        reason = (
            "no GPU named: HybridEP detects the NVLink domain itself (name the gpu, or the "
            "cluster's nvlink_domain, to export upstream's topology values)"
        )
        return tuple(LaunchEnvEntry(name=n, value=None, reason=reason) for n in HYBRID_EP_ENV_NAMES)
    node = gpus_per_node or (None if spec is None else spec.gpus_per_node)
    system = "this cluster" if spec is None else spec.name
    mnnvl: str | None
    if node is None:
        where = f"{system}: a {domain}-GPU NVLink domain"
        mnnvl = None
        mnnvl_why = (
            "the node size is unknown (no GPU named, no gpus_per_node): not set, HybridEP "
            "detects whether its domain spans nodes"
        )
    elif domain > node:
        where = f"{system}: one {domain}-GPU NVLink domain across nodes"
        mnnvl = "1"
        mnnvl_why = "the NVLink domain spans nodes: HybridEP shares buffers through fabric memory"
    else:
        where = f"{system}: NVLink joins the {domain} GPUs of a board"
        mnnvl = "0"
        mnnvl_why = "the NVLink domain is one node: no fabric memory handles"
    reach = max(domain // etp_size, 1)
    if ep_size <= reach:
        ranks: int | None = ep_size
        ranks_why = f"EP={ep_size} fits in one NVLink domain ({where})"
    elif ep_size % reach == 0:
        ranks = reach
        ranks_why = (
            f"EP={ep_size} spans {ep_size // reach} NVLink domains of {reach} EP ranks ({where}, "
            f"ETP={etp_size})"
        )
    else:
        ranks = None
        ranks_why = (
            f"EP={ep_size} does not split into NVLink domains of {reach} EP ranks ({where}, "
            f"ETP={etp_size}): not set, HybridEP detects the ranks it reaches"
        )
    return (
        LaunchEnvEntry(
            name=NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN,
            value=None if ranks is None else str(ranks),
            reason=ranks_why,
        ),
        LaunchEnvEntry(name=NVLINK_DOMAIN_SIZE, value=str(domain), reason=where),
        LaunchEnvEntry(name=USE_MNNVL, value=mnnvl, reason=mnnvl_why),
    )


LaunchEnvSource = Literal["derived", "user"]
"""Where a launch variable's value comes from: ``derived`` by this plan from the layout, or
``user``: set in ``cfg.env_vars`` and kept as written (``env_vars.with_user_env``)."""


@dataclass(frozen=True, kw_only=True)
class LaunchEnvEntry:
    """One launch-time environment variable and the decision about it."""

    name: str
    """Environment variable name."""
    value: str | None
    """Value to export; None means deliberately not set (``reason`` says why)."""
    reason: str
    """One line saying why this value (or why nothing)."""
    source: LaunchEnvSource = "derived"
    """``derived`` (this plan's value) or ``user`` (``cfg.env_vars``'s, kept as written)."""
    note: str | None = None
    """For a user's value other than the plan's: what the plan would have set, and why."""

    def __post_init__(self) -> None:
        check_choice("LaunchEnvEntry", "source", self.source, LaunchEnvSource)


@dataclass(frozen=True, kw_only=True)
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
            why = e.reason if e.source == "derived" else f"user: {e.reason}"
            lines.append(f"{shown}  # {why}" + (f"; NOTE: {e.note}" if e.note else ""))
        return lines


def _generation(gpu: str | None, gpu_sm100_or_newer: bool | None) -> bool:
    """The GPU generation from a catalogue name, else from the flag (one of them must say)."""
    if gpu is not None:
        generation = gpu_spec(gpu).sm100_or_newer
        if gpu_sm100_or_newer is not None and gpu_sm100_or_newer != generation:
            raise ValueError(
                f"gpu_sm100_or_newer={gpu_sm100_or_newer} contradicts the layout's gpu "
                f"{gpu!r}; pass one of them."
            )
        return generation
    if gpu_sm100_or_newer is None:
        raise ValueError(
            "The GPU generation is unknown: name the gpu in the layout (e.g. gpu='h100') or pass "
            "gpu_sm100_or_newer."
        )
    return gpu_sm100_or_newer


def plan_launch_env(
    *,
    gpu_sm100_or_newer: bool | None = None,
    gpu: str | None = None,
    nvlink_domain: int | None = None,
    gpus_per_node: int | None = None,
    tp_size: int = 1,
    cp_size: int = 1,
    dp_size: int = 1,
    pp_size: int = 1,
    ep_size: int = 1,
    etp_size: int = 1,
    moe_flex_dispatcher_backend: str | None = None,
    megatron_fsdp: bool = False,
    cutedsl_fused_grouped_mlp: bool = False,
    a2a_overlap: bool = False,
    enable_layernorm_sm_margin: bool = True,
    layernorm_sm_margin: int = DEFAULT_LAYERNORM_SM_MARGIN,
    nccl_pp_comm_chunksize: int | None = None,
) -> LaunchEnvPlan:
    """Decide the launch environment for a layout; pure, validates every input.

    The GPU generation comes from ``gpu`` (a catalogue name) when given, else from
    ``gpu_sm100_or_newer``; HybridEP's topology (backend ``hybridep`` only) needs ``gpu``, and
    takes the cluster's ``nvlink_domain`` and ``gpus_per_node`` where given.
    ``cutedsl_fused_grouped_mlp`` (:func:`cutedsl_fused_grouped_mlp` of the model) exports
    ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``.
    """
    generation = _generation(gpu, gpu_sm100_or_newer)
    backend = _validated_layout(tp_size, cp_size, dp_size, pp_size, moe_flex_dispatcher_backend)
    check_bool("", "cutedsl_fused_grouped_mlp", cutedsl_fused_grouped_mlp)
    check_bool("", "enable_layernorm_sm_margin", enable_layernorm_sm_margin)
    margin = validate_layernorm_sm_margin(layernorm_sm_margin)
    chunk = validate_nccl_pp_comm_chunksize(nccl_pp_comm_chunksize)
    connections, why = cuda_device_max_connections(
        gpu_sm100_or_newer=generation,
        tp_size=tp_size,
        cp_size=cp_size,
        a2a_overlap=a2a_overlap,
        megatron_fsdp=megatron_fsdp,
    )
    if enable_layernorm_sm_margin:
        margin_setting = (
            str(margin),
            f"LayerNorm kernels leave {margin} SMs free for overlapped DP collectives (tuned)",
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
    entries = tuple(
        LaunchEnvEntry(name=name, value=value, reason=reason) for name, (value, reason) in settings
    )
    if backend == "hybridep":
        entries += hybrid_ep_environment(
            ep_size=ep_size,
            etp_size=etp_size,
            gpu=gpu,
            nvlink_domain=nvlink_domain,
            gpus_per_node=gpus_per_node,
        )
    if cutedsl_fused_grouped_mlp:
        entries += (
            LaunchEnvEntry(
                name=NVTE_CUTEDSL_FUSED_GROUPED_MLP,
                value="1",
                reason=(
                    "use_transformer_engine_op_fuser with gated experts: megatron-core builds "
                    "their fused grouped MLP only with it (required; unset, the model build "
                    "fails its assertion)"
                ),
            ),
        )
    return LaunchEnvPlan(entries=entries)


# --------------------------------------------------------------------------- runtime check


def _live_int(env: Mapping[str, str], name: str) -> int | str | None:
    """The integer ``env[name]`` holds, None when unset, the raw text when it is no integer."""
    raw = env.get(name)
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        return str(raw)


def check_live_environment(
    *,
    tp_size: int,
    cp_size: int,
    dp_size: int,
    pp_size: int,
    ep_size: int = 1,
    etp_size: int = 1,
    a2a_overlap: bool,
    moe_flex_dispatcher_backend: str | None,
    megatron_fsdp: bool,
    cutedsl_fused_grouped_mlp: bool = False,
    env: Mapping[str, str],
) -> list[str]:
    """Compare an environment with what the layout *requires*; return readable problems.

    ``env`` is usually ``os.environ`` (or the environment a launcher will give). Only values
    that break an enabled feature are problems; a tuned value other than the plan's (a recipe's
    ``CUDA_DEVICE_MAX_CONNECTIONS=8`` where the plan says 32, a LayerNorm margin of 16) is
    accepted. The requirements:

    - EP all-to-all overlap: ``CUDA_DEVICE_MAX_CONNECTIONS`` above 1 (unset means CUDA's 8):
      the all-to-all stream and the compute stream must run side by side.
    - Megatron-FSDP: ``CUDA_DEVICE_MAX_CONNECTIONS`` not 1 (its collectives run on their own
      streams; upstream Megatron-Bridge asserts it when it validates the config).
    - the requirements the job fails without when it starts (:func:`failing_environment`).

    A job that breaks one of the first two still runs, only slower: the caller decides whether
    to warn or raise. An empty list means no problem.
    """
    # The layout's sizes and backend are checked once, by failing_environment below.
    check_bool("", "a2a_overlap", a2a_overlap)
    check_bool("", "megatron_fsdp", megatron_fsdp)
    problems = []

    live = _live_int(env, CUDA_DEVICE_MAX_CONNECTIONS)
    if isinstance(live, str):
        problems.append(
            f"{CUDA_DEVICE_MAX_CONNECTIONS}={live!r} is not an integer; CUDA ignores it. "
            "Set it at launch time (e.g. with PerfEnvPlugin)."
        )
    elif a2a_overlap and live == 1:
        problems.append(
            f"EP all-to-all overlap is on, but {CUDA_DEVICE_MAX_CONNECTIONS}=1 gives CUDA one "
            "hardware queue, so the all-to-all stream and the compute stream run one after the "
            "other and nothing overlaps. It must be above 1 (upstream's tuned value: 32) and "
            "set before CUDA starts: put it on the launcher (PerfEnvPlugin does)."
        )
    if megatron_fsdp and live == 1:
        problems.append(
            f"Megatron-FSDP is on (use_megatron_fsdp), but {CUDA_DEVICE_MAX_CONNECTIONS}=1 gives "
            "CUDA one hardware queue, so its all-gathers and reduce-scatters run one after the "
            "compute instead of beside it; upstream Megatron-Bridge refuses it when it validates "
            f"the config ('FSDP requires {CUDA_DEVICE_MAX_CONNECTIONS} > 1 or unset'). Unset it "
            "or set it above 1 (32) on the launcher."
        )
    return problems + failing_environment(
        tp_size=tp_size,
        cp_size=cp_size,
        dp_size=dp_size,
        pp_size=pp_size,
        ep_size=ep_size,
        etp_size=etp_size,
        moe_flex_dispatcher_backend=moe_flex_dispatcher_backend,
        cutedsl_fused_grouped_mlp=cutedsl_fused_grouped_mlp,
        env=env,
    )


def failing_environment(
    *,
    tp_size: int,
    cp_size: int,
    dp_size: int,
    pp_size: int,
    ep_size: int = 1,
    etp_size: int = 1,
    moe_flex_dispatcher_backend: str | None,
    megatron_fsdp: bool = False,
    cutedsl_fused_grouped_mlp: bool = False,
    env: Mapping[str, str],
) -> list[str]:
    """The problems of :func:`check_live_environment` with which the job fails when it starts,
    whoever set the value: the model build or the first MoE layer stops on an assertion.

    - HybridEP backend: ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN``, when set, an integer that
      divides the EP size (``HybridEPBuffer`` reads it with ``int()`` and asserts it).
    - Gated experts under the op fuser (``cutedsl_fused_grouped_mlp``):
      ``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` an integer of 1 or more (megatron-core reads it with
      ``int()`` and asserts the fused path is supported).

    ``runtime_config_update`` and ``PerfEnvPlugin`` refuse them. The keywords are a layout's
    (:func:`launch_layout`); ``megatron_fsdp`` is one of them and no requirement here reads it.
    """
    backend = _validated_layout(tp_size, cp_size, dp_size, pp_size, moe_flex_dispatcher_backend)
    validate_parallel_size("ep_size", ep_size)
    validate_parallel_size("etp_size", etp_size)
    check_bool("", "cutedsl_fused_grouped_mlp", cutedsl_fused_grouped_mlp)
    problems = []
    if backend == "hybridep":
        ranks = _live_int(env, NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN)
        if isinstance(ranks, str) or (isinstance(ranks, int) and ranks < 1):
            problems.append(
                f"{NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN}={ranks!r} is not a positive "
                "integer; HybridEP reads it with int() when it builds its buffer."
            )
        elif isinstance(ranks, int) and ep_size % ranks:
            problems.append(
                f"{NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN}={ranks} does not divide EP="
                f"{ep_size}; HybridEP asserts that the EP group splits into whole NVLink "
                "domains. Use a divisor of the EP size, or unset it to let HybridEP detect it."
            )
    if cutedsl_fused_grouped_mlp:
        fused = _live_int(env, NVTE_CUTEDSL_FUSED_GROUPED_MLP)
        if not isinstance(fused, int) or fused < 1:
            shown = "unset" if fused is None else f"{fused!r}"
            problems.append(
                "use_transformer_engine_op_fuser is on for gated (SwiGLU or quick-GeGLU) "
                f"experts, but {NVTE_CUTEDSL_FUSED_GROUPED_MLP} is {shown}: megatron-core's "
                "TEGroupedMLP takes Transformer Engine's fused grouped MLP only when it is an "
                "integer of 1 or more, and asserts that the fused path is supported, so the "
                "model build fails. Set it to 1 on the launcher (PerfEnvPlugin does), or set "
                "use_transformer_engine_op_fuser=False."
            )
    return problems


# --------------------------------------------------------------------------- from a plan


def launch_layout(job: JobDescription) -> dict[str, Any]:
    """The job's parallel layout, as the keywords the rules above take (``tp_size`` ...)."""
    return {
        "tp_size": job.tp_size,
        "cp_size": job.cp_size,
        "dp_size": job.dp_size,
        "pp_size": job.pp_size,
        "ep_size": job.ep_size,
        "etp_size": job.etp_size,
        "moe_flex_dispatcher_backend": job.model.flex_backend,
        "megatron_fsdp": job.use_megatron_fsdp,
        "cutedsl_fused_grouped_mlp": cutedsl_fused_grouped_mlp(job.model),
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
    overlap survived in it. The GPU generation comes from the job's GPU when it names one, else
    from ``gpu_sm100_or_newer`` (which must then be given); the NVLink domain from the job's
    ``nvlink_domain`` and ``gpus_per_node``, else its GPU's.
    """
    return plan_launch_env(
        gpu_sm100_or_newer=gpu_sm100_or_newer,
        gpu=job.gpu,
        nvlink_domain=job.nvlink_domain,
        gpus_per_node=job.gpus_per_node,
        **launch_layout(job),
        a2a_overlap=a2a_overlap,
        enable_layernorm_sm_margin=enable_layernorm_sm_margin,
        layernorm_sm_margin=layernorm_sm_margin,
        nccl_pp_comm_chunksize=nccl_pp_comm_chunksize,
    )
