"""The published runs of a recipe: for each system and precision, the layout it ran in.

A recipe's :class:`~megatron.bridge.recipes.spec.RecipeSpec` holds its published runs
(``RecipeSpec.published``), one :class:`PublishedRun` per GPU and precision. Asking a recipe for
a GPU or a precision (``spec(gpu="gb200", precision="fp8_mx")``, ``plan_recipe(name, gpu=...)``,
``bridge-overlap explain --recipe NAME --gpu ...``) starts from the run published for that pair
(:meth:`RecipeSpec.with_overrides`); the recipe's other keywords then change that layout. A pair
with no published run keeps the recipe's default layout on the GPU and precision asked for.

Each run is written with :func:`run`, which gives every layout field a value (the ones a run
does not name take megatron-core's defaults), so a run is the same whichever run the spec was
at before. Pure data: importing this module loads no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from megatron.bridge.training import hardware
from megatron.bridge.training.precisions import canonical_precision

__all__ = ["PublishedRun", "run"]


@dataclass(frozen=True)
class PublishedRun:
    """One published run of a recipe: its GPU, its precision and its layout."""

    gpu: str
    """The GPU, as the catalogue names it (``hardware.GPUS``)."""
    precision: str
    """The compute dtype (``precisions.PRECISIONS``)."""
    changes: Mapping[str, Any]
    """The layout, as :meth:`RecipeSpec.changed` takes it: GPU count, batch sizes and
    ``model.<field>`` for the parallel sizes, the pipeline layout and the dispatcher."""
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
    source: str,
    **model: Any,
) -> PublishedRun:
    """A published run: ``gpus`` GPUs of ``gpu`` (a catalogue name or a published system such
    as "DGX-GB300") in ``precision``, global/micro batch ``gbs``/``mbs``, the parallel sizes
    and the pipeline layout (megatron-core's string form); ``model`` holds further model fields
    the run sets (``moe_token_dispatcher_type="flex"``, ...). Unnamed sizes are megatron-core's
    defaults (1, no interleaving, ETP = TP, no custom layout)."""
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
    changes.update({f"model.{field}": value for field, value in model.items()})
    return PublishedRun(name, canonical_precision(precision), MappingProxyType(changes), source)
