"""``bridge-overlap-check``: the overlap plan of a recipe on a real multi-process world.

``bridge-overlap explain`` plans a layout on paper; this command runs it. Launched by torchrun::

    torchrun --standalone --nproc-per-node 4 -m megatron.bridge.check --recipe gpt3_175b --tiny

every rank builds the recipe's config, initializes megatron-core's model-parallel state for its
layout, resolves the config with ``runtime_config_update`` and builds its model chunks with the
recipe's own provider (``build_model``). The ranks then all-gather their overlap plans, launch
environments and per-chunk parameter counts, and rank 0 prints the plan, a table of every
rank's chunks and any disagreement. Without torchrun it runs as a one-process world.

``--tiny`` keeps the shape of the recipe's parallelism but fits it to the world: every split
the recipe uses (TP, PP with VPP, CP) becomes 2 while the world has room for it, the rest is
data parallel, and the model shrinks to one layer per pipeline chunk with small widths, so it
builds on a laptop. ``--tp/--pp/--vpp/--cp`` set a size exactly.

Without a GPU the ranks talk over gloo and build on the CPU with megatron-core's local layer
spec (Transformer Engine needs CUDA). That spec's torch norm layers support neither sequence
parallelism nor a zero-centred gamma, and megatron-core copies tied embeddings between pipeline
stages with a CUDA all-reduce, so those settings are turned off and the report says so (TP comm
overlap needs sequence parallelism, so it is refused on such a run). With CUDA the ranks use
NCCL, TE userbuffers are initialized when TP overlap survives, and a few forward/backward steps
on mock data time the plan's overlap against all overlap off. Variables such as
``CUDA_DEVICE_MAX_CONNECTIONS`` only act when set before CUDA starts: put the launch
environment the report shows on the launcher (``PerfEnvPlugin`` does); the build warns when the
live one differs.

Exit codes, the same on every rank: 0 all ranks agree; 1 they disagree; 2 an error on any rank
(each rank catches its own, the ranks all-gather their status, then all exit).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import hashlib
import json
import logging
import math
import os
import socket
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from megatron.bridge.training.comm_overlap.knobs import KNOBS
from megatron.bridge.training.validators import positive_int_argument
from megatron.bridge.utils.megatron_core_errors import megatron_core_rejection

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.config import ConfigContainer

__all__ = [
    "EXIT_DISAGREE",
    "EXIT_ERROR",
    "EXIT_OK",
    "Layout",
    "build_parser",
    "compare_reports",
    "fit_layout",
    "gather_outcomes",
    "main",
    "overlap_off_request",
    "tiny_model_fields",
]

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_DISAGREE, EXIT_ERROR = 0, 1, 2

#: Version of the ``--json`` document layout; bumped when a key changes meaning or goes away.
JSON_SCHEMA_VERSION = 1

#: What each report must hold identically on every rank (the parameter table differs by rank).
SHARED_KEYS = ("recipe", "layout", "model", "device", "notes", "plan", "launch_env")

#: Split sizes ``--tiny`` fills in, in this order (TP first: it is what TP overlap needs).
_TINY_ORDER = ("tp", "pp", "cp")

#: The request fields that switch an overlap on (the knob table's switches);
#: ``overlap_off_request`` sets each to False.
OVERLAP_FIELDS = tuple(name for name, knob in KNOBS.items() if knob.switch)

#: Forward/backward steps timed per configuration on CUDA (the first is a warm-up).
CUDA_STEPS = 6

#: Seed of megatron-core's CUDA RNG tracker (only the GPU build draws from it).
CUDA_SEED = 1234


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


def overlap_off_request(request: CommOverlapConfig) -> CommOverlapConfig:
    """``request`` with every overlap turned off (and no userbuffers preset): the baseline."""
    off = dict.fromkeys(OVERLAP_FIELDS, False)
    return dataclasses.replace(request, **off, tp_comm_overlap_cfg=None, strict=False)


#: Settings megatron-core's local layer spec (torch norm layers) asserts are off, as the
#: notes name them.
_LOCAL_SPEC_UNSUPPORTED = {
    "sequence_parallel": "sequence parallelism",
    "layernorm_zero_centered_gamma": "a zero-centred LayerNorm gamma",
    "persist_layer_norm": "the persistent LayerNorm kernel",
    "memory_efficient_layer_norm": "the memory-efficient LayerNorm",
}


def _live_gpu() -> tuple[str | None, bool | None, str]:
    """(catalogue name of the visible GPU or None, Blackwell or newer or None, description)."""
    import torch

    from megatron.bridge.training import hardware

    if not torch.cuda.is_available():
        return None, None, "cpu"
    device_name = torch.cuda.get_device_name()
    lowered = device_name.lower()
    # Longest names first: "gb200" also contains "b200".
    known = sorted(hardware.GPUS, key=len, reverse=True)
    name = next((gpu for gpu in known if gpu in lowered), None)
    return name, hardware.live_gpu_sm100_or_newer(), device_name


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


def build_check_config(
    args: argparse.Namespace, *, world_size: int, on_cuda: bool
) -> tuple[ConfigContainer, Layout, list[str]]:
    """The recipe's config as this check runs it: its layout fitted, its notes."""
    from megatron.bridge.recipes import get_recipe

    overrides = {"tp": args.tp, "pp": args.pp, "vpp": args.vpp, "cp": args.cp}
    published = get_recipe(args.recipe).model
    recipe_sizes = {
        "tp": published.tensor_model_parallel_size,
        "pp": published.pipeline_model_parallel_size,
        "vpp": published.virtual_pipeline_model_parallel_size,
        "cp": published.context_parallel_size,
    }
    layout, notes = fit_layout(
        world_size=world_size, recipe=recipe_sizes, overrides=overrides, tiny=args.tiny
    )
    keywords: dict[str, Any] = {
        "tp_size": layout.tp,
        "pp_size": layout.pp,
        "vpp_size": layout.vpp,
        "cp_size": layout.cp,
    }
    tiny = None
    if args.tiny:
        tiny = tiny_model_fields(
            layout, grouped_query_attention=published.num_query_groups is not None
        )
        # Two micro-batches per pipeline stage: what the interleaved schedule needs at least.
        keywords |= {
            "seq_length": tiny["seq_length"],
            "micro_batch_size": 1,
            "global_batch_size": layout.dp * 2 * layout.pp,
        }
    # The recipe's own function writes the layout, so sequence parallelism and the preset
    # follow it as they would in a real launch.
    with _recipe_log_quiet(args.tiny):
        cfg = get_recipe(args.recipe, **keywords)
    model = cfg.model
    if tiny is not None:
        for name, value in tiny.items():
            setattr(model, name, value)
        request = cfg.comm_overlap
        if request is not None and request.tp_comm_overlap_cfg is not None:
            cfg.comm_overlap = dataclasses.replace(request, tp_comm_overlap_cfg=None)
            notes.append(
                "the recipe's userbuffers preset is tuned for its full-size model; the tiny "
                "model runs TP overlap with Transformer Engine's defaults"
            )

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
                    requested = cfg.comm_overlap is not None and cfg.comm_overlap.tp_comm_overlap
                    note += (
                        "; TP comm overlap, which needs sequence parallelism, is therefore "
                        "refused on this run"
                        if requested
                        else ""
                    )
                notes.append(note)

    if on_cuda:
        cfg.gpu, _, _ = _live_gpu()
    else:
        model.use_cpu_initialization = True
        cfg.gpu = None
        notes.append(
            "no GPU visible: the launch environment is planned as for Hopper or older "
            "(gpu_sm100_or_newer=False)"
        )
        if layout.pp > 1 and model.share_embeddings_and_output_weights:
            model.share_embeddings_and_output_weights = False
            notes.append(
                "share_embeddings_and_output_weights turned OFF on the CPU: megatron-core "
                "copies the tied embedding to the last pipeline stage with a CUDA all-reduce "
                "while building; the parameter counts are the same (the last stage holds its "
                "own output weight either way)"
            )
    return cfg, layout, notes


