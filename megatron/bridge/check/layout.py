"""The parallel layout one check runs with: the recipe's sizes fitted to the world.

:func:`fit_layout` turns the recipe's sizes and the command line's into a :class:`Layout` that
splits the world, with a note for each split of the recipe it had to drop (``check.tiny`` shrinks the model onto
it). Plain values only: nothing here imports torch, megatron-core or a recipe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Layout", "check_overrides_fit", "fit_layout"]

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
    ep: int = 1
    """Expert-parallel size."""
    etp: int | None = None
    """Expert tensor-parallel size; None: the tensor-parallel size (megatron-core's default)."""

    @property
    def chunks(self) -> int:
        """Model chunks per rank (one per virtual stage)."""
        return self.vpp or 1

    def describe(self) -> str:
        """``TP2 x PP2 (VPP2) x CP1 x DP1``, with `` x EP2 (ETP1)`` for expert parallelism."""
        vpp = f" (VPP{self.vpp})" if self.vpp else ""
        experts = ""
        if self.ep > 1:
            experts = f" x EP{self.ep}" + (f" (ETP{self.etp})" if self.etp is not None else "")
        return f"TP{self.tp} x PP{self.pp}{vpp} x CP{self.cp} x DP{self.dp}{experts}"


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

    ``recipe`` maps ``tp``, ``pp``, ``vpp``, ``cp``, ``ep``, ``etp`` to sizes and ``overrides``
    maps ``tp``, ``pp``, ``vpp``, ``cp`` (None: not given). An override is used as given.
    Without ``tiny`` the recipe's sizes are used as they are; with it, each split the recipe
    uses becomes 2 while the world still divides, TP first, then PP (with VPP 2 when the recipe
    interleaves), then CP; the rest of the world is data parallel. The experts then split over
    EP 2 when the recipe uses EP and the expert grid (ETP x EP x PP) still divides the world;
    ETP stays 1 when the recipe's is 1 and follows TP otherwise. ``ValueError`` when the sizes
    do not divide the world.
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
    ep, etp = _fit_experts(world_size, recipe, tp=tp, pp=pp, tiny=tiny, notes=notes)
    layout = Layout(tp=tp, pp=pp, vpp=vpp, cp=cp, dp=world_size // (tp * pp * cp), ep=ep, etp=etp)
    return layout, notes


def _fit_experts(
    world_size: int,
    recipe: Mapping[str, int | None],
    *,
    tp: int,
    pp: int,
    tiny: bool,
    notes: list[str],
) -> tuple[int, int | None]:
    """(EP, ETP) on the fitted layout: the recipe's, or with ``tiny`` EP 2 where it fits."""
    ep, etp = recipe.get("ep") or 1, recipe.get("etp")
    if tiny:
        etp = None if etp is None else (1 if etp == 1 else tp)
        if ep > 1:
            grid = (etp or tp) * pp
            if world_size % (grid * 2) == 0:
                ep = 2
            else:
                notes.append(
                    f"EP{ep} of the recipe dropped: a world of {world_size} has no room for it "
                    f"beside ETP x PP = {grid}"
                )
                ep = 1
    grid = (etp or tp) * ep * pp
    if world_size % grid:
        raise ValueError(
            f"world size {world_size} is not divisible by the expert grid ETP{etp or tp} x EP{ep} "
            f"x PP{pp} = {grid}; change the expert sizes or --nproc-per-node so it divides."
        )
    return ep, etp
