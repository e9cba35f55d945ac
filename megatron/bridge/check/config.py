"""The recipe's config as the check runs it: the layout fitted to the world, and the notes.

:func:`build_check_config` builds the recipe on the fitted layout (``--tiny``: with the tiny
model), then turns off what this machine cannot run (megatron-core's local layer spec without
Transformer Engine; tied embeddings across pipeline stages and the all-to-all and flex MoE
dispatchers without CUDA), one note each. Also
owns what the live machine offers: the visible GPU (:func:`_live_gpu`), the ranks the launcher
starts per node (:func:`_live_node_size`) and whether the model builds with the local layer spec
(:func:`_uses_local_spec`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from megatron.bridge.check.layout import Layout, fit_layout
from megatron.bridge.check.tiny import tiny_model
from megatron.bridge.recipes import get_recipe, recipe_spec
from megatron.bridge.recipes.spec import RECIPE_KEYWORDS, RecipeSpec
from megatron.bridge.training import comm_overlap, hardware
from megatron.bridge.training.job import CLUSTER_FIELDS, JobDescription, ModelDescription
from megatron.bridge.training.precisions import PRECISIONS, canonical_precision

if TYPE_CHECKING:
    from megatron.bridge.training.config import ConfigContainer

__all__ = ["build_check_config"]

#: Settings megatron-core's local layer spec (torch norm layers) asserts are off, as the
#: notes name them.
_LOCAL_SPEC_UNSUPPORTED = {
    "sequence_parallel": "sequence parallelism",
    "layernorm_zero_centered_gamma": "a zero-centred LayerNorm gamma",
    "persist_layer_norm": "the persistent LayerNorm kernel",
    "memory_efficient_layer_norm": "the memory-efficient LayerNorm",
    "moe_grouped_gemm": "grouped expert GEMMs (its GroupedMLP needs the grouped_gemm kernels)",
}

_TINY_PRESET_NOTE = (
    "the recipe's userbuffers preset is tuned for its full-size model; the tiny "
    "model runs TP overlap with Transformer Engine's defaults"
)


def _live_node_size() -> int | None:
    """Ranks the launcher starts on each node (torchrun's ``LOCAL_WORLD_SIZE``), or None."""
    raw = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def _live_gpu() -> tuple[str | None, bool | None, str]:
    """(catalogue name of the visible GPU or None, Blackwell or newer or None, description)."""
    import torch

    if not torch.cuda.is_available():
        return None, None, "cpu"
    device_name = torch.cuda.get_device_name()
    return hardware.device_gpu(device_name), hardware.live_gpu_sm100_or_newer(), device_name


def _uses_local_spec(model: Any) -> bool:
    return model.transformer_layer_spec is None and not comm_overlap.HAVE_TE


@contextlib.contextmanager
def _recipe_log_quiet(quiet: bool) -> Iterator[None]:
    # A recipe warns when no userbuffers preset is published for its shape; for the tiny
    # model there never is one, and the preset is dropped anyway (a note says so).
    recipes_logger = logging.getLogger("megatron.bridge.recipes")
    level = recipes_logger.level
    if quiet:
        recipes_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        recipes_logger.setLevel(level)


def _build_spec(
    spec: RecipeSpec, changes: dict[str, Any], tiny: bool, notes: list[str]
) -> ConfigContainer:
    """The container of ``spec`` with ``changes`` (job-description names)."""
    if tiny:
        # The preset the recipe picks with its keywords' changes (what a container-only recipe
        # is built with); the tiny model builds without one.
        keyword_fields = set(RECIPE_KEYWORDS.values())
        full_size = spec.changed(**{k: v for k, v in changes.items() if k in keyword_fields})
        if full_size.preset_choice().preset is not None:
            notes.append(_TINY_PRESET_NOTE)
        changes = changes | {"preset": "none"}
    return spec.changed(**changes).build()


def _build_container(
    name: str, changes: dict[str, Any], tiny: bool, notes: list[str]
) -> ConfigContainer:
    """The container of a recipe without a spec: its function called with the keywords, then
    the other model fields written over its model config through its description."""
    from megatron.bridge.training.job_configs import describe_model, write_model

    keywords = {key: changes[field] for key, field in RECIPE_KEYWORDS.items() if field in changes}
    cfg = get_recipe(name, **keywords)
    for field in CLUSTER_FIELDS:
        if field in changes:
            setattr(cfg, field, changes[field])
    model_changes = {
        k.removeprefix("model."): v
        for k, v in changes.items()
        if k.startswith("model.") and k not in RECIPE_KEYWORDS.values()
    }
    if model_changes:
        write_model(cfg.model, dataclasses.replace(describe_model(cfg.model), **model_changes))
    if tiny:
        request = cfg.comm_overlap
        if request is not None and request.tp_comm_overlap_cfg is not None:
            cfg.comm_overlap = dataclasses.replace(request, tp_comm_overlap_cfg=None)
            notes.append(_TINY_PRESET_NOTE)
    return cfg


def _published_job(name: str) -> tuple[RecipeSpec | None, JobDescription]:
    """The recipe's spec (None for a container-only recipe) and its job description."""
    spec = recipe_spec(name)
    if spec is not None:
        return spec, spec.job
    from megatron.bridge.training.job_configs import describe_model

    return None, JobDescription(model=describe_model(get_recipe(name).model))


def _drop_mtp_on_the_cpu(
    changes: dict[str, Any], model: ModelDescription, notes: list[str]
) -> None:
    # megatron-core's LanguageModule copies the embedding to the pipeline stage that builds the
    # MTP layers with a CUDA all-reduce while building (setup_embeddings_and_output_layer).
    mtp = changes.get("model.mtp_num_layers", model.mtp_num_layers)
    if not mtp:
        return
    layout = changes.get(
        "model.pipeline_model_parallel_layout", model.pipeline_model_parallel_layout
    )
    changes["model.mtp_num_layers"] = None
    if isinstance(layout, str):
        changes["model.pipeline_model_parallel_layout"] = layout.replace("m", "")
    elif layout is not None:
        changes["model.pipeline_model_parallel_layout"] = tuple(
            tuple(name for name in stage if name != "mtp") for stage in layout
        )
    notes.append(
        f"mtp_num_layers={mtp} turned OFF on the CPU over PP > 1: megatron-core copies the "
        "embedding to the stage that builds the MTP layers with a CUDA all-reduce while "
        "building; the decoder layers and their placement are the same"
    )


def build_check_config(
    args: argparse.Namespace, *, world_size: int, on_cuda: bool
) -> tuple[ConfigContainer, Layout, list[str]]:
    """The recipe's config as this check runs it: its layout fitted, its notes.

    ``--gpu`` and ``--precision`` change the recipe as ``bridge-overlap explain`` does (its
    preset, precision fields and launch environment follow); without ``--gpu`` a visible GPU of
    the catalogue is used. ``--gpus-per-node`` and ``--nvlink-domain`` set the cluster; without
    ``--gpus-per-node`` a world that spans nodes takes the launcher's ranks per node
    (``LOCAL_WORLD_SIZE``), with a note. A recipe with a torch-free spec
    (:func:`~megatron.bridge.recipes.recipe_spec`) is changed by job-description field and
    built once; a container-only recipe is built by its function with the keywords it takes
    (``tp_size``, ``gpu``, ...), and the other model fields (the tiny model's) are written over
    its model config through its description.
    """
    overrides = {"tp": args.tp, "pp": args.pp, "vpp": args.vpp, "cp": args.cp}
    spec, published = _published_job(args.recipe)
    recipe_sizes = {
        "tp": published.tp_size,
        "pp": published.pp_size,
        "vpp": published.vpp_size,
        "cp": published.cp_size,
        "ep": published.ep_size,
        "etp": published.model.expert_tensor_parallel_size,
    }
    layout, notes = fit_layout(
        world_size=world_size, recipe=recipe_sizes, overrides=overrides, tiny=args.tiny
    )
    changes: dict[str, Any] = {
        "model.tensor_model_parallel_size": layout.tp,
        "model.pipeline_model_parallel_size": layout.pp,
        "model.virtual_pipeline_model_parallel_size": layout.vpp,
        "model.context_parallel_size": layout.cp,
    }
    live_gpu = _live_gpu()[0] if on_cuda else None
    gpu = args.gpu or live_gpu
    if gpu is not None:
        changes["gpu"] = gpu
    if args.precision is not None:
        changes["precision"] = args.precision
    cluster = {name: getattr(args, name) for name in CLUSTER_FIELDS}
    changes |= {name: value for name, value in cluster.items() if value is not None}
    node = _live_node_size()
    if args.gpus_per_node is None and node is not None and world_size > node:
        # The launcher numbers ranks node by node, so a TP group of more ranks than a node
        # holds crosses nodes whatever the catalogue says a node holds.
        changes["gpus_per_node"] = node
        notes.append(
            f"gpus_per_node {node}: the ranks this launcher starts on each node "
            "(LOCAL_WORLD_SIZE); --gpus-per-node sets another"
        )
    if not on_cuda and spec is not None and published.model.moe:
        precision = canonical_precision(changes.get("precision", spec.precision))
        if PRECISIONS[precision].preset_family == "fp8" and not comm_overlap.te_status().available:
            # megatron-core's TransformerConfig refuses MoE in FP8 (and FP4) without Transformer
            # Engine >= 1.7, which a CPU machine does not have.
            changes["precision"] = "bf16"
            notes.append(
                f"precision {precision} turned to bf16 on the CPU: megatron-core builds an MoE "
                "model in FP8/FP4 only with Transformer Engine >= 1.7; the layout, the experts "
                "and the overlap checks are the same"
            )
    if args.tiny:
        fields, tiny_notes = tiny_model(published.model, layout)
        notes += tiny_notes
        changes |= {f"model.{k}": v for k, v in fields.items()}
        # Two micro-batches per pipeline stage: what the interleaved schedule needs at least.
        changes |= {"micro_batch_size": 1, "global_batch_size": layout.dp * 2 * layout.pp}
    if not on_cuda and layout.pp > 1:
        _drop_mtp_on_the_cpu(changes, published.model, notes)
    # The layout goes in as a change of the recipe, not onto the built container, so sequence
    # parallelism and the preset follow it as they would in a real launch.
    with _recipe_log_quiet(args.tiny):
        if spec is not None:
            cfg = _build_spec(spec, changes, args.tiny, notes)
        else:
            cfg = _build_container(args.recipe, changes, args.tiny, notes)
    model = cfg.model

    if _uses_local_spec(model):
        for name, what in _LOCAL_SPEC_UNSUPPORTED.items():
            if getattr(model, name):
                setattr(model, name, False)
                note = (
                    f"{name} turned OFF: Transformer Engine is not available here, so the model "
                    f"uses megatron-core's local layer spec, whose torch norm layer does not "
                    f"support {what}"
                )
                if name == "sequence_parallel":
                    asked = None if cfg.comm_overlap is None else cfg.comm_overlap.tp_comm_overlap
                    # A request (True) is refused; "auto" is not asked for where it cannot run.
                    outcome = {True: "refused", "auto": "not planned"}.get(asked)
                    note += (
                        "; TP comm overlap, which needs sequence parallelism, is therefore "
                        f"{outcome} on this run"
                        if outcome
                        else ""
                    )
                notes.append(note)
        if not model.moe_grouped_gemm and "moe_act" in (model.recompute_modules or ()):
            # megatron-core recomputes the experts' activation only in the grouped-GEMM experts
            # (TransformerConfig.__post_init__ refuses moe_act without moe_grouped_gemm).
            model.recompute_modules = [m for m in model.recompute_modules if m != "moe_act"]
            notes.append(
                "recompute of moe_act dropped: it needs grouped expert GEMMs, which the local "
                "layer spec turned off"
            )

    if on_cuda:
        if args.gpu is not None and args.gpu != live_gpu:
            notes.append(
                f"--gpu {args.gpu}: the plan and the launch environment are for {args.gpu}, "
                f"but this process runs on {_live_gpu()[2]}"
            )
    else:
        model.use_cpu_initialization = True
        if args.gpu is None:
            cfg.gpu = None
            notes.append(
                "no GPU visible: the launch environment is planned as for Hopper or older "
                "(gpu_sm100_or_newer=False)"
            )
        else:
            notes.append(
                f"no GPU visible: the plan and the launch environment are for {args.gpu} "
                "(--gpu); the model builds on the CPU"
            )
        if layout.pp > 1 and model.share_embeddings_and_output_weights:
            model.share_embeddings_and_output_weights = False
            notes.append(
                "share_embeddings_and_output_weights turned OFF on the CPU: megatron-core "
                "copies the tied embedding to the last pipeline stage with a CUDA all-reduce "
                "while building; the parameter counts are the same (the last stage holds its "
                "own output weight either way)"
            )
        if model.position_embedding_type == "yarn":
            model.position_embedding_type = "rope"
            notes.append(
                "position_embedding_type 'yarn' turned to 'rope' on the CPU: megatron-core's "
                "YarnRotaryEmbedding asks for the current CUDA device while building; neither "
                "holds parameters, so the parameter counts are the same"
            )
        dispatcher = model.moe_token_dispatcher_type
        if model.num_moe_experts and dispatcher != "allgather":
            model.moe_token_dispatcher_type = "allgather"
            backend = ""
            if dispatcher == "flex":
                # The flex backend is read only with the flex dispatcher: left as it was, the
                # plan would warn that a setting the user never changed has no effect.
                backend = (
                    f", and moe_flex_dispatcher_backend {model.moe_flex_dispatcher_backend!r} "
                    "back to megatron-core's default with it"
                )
                model.moe_flex_dispatcher_backend = ModelDescription.moe_flex_dispatcher_backend
            notes.append(
                f"moe_token_dispatcher_type {dispatcher!r} turned to 'allgather' on the CPU"
                f"{backend}: megatron-core's all-to-all and flex dispatchers create CUDA streams "
                "while building; EP all-to-all overlap, which needs them, is therefore refused "
                "on this run"
            )
    return cfg, layout, notes