def gather_outcomes(step: Callable[[], Any]) -> list[dict[str, Any]]:
    """Run ``step`` on this rank, then all-gather every rank's outcome, in rank order.

    An outcome is ``{"rank", "ok": True, "value"}`` or ``{"rank", "ok": False, "error"}``: an
    exception is caught and reported rather than raised, so that a rank that fails still joins
    the all-gather and no rank is left waiting for it.
    """
    import torch.distributed as dist

    rank = dist.get_rank()
    try:
        outcome: dict[str, Any] = {"rank": rank, "ok": True, "value": step()}
    except Exception as exc:
        # Input errors (megatron-core refusing a config among them) explain themselves (rank 0
        # reports every rank's); anything else gets its traceback logged where it happened.
        expected = (
            isinstance(exc, ValueError | TypeError) or megatron_core_rejection(exc) is not None
        )
        if expected:
            logger.info("rank %d failed: %s", rank, exc)
        else:
            logger.error("rank %d failed: %s", rank, exc, exc_info=True)
        outcome = {"rank": rank, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if not expected:
            outcome["traceback"] = traceback.format_exc()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, outcome)
    return gathered


def _unwrapped(chunk: Any) -> Any:
    from megatron.core.utils import get_attr_wrapped_model

    # build_model wraps chunks in DDP / Float16Module on CUDA; the GPTModel is inside.
    return get_attr_wrapped_model(chunk, "pre_process", return_model_obj=True)


