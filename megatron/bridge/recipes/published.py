"""The published runs of a recipe: for each system and precision, the layout it ran in.

A recipe's :class:`~megatron.bridge.recipes.spec.RecipeSpec` holds its published runs
(``RecipeSpec.published``), one :class:`PublishedRun` per GPU and precision. Asking a recipe for
a GPU or a precision (``spec(gpu="gb200", precision="fp8_mx")``, ``plan_recipe(name, gpu=...)``,
``bridge-overlap explain --recipe NAME --gpu ...``) starts from the run published for that pair
(:meth:`RecipeSpec.with_overrides`); the recipe's other keywords then change that layout. A pair
with no published run keeps the recipe's default layout on the GPU and precision asked for.

The shipped recipes' runs are one table, ``published_runs.csv`` beside this module (one row per
recipe, GPU and precision), read by :func:`published_runs`. Each run is built by :func:`run`,
which gives every layout field a value (the ones a run does not name take megatron-core's
defaults), so a run is the same whichever run the spec was at before. Pure data: importing this
module loads no torch.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from megatron.bridge.training import hardware
from megatron.bridge.training.job import OUTER_DP_SHARDING_STRATEGIES
from megatron.bridge.training.precisions import canonical_precision

__all__ = [
    "PUBLISHED_RUNS_TABLE",
    "PublishedRun",
    "offload_fields",
    "published_runs",
    "recompute_fields",
    "run",
]

PUBLISHED_RUNS_TABLE = Path(__file__).with_name("published_runs.csv")
"""The shipped recipes' published runs, one CSV row each (its comment lines name the columns)."""


@dataclass(frozen=True)
class PublishedRun:
    """One published run of a recipe: its GPU, its precision and its layout."""

    gpu: str
    """The GPU, as the catalogue names it (``hardware.GPUS``)."""
    precision: str
    """The compute dtype (``precisions.PRECISIONS``)."""
    changes: Mapping[str, Any]
    """The layout, as :meth:`RecipeSpec.changed` takes it: GPU count, batch sizes and
    ``model.<field>`` for the parallel sizes, the pipeline layout, the activation recompute
    and the dispatcher."""
    source: str
    """Where the run is published: the release table and upstream's perf recipe function."""

    @property
    def key(self) -> tuple[str, str]:
        """(gpu, precision): what picks this run."""
        return (self.gpu, self.precision)


def run(
    gpu: str,
    precision: str,
    *,
    gpus: int,
    gbs: int,
    mbs: int = 1,
    tp: int = 1,
    pp: int = 1,
    vp: int | None = None,
    cp: int = 1,
    ep: int = 1,
    etp: int | None = None,
    layout: str | None = None,
    recompute: str = "",
    fsdp: bool = False,
    hsdp: tuple[int, str] | None = None,
    offload: str = "",
    fuser: bool = False,
    source: str,
    **model: Any,
) -> PublishedRun:
    """A published run: ``gpus`` GPUs of ``gpu`` (a catalogue name or a published system such
    as "DGX-GB300") in ``precision``, global/micro batch ``gbs``/``mbs``, the parallel sizes
    and the pipeline layout (megatron-core's string form), the activation recompute in the
    table's form (:func:`recompute_fields`), whether it runs Megatron-FSDP (``fsdp``) and its
    hybrid sharding (``hsdp``: ``num_distributed_optimizer_instances`` and
    ``outer_dp_sharding_strategy``; None: one instance), the
    activation offloading in the table's form (``offload``, :func:`offload_fields`), whether
    the routed experts run Transformer Engine's fused grouped MLP (``fuser``:
    ``use_transformer_engine_op_fuser``); ``model``
    holds further model fields the run sets (``moe_token_dispatcher_type="flex"``, ...). Unnamed
    sizes are megatron-core's defaults (1, no interleaving, ETP = TP, no custom layout, no
    recompute)."""
    try:
        name = hardware.gpu_spec(gpu).name
    except ValueError:
        name = hardware.system_gpu(gpu).name
    changes: dict[str, Any] = {
        "world_size": gpus,
        "global_batch_size": gbs,
        "micro_batch_size": mbs,
        "model.tensor_model_parallel_size": tp,
        "model.pipeline_model_parallel_size": pp,
        "model.virtual_pipeline_model_parallel_size": vp,
        "model.context_parallel_size": cp,
        "model.expert_model_parallel_size": ep,
        "model.expert_tensor_parallel_size": etp,
        "model.pipeline_model_parallel_layout": layout,
    }
    changes.update(
        {f"model.{field}": value for field, value in recompute_fields(recompute).items()}
    )
    changes["use_megatron_fsdp"] = fsdp
    instances, outer = hsdp or (1, "no_shard")
    changes["num_distributed_optimizer_instances"] = instances
    changes["outer_dp_sharding_strategy"] = outer
    changes.update({f"model.{field}": value for field, value in offload_fields(offload).items()})
    changes["model.use_transformer_engine_op_fuser"] = fuser
    # Upstream's performance recipes reduce gradients in 16 bits (perf_recipes/_common.py
    # _benchmark_common and _perf_precision set grad_reduce_in_fp32 = False).
    changes["grad_reduce_in_fp32"] = False
    changes.update({f"model.{field}": value for field, value in model.items()})
    return PublishedRun(name, canonical_precision(precision), MappingProxyType(changes), source)


