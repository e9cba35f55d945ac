"""The parallel layout one check runs with: the recipe's sizes fitted to the world.

:func:`fit_layout` turns the recipe's sizes and the command line's into a :class:`Layout` that
splits the world, with a note for each split of the recipe it had to drop;
:func:`tiny_model_fields` gives the model sizes ``--tiny`` builds with on that layout. Plain
values only: nothing here imports torch, megatron-core or a recipe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Layout", "check_overrides_fit", "fit_layout", "tiny_model_fields"]

#: Split sizes ``--tiny`` fills in, in this order (TP first: it is what TP overlap needs).
_TINY_ORDER = ("tp", "pp", "cp")


@dataclass(frozen=True, kw_only=True)
class Layout:
    """The parallel sizes one check runs with."""

    tp: int
    """Tensor-parallel size."""
    pp: int
    """Pipeline-parallel size."""
    vpp: int | None
    """Virtual pipeline stages per pipeline rank; None without interleaving."""
    cp: int
    """Context-parallel size."""
    dp: int
    """Data-parallel size: what the world leaves after TP x PP x CP."""

    @property
    def chunks(self) -> int:
        """Model chunks per rank (one per virtual stage)."""
        return self.vpp or 1

    def describe(self) -> str:
        """``TP2 x PP2 (VPP2) x CP1 x DP1``."""
        vpp = f" (VPP{self.vpp})" if self.vpp else ""
        return f"TP{self.tp} x PP{self.pp}{vpp} x CP{self.cp} x DP{self.dp}"


def _check_fits(world_size: int, tp: int, pp: int, cp: int) -> None:
    model_parallel = tp * pp * cp
    if world_size % model_parallel:
        raise ValueError(
            f"world size {world_size} is not divisible by TP{tp} x PP{pp} x CP{cp} = "
            f"{model_parallel}; change --tp/--pp/--cp or --nproc-per-node so the product "
            "divides the number of processes."
        )


def check_overrides_fit(world_size: int, overrides: Mapping[str, int | None]) -> None:
    """Refuse sizes given on the command line that cannot split the world, before any import."""
    _check_fits(world_size, *(overrides.get(name) or 1 for name in ("tp", "pp", "cp")))


def fit_layout(
    *,
    world_size: int,
    recipe: Mapping[str, int | None],
    overrides: Mapping[str, int | None],
    tiny: bool,
) -> tuple[Layout, list[str]]:
    """The layout to check, and a note for each of the recipe's splits it had to drop.

    ``recipe`` and ``overrides`` map ``tp``, ``pp``, ``vpp``, ``cp`` to sizes (None: not given).
    An override is used as given. Without ``tiny`` the recipe's sizes are used as they are;
    with it, each split the recipe uses becomes 2 while the world still divides, TP first, then
    PP (with VPP 2 when the recipe interleaves), then CP; the rest of the world is data
    parallel. ``ValueError`` when the sizes do not divide the world.
    """
    check_overrides_fit(world_size, overrides)
    sizes = {name: overrides[name] for name in _TINY_ORDER if overrides.get(name) is not None}
    notes: list[str] = []
    for name in _TINY_ORDER:
        if name in sizes:
            continue
        wanted = recipe[name] or 1
        if tiny and wanted > 1:
            used = math.prod(sizes.values())
            if world_size % (used * 2) == 0:
                sizes[name] = 2
            else:
                sizes[name] = 1
                beside = f" beside {used} model-parallel ranks" if used > 1 else ""
                notes.append(
                    f"{name.upper()}{wanted} of the recipe dropped: a world of {world_size} "
                    f"has no room left for it{beside}"
                )
        else:
            sizes[name] = wanted
    tp, pp, cp = sizes["tp"], sizes["pp"], sizes["cp"]

    if overrides.get("vpp") is not None:
        vpp = overrides["vpp"]
        if vpp > 1 and pp == 1:
            raise ValueError(f"--vpp {vpp} needs pipeline parallelism (PP > 1), but PP is 1.")
    else:
        vpp = recipe.get("vpp")
        if vpp is not None and vpp > 1 and pp == 1:
            notes.append(
                f"VPP{vpp} of the recipe dropped: PP is 1, so there is nothing to interleave"
            )
            vpp = None
        elif tiny and vpp is not None and vpp > 1:
            vpp = 2
    vpp = None if vpp in (None, 1) else vpp

    _check_fits(world_size, tp, pp, cp)
    layout = Layout(tp=tp, pp=pp, vpp=vpp, cp=cp, dp=world_size // (tp * pp * cp))
    return layout, notes


def tiny_model_fields(layout: Layout, *, grouped_query_attention: bool) -> dict[str, Any]:
    """Model sizes small enough to build on a laptop, still valid for ``layout``.

    One layer per pipeline chunk; two attention heads per TP rank (one query group per TP rank
    for grouped-query attention) of width 16; a sequence that splits over CP (2 x CP pieces,
    for load balancing) and over TP (sequence parallelism).
    """
    heads = 2 * layout.tp
    return {
        "num_layers": layout.pp * layout.chunks,
        "hidden_size": 16 * heads,
        "ffn_hidden_size": 64 * heads,
        "num_attention_heads": heads,
        "num_query_groups": layout.tp if grouped_query_attention else None,
        "vocab_size": 1000,
        "seq_length": 32 * layout.tp * layout.cp,
    }
