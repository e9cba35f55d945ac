"""``bridge-overlap search``: the job the flags describe, searched (:func:`run_search`).

The model, GPU and precision come from the flags exactly as ``explain`` reads them
(:func:`~megatron.bridge.cli.flags.flags_spec`); the search chooses the layout, and searches the
TP and EP overlap as ``--tp-comm-overlap`` and ``--ep-overlap`` say. A recipe with a
published run for the GPU, precision, GPU count and global batch has that run costed and
ranked beside the search's.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from megatron.bridge.cli.flags import flags_spec, te_of
from megatron.bridge.cli.planning import _check_plot_path
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.recipes.spec import RecipeSpec
from megatron.bridge.search import SearchResult, search
from megatron.bridge.search.report import document, render

__all__ = ["run_search"]


class _ProgressBar:
    """A progress bar on stderr, drawn only when stderr is a terminal (never into a pipe or a
    log file), redrawn at most once per percent."""

    def __init__(self) -> None:
        self.shown = -1
        self.active = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.active or total <= 0:
            return
        percent = min(100, done * 100 // total)
        if percent == self.shown:
            return
        self.shown = percent
        bar = "#" * (percent // 4)
        sys.stderr.write(f"\rsearch [{bar:<25}] {percent:3d}% ({done}/{total})")
        if percent == 100:
            sys.stderr.write("\n")
        sys.stderr.flush()

    def close(self) -> None:
        """End a bar left unfinished (the search stopped: Ctrl-C, an error) with its line, so
        that what is printed next starts a line of its own."""
        if self.active and 0 <= self.shown < 100:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.shown = 100


def _published(spec: RecipeSpec, world_sizes: tuple[int, ...], gbs: int) -> RecipeSpec | None:
    """The recipe's published run for the spec's GPU and precision as a job on this model,
    when its GPU count is searched and its global batch is the one searched."""
    run = spec.published_run(None, None)
    if run is None:
        return None
    changes = dict(run.changes)
    if changes.get("world_size") not in world_sizes or changes.get("global_batch_size") != gbs:
        return None
    return spec.changed(**changes)


def run_search(args: argparse.Namespace) -> tuple[SearchResult, dict[str, Any], str]:
    """Search the job the command line describes; the result, its JSON document and its text.

    ``ValueError`` (exit 2) for input the search cannot use: no global batch size, a world size
    no layout tiles, or no layout that fits.
    """
    if args.recipe is not None and not args.recipe.strip():
        raise ValueError("--recipe '' names no recipe; give a name (see 'bridge-overlap recipes').")
    if args.plot is not None:
        _check_plot_path(args.plot)  # before searching, which can take a minute
    base = recipe_spec(args.recipe) if args.recipe else None
    if args.recipe and base is None:
        raise ValueError(
            f"Recipe {args.recipe!r} returns a ConfigContainer: it has no job description to "
            "search without torch."
        )
    spec = flags_spec(args, base)
    world_sizes = args.world_sizes or (spec.job.world_size,)
    gbs = spec.job.global_batch_size
    if gbs is None:
        raise ValueError(
            "search needs the global batch size: give --global-batch-size (the samples per "
            "optimizer step), or a --recipe that has one."
        )
    bar = None if args.json else _ProgressBar()
    try:
        result = search(
            spec,
            world_sizes=world_sizes,
            global_batch_size=gbs,
            top=args.top,
            te=te_of(args),
            progress=bar,
            published=_published(spec, world_sizes, gbs) if args.recipe else None,
            tp_overlap=args.search_tp_overlap,
            ep_overlap=args.search_ep_overlap,
        )
    finally:
        if bar is not None:
            bar.close()
    if not result.ranked:
        counts = result.counts
        raise ValueError(
            f"no layout of this model fits {', '.join(map(str, world_sizes))} x "
            f"{spec.job.gpu} at global batch {gbs}: {counts['layouts']} layouts tried, "
            f"{counts['rejected'] + counts['overlap_refused']} refused by a layout rule, "
            f"{counts['pruned'] + counts['no_fit']} above the GPU's memory by the estimate "
            f"({counts['pruned']} by their 16-bit weights alone). Use "
            "more GPUs, a GPU with more memory, or a smaller global batch or sequence."
            + (
                f" The most frequent refusal ({result.refusals[0][1]} layouts): "
                f"{result.refusals[0][0]}"
                if result.refusals
                else ""
            )
        )
    doc = document(result, top=args.top, recipe=args.recipe)
    if args.plot is not None:
        # The picture module (matplotlib's part) loads only for --plot.
        from megatron.bridge.search.plot import plot_search

        try:
            plot_search(result, args.plot, title=args.recipe)
        except (ValueError, ImportError, OSError) as exc:
            raise ValueError(f"--plot {args.plot}: {exc}") from None
    return result, doc, render(result, top=args.top, recipe=args.recipe)