def recompute_fields(recompute: str) -> dict[str, Any]:
    """The four recompute fields of megatron-core's TransformerConfig from the table's form.

    ``""``: no recompute. ``"full:METHOD:N"``: full recompute, ``recompute_method`` METHOD
    (block or uniform), ``recompute_num_layers`` N. ``"selective:M1+M2"``: selective recompute of
    the modules M1, M2; ``"selective:"`` is an empty module list (nothing recomputed) and
    ``"selective"`` is ``recompute_modules=None`` (megatron-core's ``["core_attn"]``). Every
    field gets a value, so a run's recompute does not depend on the run before it. The values
    themselves are judged by the model rules when the job is planned; ``ValueError`` here only
    for text that is not in one of these forms.
    """
    fields: dict[str, Any] = {
        "recompute_granularity": None,
        "recompute_method": None,
        "recompute_num_layers": None,
        "recompute_modules": None,
    }
    if not recompute:
        return fields
    granularity, _, rest = recompute.partition(":")
    if granularity == "full":
        method, _, layers = rest.partition(":")
        if not method or not layers.isdigit():
            raise ValueError(
                f"recompute {recompute!r}: full recompute is written 'full:METHOD:N' "
                "(e.g. 'full:block:5')."
            )
        fields.update(recompute_method=method, recompute_num_layers=int(layers))
    elif granularity == "selective":
        if ":" in recompute:
            fields["recompute_modules"] = tuple(m for m in rest.split("+") if m)
    else:
        raise ValueError(
            f"recompute {recompute!r} must be empty, 'full:METHOD:N' or 'selective:M1+M2'."
        )
    fields["recompute_granularity"] = granularity
    return fields


def offload_fields(offload: str) -> dict[str, Any]:
    """megatron-core's activation-offloading fields from the table's form.

    ``""``: none. ``"N"``: ``cpu_offloading`` of the first N layers' activations
    (``cpu_offloading_num_layers``; weights stay). ``"fine:M1+M2:SIZE"``: fine-grained activation
    offloading of the modules M1, M2 (``offload_modules``), tensors of SIZE elements and more
    (``min_offloaded_tensor_size``); megatron-core runs ``fused_group_mlp`` only inside
    Transformer Engine's op fuser (``TransformerConfig.__post_init__``), which is the run's own
    setting (:func:`run`'s ``fuser``). Every field gets a value; the model rules judge
    the values when the job is planned, ``ValueError`` here only for text in none of these forms.
    """
    fields: dict[str, Any] = {
        "cpu_offloading": False,
        "cpu_offloading_num_layers": 0,
        "fine_grained_activation_offloading": False,
        "offload_modules": (),
        "min_offloaded_tensor_size": 1024 * 1024,
    }
    if not offload:
        return fields
    if offload.isdigit():
        fields.update(cpu_offloading=True, cpu_offloading_num_layers=int(offload))
        return fields
    kind, _, rest = offload.partition(":")
    modules, _, size = rest.partition(":")
    if kind != "fine" or not modules or not size.isdigit():
        raise ValueError(
            f"offload {offload!r} must be empty, a layer count N or 'fine:M1+M2:SIZE' "
            "(e.g. 'fine:fused_group_mlp:500000000')."
        )
    names = tuple(m for m in modules.split("+") if m)
    fields.update(
        fine_grained_activation_offloading=True,
        offload_modules=names,
        min_offloaded_tensor_size=int(size),
    )
    return fields


_INT_COLUMNS = ("gpus", "gbs", "mbs", "tp", "pp", "vp", "cp", "ep", "etp")


def _sharding(text: str) -> dict[str, Any]:
    """The ``fsdp`` column: empty (the distributed optimizer), ``1`` (Megatron-FSDP) or
    ``hsdp:N:STRATEGY`` (Megatron-FSDP sharded within N groups, ``outer_dp_sharding_strategy``
    STRATEGY)."""
    kind, _, rest = text.partition(":")
    if kind != "hsdp":
        return {"fsdp": _flag(text)}
    instances, _, outer = rest.partition(":")
    if not instances.isdigit() or outer not in OUTER_DP_SHARDING_STRATEGIES:
        raise ValueError(
            f"{PUBLISHED_RUNS_TABLE.name}: the fsdp column's hybrid form is hsdp:N:STRATEGY, "
            f"STRATEGY one of {', '.join(OUTER_DP_SHARDING_STRATEGIES)}; got {text!r}."
        )
    return {"fsdp": True, "hsdp": (int(instances), outer)}


def _flag(text: str) -> bool:
    """A yes/no column: ``"1"`` or empty."""
    if text not in ("", "1"):
        raise ValueError(
            f"{PUBLISHED_RUNS_TABLE.name}: a flag column holds 1 or nothing, got {text!r}."
        )
    return text == "1"


@functools.cache
def _table() -> dict[str, tuple[PublishedRun, ...]]:
    """Every row of :data:`PUBLISHED_RUNS_TABLE` as a :class:`PublishedRun`, by recipe name, in
    the table's order."""
    with PUBLISHED_RUNS_TABLE.open(newline="", encoding="utf-8") as table:
        rows = csv.DictReader(line for line in table if not line.startswith("#"))
        runs: dict[str, list[PublishedRun]] = {}
        for row in rows:
            sizes = {k: int(row[k]) for k in _INT_COLUMNS if row[k]}
            runs.setdefault(row["recipe"], []).append(
                run(
                    row["gpu"],
                    row["precision"],
                    layout=row["layout"] or None,
                    recompute=row["recompute"],
                    **_sharding(row["fsdp"]),
                    offload=row["offload"],
                    fuser=_flag(row["fuser"]),
                    source=row["source"],
                    **sizes,
                )
            )
    return {name: tuple(recipe_runs) for name, recipe_runs in runs.items()}


def published_runs(recipe: str) -> tuple[PublishedRun, ...]:
    """The published runs of the shipped recipe ``recipe``, in :data:`PUBLISHED_RUNS_TABLE`'s
    order (the first is the recipe's default layout); ``()`` for a recipe with none."""
    return _table().get(recipe, ())
