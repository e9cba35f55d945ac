"""Whether Transformer Engine can run here, and what to assume when planning for a cluster.

``transformer_engine.pytorch`` is imported at most once per process, and only when asked: a
CPU-only machine with TE installed raises ``RuntimeError`` (no CUDA) rather than
``ImportError``; both mean "not available here", and the message is kept as the reason.

Planning on a laptop or a login node for a cluster where TE is installed uses
``te_status("assume")`` instead of probing; :func:`megatron_core_sees` lets megatron-core's own
config validation read that version too.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

from megatron.bridge.training.model_rules import TE_OP_FUSER_MINIMUM

__all__ = [
    "ASSUMED_TE_VERSION",
    "TE_REQUIREMENTS",
    "TEMode",
    "TEStatus",
    "current_te_status",
    "megatron_core_sees",
    "probe_transformer_engine",
    "te_status",
    "te_version_at_least",
]

#: The Transformer Engine versions the rules read: what needs each one, and the version.
TE_REQUIREMENTS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        # TE's delayed-wgrad API for a wgrad that feeds the gradient reduction or main_grad.
        "delay_wgrad_compute with overlap_grad_reduce or gradient_accumulation_fusion": (2, 7),
        # TE's CUDA graphs of layers whose wgrad is delayed.
        "delay_wgrad_compute with cuda_graph_impl='transformer_engine'": (2, 10),
        # Capturing the delayed wgrad inside a per-layer graph scope (attn, moe_router).
        "delay_wgrad_compute with a CUDA graph scope holding delayed weights": (2, 12),
        # Megatron-FSDP accumulating wgrads into its main-grad buffer through TE's fused path
        # (megatron-core's FullyShardedDataParallel.__init__ checks it).
        "Megatron-FSDP with gradient_accumulation_fusion": (2, 10),
        # The experts' fused grouped MLP under use_transformer_engine_op_fuser
        # (model_rules.TE_OP_FUSER_MINIMUM).
        "use_transformer_engine_op_fuser on grouped-GEMM experts": TE_OP_FUSER_MINIMUM,
    }
)

ASSUMED_TE_VERSION = ".".join(str(part) for part in max(TE_REQUIREMENTS.values()))
"""The version ``te_status("assume")`` plans with: the newest any rule reads, so an assumed TE
refuses nothing for its version; plan for an older cluster with ``te_status("assume", version=)``."""

TEMode = Literal["detect", "assume"]
"""How to decide TE availability: probe this machine, or assume it is installed where the job runs."""

# The package whose ``HAVE_TE`` attribute a test (or a user, as with upstream Megatron-Bridge)
# may patch to pretend TE is or is not there.
_PACKAGE = "megatron.bridge.training.comm_overlap"


@dataclass(frozen=True)
class TEStatus:
    """Whether ``transformer_engine.pytorch`` imports here, its version, and why not if it does not."""

    available: bool
    """True when ``import transformer_engine.pytorch`` succeeded (or is assumed to)."""
    version: str | None
    """Installed Transformer Engine version, when known."""
    reason: str
    """Why TE is unavailable (empty when available)."""


_PROBED: TEStatus | None = None


@functools.cache
def te_version() -> str | None:
    """The installed Transformer Engine version, or None (read once: it scans sys.path)."""
    import importlib.metadata

    for dist in ("transformer-engine", "transformer_engine", "transformer-engine-torch"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def probe_transformer_engine(*, refresh: bool = False) -> TEStatus:
    """Try ``import transformer_engine.pytorch`` once and remember the outcome."""
    global _PROBED
    if _PROBED is None or refresh:
        try:
            importlib.import_module("transformer_engine.pytorch")
        except ImportError as exc:
            _PROBED = TEStatus(
                False,
                None,
                f"transformer_engine.pytorch is not importable ({exc}); install the 'te' extra "
                "(pip install 'megatron-bridge-overlap[te]') on a CUDA machine",
            )
        except Exception as exc:  # TE raises RuntimeError/OSError when CUDA or its libs are missing
            _PROBED = TEStatus(
                False,
                te_version(),
                f"transformer_engine.pytorch is installed but failed to import "
                f"({type(exc).__name__}: {exc})",
            )
        else:
            _PROBED = TEStatus(True, te_version(), "")
    return _PROBED


def current_te_status() -> TEStatus:
    """TE status as the library sees it: a patched ``comm_overlap.HAVE_TE`` wins over the probe."""
    package = sys.modules.get(_PACKAGE)
    patched = vars(package).get("HAVE_TE") if package is not None else None
    if patched is None:
        return probe_transformer_engine()
    if patched:
        return TEStatus(True, te_version(), "")
    return TEStatus(False, None, "Transformer Engine is not available (HAVE_TE is False)")


def te_status(mode: TEMode = "detect", *, version: str | None = None) -> TEStatus:
    """TE availability for planning: ``"detect"`` here, or ``"assume"`` it is installed on the cluster.

    ``"assume"`` lets a recipe author resolve a plan "as on the cluster" on a machine without TE
    (a laptop, a login node), without patching anything: at ``version`` (the cluster's), else at
    :data:`ASSUMED_TE_VERSION`. ``version`` is for ``"assume"`` only.
    """
    if mode == "detect":
        if version is not None:
            raise ValueError(
                f"te_version={version!r} applies to te='assume'; te='detect' reads the version "
                "installed here."
            )
        return current_te_status()
    if mode == "assume":
        if version is not None and not _parse_version(version):
            raise ValueError(
                f"te_version={version!r} is not a Transformer Engine version; give it as "
                "MAJOR.MINOR, e.g. '2.7'."
            )
        return TEStatus(True, version or ASSUMED_TE_VERSION, "")
    raise ValueError(f"te must be one of {list(get_args(TEMode))}, got {mode!r}.")


def _parse_version(version: str) -> tuple[int, int] | None:
    pieces = version.split(".")
    if len(pieces) < 2:
        return None
    numbers: list[int] = []
    for piece in pieces[:2]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            return None
        numbers.append(int(digits))
    return numbers[0], numbers[1]


def te_version_at_least(version: str | None, minimum: tuple[int, int]) -> bool:
    """Whether a TE version string (``"2.7.0+abc"``) is at least ``minimum``; None is never."""
    parsed = _parse_version(version) if version else None
    return parsed is not None and parsed >= minimum


_SEEN_VERSION_LOCK = threading.RLock()
"""Held while :func:`megatron_core_sees` has megatron-core's process-wide TE version changed
(re-entrant: a block inside another, on the same thread, sets and restores in turn)."""


@contextlib.contextmanager
def megatron_core_sees(status: TEStatus | None) -> Iterator[None]:
    """While the block runs, megatron-core's TE version checks read ``status``'s version.

    megatron-core's config validation (``TransformerConfig.__post_init__``: MoE in FP8 needs TE
    >= 1.7, grouped GEMMs >= 1.11, ...) asks ``megatron.core.utils.is_te_min_version``, which
    reads the version cached in ``megatron.core.utils._te_version`` (0.0.0 where TE is not
    installed). A plan for a cluster (``te_status("assume")``, or the cluster's version given)
    is validated against the cluster's version: that cache holds it for the block and gets its
    old value back afterwards, also when the block raises. Only the version is set: whether
    TE imports (megatron-core's ``HAVE_TE`` flags, its layer specs) does not change, so nothing
    that needs TE runs as if TE were here. A status that is None, unavailable or of unknown
    version leaves megatron-core reading what is installed. megatron-core's cache is one per
    process, so blocks of different threads run one at a time (:data:`_SEEN_VERSION_LOCK`):
    each reads its own version, and the cache ends as it began.
    """
    if status is None or not status.available or status.version is None:
        yield
        return
    # megatron-core and packaging: only where megatron-core validates a config.
    from megatron.core import utils as mcore_utils
    from packaging.version import Version

    with _SEEN_VERSION_LOCK:
        before = mcore_utils._te_version
        mcore_utils._te_version = Version(status.version)
        try:
            yield
        finally:
            mcore_utils._te_version = before