def _chunk_rows(chunks: Sequence[Any], layout: Layout) -> list[dict[str, Any]]:
    from megatron.core import parallel_state

    rows = []
    for index, chunk in enumerate(chunks):
        model = _unwrapped(chunk)
        vp_stage = index if layout.vpp else None
        rows.append(
            {
                "vp_stage": index,
                "pre_process": bool(model.pre_process),
                "post_process": bool(model.post_process),
                # megatron-core's own view of where this chunk sits, to check the provider's.
                "first_stage": parallel_state.is_pipeline_first_stage(
                    ignore_virtual=False, vp_stage=vp_stage
                ),
                "last_stage": parallel_state.is_pipeline_last_stage(
                    ignore_virtual=False, vp_stage=vp_stage
                ),
                "layers": len(model.decoder.layers),
                "params": sum(p.numel() for p in chunk.parameters()),
            }
        )
    return rows


def _launch_env_entries(plan: Any, sm100_or_newer: bool | None) -> list[dict[str, Any]]:
    from megatron.bridge.training import launch_env

    generation = None if plan.job.gpu is not None else bool(sm100_or_newer)
    env = launch_env.plan_launch_env_for(
        plan.job,
        a2a_overlap=plan.a2a_overlap,
        gpu_sm100_or_newer=generation,
    )
    return [dataclasses.asdict(entry) for entry in env.entries]


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _check_rank(
    args: argparse.Namespace, *, world_size: int, on_cuda: bool, keep: dict[str, Any]
) -> dict[str, Any]:
    """This rank's report: its position, the layout, the plan, the launch env and its chunks."""
    # Sizes that cannot split the world fail here, before megatron-core's imports (most of the
    # run time).
    check_overrides_fit(world_size, {"tp": args.tp, "pp": args.pp, "cp": args.cp})

    import torch.distributed as dist
    from megatron.core import parallel_state

    from megatron.bridge.training.setup import build_model

    cfg, layout, notes = build_check_config(args, world_size=world_size, on_cuda=on_cuda)
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
        virtual_pipeline_model_parallel_size=layout.vpp,
        context_parallel_size=layout.cp,
        distributed_timeout_minutes=max(1, math.ceil(args.timeout / 60)),
    )
    if on_cuda:
        import torch
        from megatron.core import tensor_parallel

        # megatron-core initializes weights on the GPU (and runs dropout) from its CUDA RNG
        # tracker, whose per-TP-rank states must be seeded first, as Megatron-LM does at start.
        torch.manual_seed(CUDA_SEED)
        tensor_parallel.model_parallel_cuda_manual_seed(
            CUDA_SEED, te_rng_tracker=cfg.model.te_rng_tracker
        )
    chunks = build_model(cfg, world_size=world_size)
    plan = cfg.overlap_plan
    if plan is None:
        raise ValueError(f"recipe {args.recipe!r} has no comm_overlap request: nothing to check.")
    keep.update(cfg=cfg, chunks=chunks)

    _, sm100_or_newer, device = _live_gpu()
    model = cfg.model
    return {
        "rank": dist.get_rank(),
        "coords": {
            "tp": parallel_state.get_tensor_model_parallel_rank(),
            "pp": parallel_state.get_pipeline_model_parallel_rank(),
            "cp": parallel_state.get_context_parallel_rank(),
            "dp": parallel_state.get_data_parallel_rank(),
        },
        "recipe": {"name": args.recipe, "tiny": args.tiny},
        "layout": dataclasses.asdict(layout) | {"world_size": world_size},
        "model": {
            "num_layers": model.num_layers,
            "hidden_size": model.hidden_size,
            "num_attention_heads": model.num_attention_heads,
            "num_query_groups": model.num_query_groups,
            "seq_length": model.seq_length,
            "vocab_size": model.vocab_size,
            "sequence_parallel": model.sequence_parallel,
            "layer_spec": "local" if _uses_local_spec(model) else "transformer_engine",
        },
        "device": device,
        "notes": notes,
        "plan": plan.to_dict(),
        "launch_env": _launch_env_entries(plan, sm100_or_newer),
        "chunks": _chunk_rows(chunks, layout),
    }


def _uses_local_spec(model: Any) -> bool:
    from megatron.bridge.training import comm_overlap

    return model.transformer_layer_spec is None and not comm_overlap.HAVE_TE


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where ``a`` and ``b`` first differ, as a readable path (None when equal)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}.{key}: present on one rank only".lstrip(".")
            found = _first_difference(a[key], b[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries != {len(b)}".lstrip(".")
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            label = str(index)
            if isinstance(x, Mapping) and ("knob" in x or "name" in x):
                label = str(x.get("knob", x.get("name")))
            found = _first_difference(x, y, f"{path}[{label}]")
            if found is not None:
                return found
        return None
    if a != b or type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}".lstrip(".")
    return None


def compare_reports(reports: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every disagreement between the ranks' reports, one readable line each (empty: all agree).

    Checked: every shared part (recipe, layout, model, device, notes, the plan, the launch
    environment) is the same as rank 0's; each rank holds one chunk per virtual stage, and each
    chunk's embedding / output placement is where megatron-core puts the first / last stage;
    every rank sits at its own (TP, PP, CP, DP) position and together they fill the layout;
    the ranks that hold the same pipeline chunk (TP, CP and DP peers) hold the same number of
    parameters; one copy of each chunk adds up to the model's layers.
    """
    if not reports:
        return ["no reports to compare"]
    problems: list[str] = []
    first = reports[0]
    for report in reports[1:]:
        for key in SHARED_KEYS:
            where = _first_difference(first[key], report[key])
            if where is not None:
                problems.append(
                    f"rank {report['rank']}: {key} differs from rank {first['rank']}'s at {where}"
                )

    layout = first["layout"]
    chunks_per_rank = layout["vpp"] or 1
    positions: dict[tuple[int, ...], int] = {}
    stages: dict[tuple[int, int], dict[int, tuple[int, int]]] = {}
    for report in reports:
        rank, coords = report["rank"], report["coords"]
        position = (coords["tp"], coords["pp"], coords["cp"], coords["dp"])
        if position in positions:
            problems.append(
                f"rank {rank} and rank {positions[position]} both sit at (tp, pp, cp, dp) = "
                f"{position}"
            )
        positions[position] = rank
        held = [chunk["vp_stage"] for chunk in report["chunks"]]
        if held != list(range(chunks_per_rank)):
            problems.append(
                f"rank {rank} holds chunks {held}, expected {list(range(chunks_per_rank))}"
            )
        for chunk in report["chunks"]:
            for built, expected, what in (
                ("pre_process", "first_stage", "embedding (pre_process)"),
                ("post_process", "last_stage", "output layer (post_process)"),
            ):
                if chunk[built] != chunk[expected]:
                    problems.append(
                        f"rank {rank} chunk {chunk['vp_stage']}: {what} is {chunk[built]} but "
                        f"megatron-core's {expected} is {chunk[expected]}"
                    )
            stage = (coords["pp"], chunk["vp_stage"])
            stages.setdefault(stage, {})[rank] = (chunk["params"], chunk["layers"])

    expected_ranks = layout["world_size"]
    if len(reports) != expected_ranks:
        problems.append(f"{len(reports)} reports for a world of {expected_ranks}")
    missing = [
        (pp, vp)
        for pp in range(layout["pp"])
        for vp in range(chunks_per_rank)
        if (pp, vp) not in stages
    ]
    if missing:
        problems.append(f"no rank holds (pp rank, chunk) {missing}")
    layers = 0
    for (pp, vp), held_by in sorted(stages.items()):
        counts = {params for params, _ in held_by.values()}
        if len(counts) > 1:
            shown = ", ".join(f"rank {r}: {p}" for r, (p, _) in sorted(held_by.items()))
            problems.append(
                f"pp rank {pp} chunk {vp}: its TP/CP/DP peers hold different parameter counts "
                f"({shown})"
            )
        layers += next(iter(held_by.values()))[1]
    if not missing and layers != first["model"]["num_layers"]:
        problems.append(
            f"the chunks hold {layers} layers in all, the model has {first['model']['num_layers']}"
        )
    return problems


def _time_steps(cfg: ConfigContainer, chunks: list[Any], *, steps: int) -> float:
    """Mean seconds of one forward/backward pass over a global batch of mock data on this rank.

    Wires the DDP hooks into the model config as Megatron-LM's training loop does, then runs
    megatron-core's pipeline schedule ``steps`` times; the first run is a warm-up.
    """
    import itertools

    import torch
    from megatron.core import parallel_state
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func

    config = cfg.model
    ddp = cfg.ddp
    config.finalize_model_grads_func = finalize_model_grads
    if ddp.overlap_grad_reduce:
        config.no_sync_func = [chunk.no_sync for chunk in chunks]
        config.grad_sync_func = [chunk.start_grad_sync for chunk in chunks]
    if ddp.overlap_param_gather and ddp.align_param_gather:
        config.param_sync_func = [chunk.start_param_sync for chunk in chunks]
    if len(chunks) == 1:
        # The non-interleaved schedules take one function, not a list of them.
        for name in ("no_sync_func", "grad_sync_func", "param_sync_func"):
            value = getattr(config, name)
            if isinstance(value, list):
                setattr(config, name, value[0])

    micro_batch = cfg.train.micro_batch_size
    dp = parallel_state.get_data_parallel_world_size()
    num_microbatches = cfg.train.global_batch_size // (micro_batch * dp)
    seq = config.seq_length
    # Context parallelism expects each rank's share of the sequence already cut out.
    local_seq = seq // config.context_parallel_size
    device = torch.cuda.current_device()
    tokens = torch.randint(0, config.vocab_size, (micro_batch, local_seq), device=device)
    batch = {
        "tokens": tokens,
        "position_ids": torch.arange(local_seq, device=device).expand(micro_batch, -1),
        "labels": torch.roll(tokens, -1, dims=1),
    }

    def forward_step(data_iterator: Any, model: Any) -> tuple[Any, Callable[[Any], Any]]:
        data = next(data_iterator)
        output = model(data["tokens"], data["position_ids"], None, labels=data["labels"])

        def loss_func(output_tensor: Any) -> tuple[Any, dict[str, Any]]:
            loss = output_tensor.float().mean()
            return loss, {"loss": loss.detach()}

        return output, loss_func

    forward_backward = get_forward_backward_func()
    times = []
    for _ in range(steps):
        for chunk in chunks:
            chunk.zero_grad_buffer()
        torch.cuda.synchronize()
        torch.distributed.barrier()
        start = time.perf_counter()
        forward_backward(
            forward_step_func=forward_step,
            data_iterator=[itertools.repeat(batch) for _ in chunks],
            model=chunks,
            num_microbatches=num_microbatches,
            seq_length=seq,
            micro_batch_size=micro_batch,
            forward_only=False,
        )
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sum(times[1:]) / max(1, len(times) - 1)


def _cuda_timings(args: argparse.Namespace, *, world_size: int, kept: dict[str, Any]) -> dict:
    """Step time of the plan's overlap, then of the same model with every overlap off."""
    from megatron.bridge.training.setup import build_model

    planned = _time_steps(kept["cfg"], kept["chunks"], steps=CUDA_STEPS)
    cfg_off, _, _ = build_check_config(args, world_size=world_size, on_cuda=True)
    cfg_off.comm_overlap = overlap_off_request(cfg_off.comm_overlap)
    chunks_off = build_model(cfg_off, world_size=world_size)
    baseline = _time_steps(cfg_off, chunks_off, steps=CUDA_STEPS)
    return {"planned_s": planned, "all_off_s": baseline}


def _ranks_text(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _error_lines(outcomes: Sequence[Mapping[str, Any]]) -> list[str]:
    by_error: dict[str, list[int]] = {}
    for outcome in outcomes:
        if not outcome["ok"]:
            by_error.setdefault(outcome["error"], []).append(outcome["rank"])
    return [f"{_ranks_text(ranks)}: {error}" for error, ranks in by_error.items()]


def _render(document: Mapping[str, Any], plan_text: str | None) -> str:
    lines = [f"bridge-overlap check: recipe {document['recipe']}, world {document['world_size']}"]
    if document["errors"]:
        lines.append("ERROR:")
        lines += [f"  {line}" for line in document["errors"]]
        lines.append(f"exit code {document['exit_code']}")
        return "\n".join(lines)
    first = document["reports"][0]
    layout = Layout(**{k: v for k, v in first["layout"].items() if k != "world_size"})
    model = first["model"]
    lines += [
        f"layout: {layout.describe()} on {first['device']} ({document['backend']})",
        f"model: {model['num_layers']} layer{'' if model['num_layers'] == 1 else 's'}, hidden "
        f"{model['hidden_size']}, "
        f"{model['num_attention_heads']} heads, seq {model['seq_length']}, vocab "
        f"{model['vocab_size']}, {model['layer_spec']} layer spec, sequence parallel "
        f"{'on' if model['sequence_parallel'] else 'off'}",
    ]
    if first["notes"]:
        lines.append("notes:")
        lines += [f"  - {note}" for note in first["notes"]]
    lines += ["", "Overlap plan:", plan_text or "", "", "Launch environment:"]
    for entry in first["launch_env"]:
        shown = (
            f"{entry['name']}={entry['value']}"
            if entry["value"] is not None
            else (f"{entry['name']} (not set)")
        )
        lines.append(f"  {shown}  # {entry['reason']}")
    lines += ["", "Parameters per rank:"]
    header = (
        "rank",
        "tp",
        "pp",
        "cp",
        "dp",
        "chunk",
        "embed",
        "output",
        "layers",
        "params",
        "plan",
    )
    rows = [header]
    for report in document["reports"]:
        c = report["coords"]
        for chunk in report["chunks"]:
            rows.append(
                (
                    str(report["rank"]),
                    str(c["tp"]),
                    str(c["pp"]),
                    str(c["cp"]),
                    str(c["dp"]),
                    str(chunk["vp_stage"]),
                    "yes" if chunk["pre_process"] else "-",
                    "yes" if chunk["post_process"] else "-",
                    str(chunk["layers"]),
                    f"{chunk['params']:,}",
                    _digest(report["plan"]),
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        lines.append("  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    lines.append("")
    if document["disagreements"]:
        lines.append(f"DISAGREEMENT between the {document['world_size']} ranks:")
        lines += [f"  - {problem}" for problem in document["disagreements"]]
    else:
        who = (
            f"All {document['world_size']} ranks agree"
            if document["world_size"] > 1
            else ("The one rank is consistent")
        )
        lines.append(
            f"{who} on the layout, the overlap plan and the launch environment; every chunk is "
            "built where megatron-core places it."
        )
    timings = document.get("cuda_timings")
    if timings:
        planned, off = timings["planned_s"], timings["all_off_s"]
        lines.append(
            f"Step time (slowest rank, mean of {CUDA_STEPS - 1} steps): overlap as planned "
            f"{planned * 1e3:.1f} ms, all overlap off {off * 1e3:.1f} ms "
            f"({off / planned:.2f}x)."
        )
    lines.append(f"exit code {document['exit_code']}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``bridge-overlap-check``."""
    parser = argparse.ArgumentParser(
        prog="bridge-overlap-check",
        description="Check a recipe's overlap plan on a real multi-process world (run it "
        "under torchrun; without it, as a world of one).",
        epilog="Exit codes: 0 all ranks agree; 1 they disagree; 2 an error on any rank.",
    )
    parser.add_argument(
        "--recipe", required=True, help="recipe name (e.g. gpt3_175b) or 'module:function'"
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="fit the recipe's parallel shape to the world and shrink the model to build anywhere",
    )
    parser.add_argument("--tp", type=positive_int_argument, help="tensor-parallel size (exact)")
    parser.add_argument("--pp", type=positive_int_argument, help="pipeline-parallel size (exact)")
    parser.add_argument(
        "--vpp", type=positive_int_argument, help="virtual pipeline size (1 = none)"
    )
    parser.add_argument("--cp", type=positive_int_argument, help="context-parallel size (exact)")
    parser.add_argument("--json", action="store_true", help="rank 0 prints one JSON document")
    parser.add_argument(
        "--timeout",
        type=positive_int_argument,
        default=600,
        help="seconds a collective may wait for the other ranks before failing (default 600)",
    )
    return parser


def _single_process_env() -> None:
    # Run outside torchrun as a world of one, so the command also works on its own.
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in (
        ("RANK", "0"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", str(port)),
    ):
        os.environ.setdefault(name, value)


def _quiet_warnings() -> None:
    # megatron-core warns on import that TE / Apex are missing and on a few config defaults;
    # four ranks repeating that would bury the report.
    warnings.filterwarnings("ignore", r"(Transformer Engine and Apex are|Apex is) not installed")
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", r".*moe_ffn_hidden_size is not set")
    warnings.filterwarnings("ignore", r"full scope is deprecated")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check on this rank; returns the exit code every rank shares."""
    args = build_parser().parse_args(argv)
    _single_process_env()
    rank = int(os.environ["RANK"])
    logging.basicConfig(
        level=logging.WARNING if rank == 0 else logging.ERROR,
        format=f"[rank {rank}] %(levelname)s %(name)s: %(message)s",
    )
    _quiet_warnings()

    import torch
    import torch.distributed as dist

    on_cuda = torch.cuda.is_available()
    backend = "nccl" if on_cuda else "gloo"
    if on_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    except Exception as exc:
        # No group, so nothing to agree on: each rank says why and stops.
        print(f"[rank {rank}] cannot join the process group: {exc}", file=sys.stderr)
        return EXIT_ERROR
    world = dist.get_world_size()

    kept: dict[str, Any] = {}
    try:
        outcomes = gather_outcomes(
            lambda: _check_rank(args, world_size=world, on_cuda=on_cuda, keep=kept)
        )
        errors = _error_lines(outcomes)
        reports = [o["value"] for o in outcomes if o["ok"]]
        disagreements = [] if errors else compare_reports(reports)
        code = EXIT_ERROR if errors else EXIT_DISAGREE if disagreements else EXIT_OK

        timings = None
        if on_cuda and code == EXIT_OK:
            timed = gather_outcomes(lambda: _cuda_timings(args, world_size=world, kept=kept))
            errors = _error_lines(timed)
            if errors:
                code = EXIT_ERROR
            else:
                # The slowest rank sets the step time.
                timings = {
                    key: max(o["value"][key] for o in timed) for key in ("planned_s", "all_off_s")
                }

        if rank == 0:
            document = {
                "schema_version": JSON_SCHEMA_VERSION,
                "recipe": args.recipe,
                "tiny": args.tiny,
                "world_size": world,
                "backend": backend,
                "exit_code": code,
                "agree": code == EXIT_OK,
                "errors": errors,
                "disagreements": disagreements,
                "cuda_timings": timings,
                "reports": reports,
            }
            if args.json:
                text = json.dumps(document, default=repr)
            else:
                plan = kept["cfg"].overlap_plan if "cfg" in kept else None
                text = _render(document, plan.render() if plan is not None else None)
            # One write: the ranks share torchrun's stdout.
            try:
                sys.stdout.write(text + "\n")
                sys.stdout.flush()
            except BrokenPipeError:
                # The reader is gone (``| head``); the other ranks still wait at the barrier
                # below, and the exit code stays the check's. Python's signal docs: point
                # stdout at devnull so that the interpreter's last flush does not fail again.
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
        # Nobody leaves before rank 0 has printed: torchrun stops every process as soon as one
        # exits non-zero, which would cut the report short.
        dist.barrier()
        return code
    finally:
        _teardown()


def _teardown() -> None:
    import torch.distributed as dist

    if "megatron.core.parallel_state" in sys.modules:
        from megatron.core import parallel_state

        parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
