"""``bridge-overlap``: read the overlap plan of a layout before launching it.

``bridge-overlap explain`` prints, for plain parallel sizes (or a recipe), every overlap
decision with its source and reason, the userbuffers preset and whether it fits the model, the
launch environment the NeMo-Run plugin would set, what each overlap hides in a step, and the
warnings with their fixes. It needs no GPU and no cluster, and imports neither torch,
megatron-core nor Transformer Engine (only a recipe that builds a container, or KEY=VALUE
overrides, need megatron-core).

Flags and recipes reach the same plan: flags become a :class:`RecipeSpec` (:func:`flags_spec`),
a shipped recipe has one, and ``RecipeSpec.plan`` checks the layout (the errors megatron-core
would raise at cluster start) and runs the rules; a recipe that builds a container is resolved
the way ``runtime_config_update`` resolves it. The launch environment comes from one function
for all of them.

Exit codes (every failure is a message on stderr, never a traceback):

- 0: the plan is valid (``recipes``: the list was printed);
- 1: ``--strict`` refused a requested overlap;
- 2: invalid input: a flag, an override, a recipe (unknown, not importable, returning neither a
  ``RecipeSpec`` nor a ``ConfigContainer``, failing), or a configuration megatron-core's own
  validation rejects (its message is quoted);
- 3: an internal error, a bug of ``bridge-overlap`` (the message names the exception and where it
  was raised; please report it);
- 130: interrupted (Ctrl-C);
- 141: stdout was closed before everything was written (``bridge-overlap explain | head``): the
  command stops quietly, with the code a shell gives a program that SIGPIPE ends.

With ``--json``, an error is a JSON document on stdout too (``{"error": ..., "exit_code": ...}``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

from megatron.bridge.recipes import (
    available_recipes,
    change_container,
    get_recipe,
    gpt3_175b,
    plan_recipe,
    recipe_spec,
)
from megatron.bridge.recipes.spec import RecipeSpec
from megatron.bridge.training import hardware, launch_env
from megatron.bridge.training.comm_overlap import (
    PUBLISHED_PRESETS,
    OverlapPlan,
    OverlapRefusedError,
    te_status,
)
from megatron.bridge.training.estimate import Estimate, estimate_step
from megatron.bridge.training.job import PositionEmbeddingType
from megatron.bridge.training.parallel_layout import data_parallel_size
from megatron.bridge.training.userbuffers import (
    preset_fits_model,
)
from megatron.bridge.training.validators import positive_int_argument
from megatron.bridge.utils.megatron_core_errors import megatron_core_rejection

#: Version of the ``--json`` document layout; bumped when a key changes meaning or goes away.
JSON_SCHEMA_VERSION = 2

EXIT_OK, EXIT_REFUSED, EXIT_INVALID, EXIT_INTERNAL = 0, 1, 2, 3
#: Ctrl-C: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130
#: The reader closed stdout early: 128 + SIGPIPE, as a shell reports a program SIGPIPE ends.
EXIT_BROKEN_PIPE = 141
#: Every exit code ``main`` returns.
EXIT_CODES = frozenset(
    {EXIT_OK, EXIT_REFUSED, EXIT_INVALID, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE}
)

_REJECTED = "megatron-core rejected the configuration: "


class UsageError(ValueError):
    """A command line argparse rejected (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        # Raised rather than printed, so that --json can answer with a JSON error document.
        raise UsageError(f"{self.prog}: error: {message}")


#: The reference job ``explain`` plans without flags: GPT-3 175B's shape on 128 H100 GPUs, TP4
#: with sequence parallelism, PP4 with VPP2, distributed optimizer, bf16.
REFERENCE: RecipeSpec = gpt3_175b.SPEC.changed(
    name="reference",
    world_size=128,
    global_batch_size=None,
    **{"model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 2},
)

#: Each ``explain`` flag that describes the job, and the field it changes: a spec field or a
#: job-description field (``RecipeSpec.changed``). Flags and recipes are planned through it alike.
FLAG_FIELDS: dict[str, str] = {
    "world_size": "world_size",
    "gpu": "gpu",
    "precision": "precision",
    "micro_batch_size": "micro_batch_size",
    "global_batch_size": "global_batch_size",
    "distributed_optimizer": "use_distributed_optimizer",
    "tp_comm_overlap": "tp_comm_overlap",
    "preset": "preset",
    "tp": "model.tensor_model_parallel_size",
    "pp": "model.pipeline_model_parallel_size",
    "vpp": "model.virtual_pipeline_model_parallel_size",
    "cp": "model.context_parallel_size",
    "ep": "model.expert_model_parallel_size",
    "etp": "model.expert_tensor_parallel_size",
    "sequence_parallel": "model.sequence_parallel",
    "seq_length": "model.seq_length",
    "hidden_size": "model.hidden_size",
    "num_layers": "model.num_layers",
    "num_attention_heads": "model.num_attention_heads",
    "num_query_groups": "model.num_query_groups",
    "ffn_hidden_size": "model.ffn_hidden_size",
    "vocab_size": "model.vocab_size",
    "swiglu": "model.gated_linear_unit",
    "add_bias_linear": "model.add_bias_linear",
    "add_qkv_bias": "model.add_qkv_bias",
    "normalization": "model.normalization",
    "position_embedding_type": "model.position_embedding_type",
    "embedding_in_pipeline_split": "model.account_for_embedding_in_pipeline_split",
    "loss_in_pipeline_split": "model.account_for_loss_in_pipeline_split",
    "num_moe_experts": "model.num_moe_experts",
    "moe_token_dispatcher": "model.moe_token_dispatcher_type",
    "moe_flex_backend": "model.moe_flex_dispatcher_backend",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``bridge-overlap``."""
    parser = _Parser(prog="bridge-overlap", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ex = sub.add_parser(
        "explain",
        help="show every overlap decision for a layout, with reasons",
        description=(
            "Explain the communication-overlap plan of a layout. With no arguments: the "
            "reference layout (TP4 + SP, PP4 with VPP2, distributed optimizer, 128 H100 GPUs, "
            "bf16, GPT-3 175B's shape: 96 layers, hidden 12288, 96 heads, seq 2048, mbs 1)."
        ),
    )
    ex.add_argument(
        "--recipe",
        help=(
            "explain a recipe: a name (see 'bridge-overlap recipes') or 'package.module:function'; "
            "flags given here override its sizes"
        ),
    )
    ex.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help=(
            "with --recipe: overrides of the recipe's ConfigContainer, e.g. "
            "model.tensor_model_parallel_size=8 comm_overlap.tp_comm_overlap=false "
            "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=8 (builds the container: imports torch)"
        ),
    )
    ex.add_argument("--tp", type=positive_int_argument, help="tensor-parallel size (default 4)")
    ex.add_argument("--pp", type=positive_int_argument, help="pipeline-parallel size (default 4)")
    ex.add_argument(
        "--vpp", type=positive_int_argument, help="virtual pipeline size (default 2; 1 = none)"
    )
    ex.add_argument("--cp", type=positive_int_argument, help="context-parallel size (default 1)")
    ex.add_argument("--ep", type=positive_int_argument, help="expert-parallel size (default 1)")
    ex.add_argument(
        "--etp", type=positive_int_argument, help="expert tensor-parallel size (default: TP)"
    )
    ex.add_argument("--world-size", type=positive_int_argument, help="number of GPUs (default 128)")
    ex.add_argument(
        "--sequence-parallel",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sequence parallelism (default: on when TP > 1)",
    )
    ex.add_argument(
        "--distributed-optimizer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="distributed optimizer (default: on)",
    )
    ex.add_argument(
        "--tp-comm-overlap",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="request TP comm overlap (default: on)",
    )
    ex.add_argument("--gpu", choices=sorted(hardware.GPUS), help="GPU model (default h100)")
    ex.add_argument(
        "--precision", choices=["bf16", "fp8"], help="training precision (default bf16)"
    )
    ex.add_argument(
        "--seq-length", type=positive_int_argument, help="sequence length (default 2048)"
    )
    ex.add_argument(
        "--micro-batch-size", type=positive_int_argument, help="micro-batch size (default 1)"
    )
    ex.add_argument(
        "--global-batch-size",
        type=positive_int_argument,
        help="samples per optimizer step (default: the recipe's; micro-batch x DP x PP without one)",
    )
    ex.add_argument(
        "--hidden-size", type=positive_int_argument, help="model hidden size (default 12288)"
    )
    ex.add_argument(
        "--num-layers", type=positive_int_argument, help="transformer layers (default 96)"
    )
    ex.add_argument(
        "--num-attention-heads", type=positive_int_argument, help="attention heads (default 96)"
    )
    ex.add_argument(
        "--num-query-groups", type=positive_int_argument, help="GQA query groups (default: MHA)"
    )
    for part in ("embedding", "loss"):
        ex.add_argument(
            f"--{part}-in-pipeline-split",
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"count the {part} as a layer when splitting layers over pipeline stages",
        )
    ex.add_argument(
        "--num-moe-experts",
        "--num-experts",
        dest="num_moe_experts",
        type=positive_int_argument,
        help="MoE experts (default: dense)",
    )
    ex.add_argument(
        "--moe-token-dispatcher", choices=["allgather", "alltoall", "flex"], help="MoE dispatcher"
    )
    ex.add_argument(
        "--moe-flex-backend",
        choices=list(get_args(launch_env.MoeFlexDispatcherBackend)),
        help="MoE flex dispatcher backend (affects CUDA_DEVICE_MAX_CONNECTIONS)",
    )
    ex.add_argument("--ep-overlap", action="store_true", help="request EP all-to-all overlap")
    ex.add_argument(
        "--preset",
        help="userbuffers preset name, 'auto' (look one up for the shape; default) or 'none'",
    )
    ex.add_argument(
        "--te",
        choices=["assume", "detect"],
        default="assume",
        help="'assume' TE is installed where the job runs (default), or 'detect' it here",
    )
    ex.add_argument(
        "--layernorm-sm-margin",
        type=int,
        default=launch_env.DEFAULT_LAYERNORM_SM_MARGIN,
        help="LayerNorm SM margin for the launch environment (default 16)",
    )
    ex.add_argument("--nccl-pp-chunksize", type=int, help="NCCL_P2P_NET_CHUNKSIZE when PP > 1")
    ex.add_argument(
        "--ffn-hidden-size",
        type=positive_int_argument,
        help="MLP width for the estimate (default 4 x hidden)",
    )
    ex.add_argument("--vocab-size", type=positive_int_argument, help="vocabulary (default 51200)")
    ex.add_argument(
        "--swiglu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="gated (SwiGLU) MLP (megatron-core's gated_linear_unit)",
    )
    # Megatron-LM's spellings (megatron/training/arguments.py).
    ex.add_argument(
        "--disable-bias-linear",
        dest="add_bias_linear",
        action="store_const",
        const=False,
        help="no biases in linear layers (add_bias_linear=False)",
    )
    ex.add_argument(
        "--add-qkv-bias",
        dest="add_qkv_bias",
        action="store_const",
        const=True,
        help="a bias on the QKV projection only",
    )
    ex.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], help="normalization layer")
    ex.add_argument(
        "--position-embedding-type",
        choices=list(get_args(PositionEmbeddingType)),
        help="position embedding (learned_absolute adds an s x h table)",
    )
    ex.add_argument(
        "--untie-embeddings-and-output-weights",
        action="store_const",
        const=True,
        help="the output layer has its own weight (share_embeddings_and_output_weights=False)",
    )
    ex.add_argument(
        "--gpus-per-node", type=positive_int_argument, default=8, help="GPUs per node (default 8)"
    )
    ex.add_argument(
        "--nvlink-domain",
        type=positive_int_argument,
        help="GPUs sharing NVLink (default: the GPU's, e.g. one node; 72 on GB200 NVL72)",
    )
    ex.add_argument(
        "--plot",
        metavar="PATH",
        help="draw one step as lanes, with the plan's overlap and with none (PNG or SVG; needs "
        "the 'plot' extra)",
    )
    ex.add_argument("--strict", action="store_true", help="exit 1 instead of falling back")
    ex.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    ls = sub.add_parser(
        "recipes",
        help="list the recipes available here, with each one's layout",
        description=(
            "List the shipped recipes and those registered under the "
            "'megatron_bridge.recipes' entry-point group, with each one's published layout."
        ),
    )
    ls.add_argument("--json", action="store_true", help="print the list as one JSON object")
    return parser


def list_recipes() -> list[dict[str, Any]]:
    """Every available recipe with its target and, when it has a spec, its published layout.

    A recipe that cannot be used (its module does not import, it fails or returns the wrong
    type) is listed with ``error`` set to why; the others have ``error`` None.
    """
    rows = []
    for name, target in sorted(available_recipes().items()):
        row: dict[str, Any] = {"name": name, "target": target, "layout": None, "error": None}
        try:
            spec = recipe_spec(name)
        except Exception as exc:
            rejection = megatron_core_rejection(exc)
            if rejection is None and not isinstance(exc, ValueError | TypeError):
                raise
            row["error"] = str(exc) if rejection is None else _REJECTED + rejection
            rows.append(row)
            continue
        if spec is not None:
            job = spec.job
            row["layout"] = {
                "world_size": job.world_size,
                "gpu": job.gpu,
                "precision": spec.precision,
                "tp": job.tp_size,
                "pp": job.pp_size,
                "vpp": job.vpp_size,
                "cp": job.cp_size,
                "ep": job.ep_size,
                "num_layers": job.model.num_layers,
                "hidden_size": job.model.hidden_size,
                "seq_length": job.model.seq_length,
            }
        rows.append(row)
    return rows


def _render_recipes(rows: list[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        lay = row["layout"]
        if row.get("error"):
            shape = f"BROKEN: {row['error']}"
        elif lay is None:
            shape = "builds a ConfigContainer (plan it with --world-size)"
        else:
            shape = (
                f"{lay['world_size']} x {lay['gpu'].upper()} {lay['precision']}  TP{lay['tp']} "
                f"PP{lay['pp']} VPP{lay['vpp'] or '-'} CP{lay['cp']} EP{lay['ep']}  "
                f"{lay['num_layers']} layers, hidden {lay['hidden_size']}, seq {lay['seq_length']}"
            )
        lines.append(f"{row['name']:<16} {shape}  [{row['target']}]")
    return "\n".join(lines)


def flag_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The job changes the flags given make (:data:`FLAG_FIELDS`); ``overlap`` holds the
    overlap-request fields they set (``strict``, EP overlap)."""
    changes = {
        field: getattr(args, flag)
        for flag, field in FLAG_FIELDS.items()
        if getattr(args, flag, None) is not None
    }
    if args.untie_embeddings_and_output_weights is not None:
        # Megatron-LM's flag says the opposite of the field it sets.
        changes[
            "model.share_embeddings_and_output_weights"
        ] = not args.untie_embeddings_and_output_weights
    preset = changes.get("preset")
    if preset == "auto":
        del changes["preset"]
    elif preset not in (None, "none") and preset not in PUBLISHED_PRESETS:
        raise ValueError(
            f"--preset {preset!r} is not a published preset; choose 'auto', 'none' or one of: "
            + ", ".join(sorted(PUBLISHED_PRESETS))
        )
    overlap: dict[str, Any] = {"strict": args.strict}
    if args.ep_overlap:
        overlap["overlap_moe_expert_parallel_comm"] = True
    changes["overlap"] = tuple(overlap.items())
    return changes


def flags_spec(args: argparse.Namespace) -> RecipeSpec:
    """The job the flags describe: the recipe's (or the reference job) with the flags applied.

    Flags and recipes are then planned by the same code (``RecipeSpec.plan``); the flags'
    overlap fields join the recipe's own.
    """
    if args.recipe:
        base = recipe_spec(args.recipe)
        if base is None:
            raise ValueError(
                f"Recipe {args.recipe!r} returns a ConfigContainer: it has no job description "
                "to plan without torch."
            )
    else:
        base = REFERENCE
    changes = flag_changes(args)
    changes["overlap"] = tuple({**dict(base.overlap), **dict(changes["overlap"])}.items())
    spec = base.changed(**changes)
    if args.world_size is not None:
        job = spec.job
        try:
            data_parallel_size(
                num_gpus=job.world_size,
                tp_size=job.tp_size,
                cp_size=job.cp_size,
                pp_size=job.pp_size,
            )
        except ValueError as exc:
            raise ValueError(f"--world-size {args.world_size}: {exc}") from None
    return spec


def _preset_info(args: argparse.Namespace, spec: RecipeSpec | None) -> dict[str, Any]:
    """Where the preset came from: --preset, an override, the recipe, or the automatic choice."""
    if args.preset == "none":
        return {"source": "none", "detail": "--preset none"}
    if args.preset not in (None, "auto"):
        return {"source": "user", "detail": f"--preset {args.preset}"}
    if any(o.startswith("comm_overlap.tp_comm_overlap_cfg=") for o in args.overrides or ()):
        return {"source": "user", "detail": "comm_overlap.tp_comm_overlap_cfg override"}
    if args.recipe:
        return {"source": "recipe", "detail": "picked by the recipe"}
    return {"source": "auto", "detail": spec.preset_choice().detail}


def _plan_container(args: argparse.Namespace) -> OverlapPlan:
    """Plan a recipe with KEY=VALUE overrides: build its container, override, resolve it.

    The container is the one the spec with the flags applied builds (a recipe without a spec
    builds its own and takes the flags as changes), so flags mean the same with and without
    overrides.
    """
    # megatron-core: only for a recipe container.
    from megatron.bridge.training.overrides import apply_overrides
    from megatron.bridge.training.resolve import check_launch_environment, resolve_config

    if recipe_spec(args.recipe) is not None:
        spec = flags_spec(args)
        cfg, world = spec.build(), spec.num_gpus
    else:
        cfg = get_recipe(args.recipe)
        world = change_container(args.recipe, cfg, flag_changes(args))
    apply_overrides(cfg, args.overrides)
    if cfg.comm_overlap is None:
        raise ValueError(_no_request_message(args.recipe, args.overrides))
    resolved = resolve_config(cfg, world_size=world, te=te_status(args.te))
    # The environment the job gets from the container (the launcher may add to it): a value
    # contradicting the layout warns, or is refused with --strict, as at model-build time.
    env = {name: str(value) for name, value in cfg.env_vars.items()}
    problems = check_launch_environment(cfg, resolved, env=env)
    args._env_problems = [f"launch environment (cfg.env_vars): {p}" for p in problems]
    return resolved.plan


def explain(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], OverlapPlan, launch_env.LaunchEnvPlan]:
    """Build the explanation document, the overlap plan and the launch-environment plan."""
    overrides = getattr(args, "overrides", None) or []
    if overrides and not args.recipe:
        raise ValueError(
            f"KEY=VALUE overrides ({overrides[0]!r}, ...) apply to a recipe's container: "
            "give --recipe NAME."
        )
    if args.plot is not None:
        _check_plot_path(args.plot)  # before planning, which can take seconds
    spec = None
    if overrides:
        plan = _plan_container(args)
    elif args.recipe and recipe_spec(args.recipe) is None:
        plan = plan_recipe(args.recipe, te=args.te, changes=flag_changes(args))
    else:
        spec = flags_spec(args)
        plan = spec.plan(te=args.te)
    env_plan = launch_env.plan_launch_env_for(
        plan.job,
        a2a_overlap=plan.a2a_overlap,
        layernorm_sm_margin=args.layernorm_sm_margin,
        nccl_pp_comm_chunksize=args.nccl_pp_chunksize,
    )
    try:
        estimate = estimate_step(
            plan, gpus_per_node=args.gpus_per_node, nvlink_domain=args.nvlink_domain
        )
    except ValueError:  # the job does not give the model's whole shape
        estimate = None
    doc = document(
        plan, env_plan, recipe=args.recipe, te_mode=args.te, preset_info=_preset_info(args, spec)
    )
    doc["warnings"].extend(getattr(args, "_env_problems", []))
    doc["estimate"] = None if estimate is None else estimate.to_dict()
    args._estimate = estimate
    if args.plot is not None:
        if estimate is None:
            raise ValueError(
                "--plot needs the model's dimensions, which this recipe does not give."
            )
        from megatron.bridge.training.estimate_plot import plot_step  # matplotlib: only here

        try:
            plot_step(estimate, args.plot, title=args.recipe)
        except (ValueError, ImportError, OSError) as exc:
            raise ValueError(f"--plot {args.plot}: {exc}") from None
    return doc, plan, env_plan


def _check_plot_path(path: str) -> None:
    """Refuse a ``--plot`` path whose file cannot be created, naming the flag and the fix."""
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        raise ValueError(
            f"--plot {path}: the directory {str(folder)!r} does not exist; create it or give a "
            "path in an existing directory."
        )
    if target.is_dir():
        raise ValueError(f"--plot {path}: is a directory; give a file name ending in .png or .svg.")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"--plot {path}: the directory {str(folder)!r} is not writable.")


def _no_request_message(recipe: str, overrides: Sequence[str]) -> str:
    """Why a recipe whose overrides leave it without a ``comm_overlap`` request has no plan."""
    dropped = [o for o in overrides if o.partition("=")[0].strip() == "comm_overlap"]
    cause = f"the override {dropped[-1]!r}" if dropped else "the overrides"
    return (
        f"Recipe {recipe!r}: {cause} leaves it without a comm_overlap request, so there is no "
        "overlap plan to explain. Drop that override to explain the recipe's request, or turn "
        "single overlaps off instead (e.g. comm_overlap.tp_comm_overlap=false)."
    )


def document(
    plan: OverlapPlan,
    env_plan: launch_env.LaunchEnvPlan,
    *,
    recipe: str | None,
    te_mode: str,
    preset_info: dict[str, Any],
) -> dict[str, Any]:
    """The ``--json`` document of a plan (its JSON Schema is ``explain.schema.json`` here)."""
    f = plan.job
    on = bool(plan.value("tp_comm_overlap"))
    name = plan.preset_name
    matches = None
    if on and plan.preset_names:
        matches = preset_fits_model(
            plan.preset_names, hidden_size=f.model.hidden_size, tp_size=f.tp_size
        )
    elif on and plan.value("tp_comm_overlap_cfg") is not None:
        preset_info = {**preset_info, "detail": "a custom userbuffers config"}
    if on and plan.value("tp_comm_overlap_cfg") is None and preset_info["source"] == "recipe":
        preset_info = {**preset_info, "detail": "the recipe found no published preset: TE defaults"}
    if not on:
        preset_info = {**preset_info, "detail": "TP overlap is off: no preset"}
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "recipe": recipe,
        "layout": {
            "world_size": f.world_size,
            "tp": f.tp_size,
            "pp": f.pp_size,
            "vpp": f.vpp_size,
            "cp": f.cp_size,
            "ep": f.ep_size,
            "etp": f.etp_size,
            "dp": f.dp_size,
            "expert_dp": f.expert_data_parallel_size,
            "sequence_parallel": f.sequence_parallel,
            "distributed_optimizer": f.use_distributed_optimizer,
            "gpu": f.gpu,
            "precision": f.precision,
            "num_layers": f.model.num_layers,
            "hidden_size": f.model.hidden_size,
            "num_attention_heads": f.model.num_attention_heads,
            "num_query_groups": f.model.num_query_groups,
            "num_moe_experts": f.model.num_moe_experts,
            "seq_length": f.model.seq_length,
            "micro_batch_size": f.micro_batch_size,
        },
        "transformer_engine": {
            "mode": te_mode,
            "available": f.te_available,
            "version": f.te_version,
            "reason": f.te_reason,
        },
        "preset": {"name": name, **preset_info, "matches_model": matches},
        "overlap": plan.to_dict(),
        "launch_env": [
            {"name": e.name, "value": e.value, "reason": e.reason} for e in env_plan.entries
        ],
        "warnings": list(plan.warnings),
    }


def _render(
    doc: dict[str, Any],
    plan: OverlapPlan,
    env_plan: launch_env.LaunchEnvPlan,
    estimate: Estimate | None = None,
) -> str:
    lay = doc["layout"]
    head = (
        f"Layout: {lay['world_size']} x {(lay['gpu'] or 'GPU').upper()}  TP{lay['tp']} "
        f"PP{lay['pp']} VPP{lay['vpp'] or '-'} CP{lay['cp']} EP{lay['ep']} -> DP{lay['dp']}"
        f"  SP {'on' if lay['sequence_parallel'] else 'off'}"
        f"  dist-opt {'on' if lay['distributed_optimizer'] else 'off'}  {lay['precision']}"
        f"  hidden {lay['hidden_size']} seq {lay['seq_length']} mbs {lay['micro_batch_size']}"
    )
    if lay["expert_dp"] is not None:
        head += f"\nExperts: {lay['num_moe_experts']} over EP{lay['ep']} x ETP{lay['etp']} -> expert-DP{lay['expert_dp']}"
    if doc["recipe"]:
        head = f"Recipe: {doc['recipe']}\n{head}"
    te = doc["transformer_engine"]
    state = "available" if te["available"] else "NOT available"
    detail = (
        te["reason"]
        or te["version"]
        or ("assumed present where the job runs" if te["mode"] == "assume" else "found here")
    )
    lines = [head, f"Transformer Engine: {te['mode']} ({state}; {detail})"]
    p = doc["preset"]
    if p["name"]:
        fit = {True: "matches the model", False: "does NOT match the model", None: "unused"}[
            p["matches_model"]
        ]
        lines.append(f"Userbuffers preset: {p['name']} ({p['detail']}; {fit})")
    else:
        lines.append(f"Userbuffers preset: none ({p['detail']})")
    lines.append("")
    lines.append(plan.render())
    lines.append("")
    lines.append("Launch environment (PerfEnvPlugin):")
    lines.extend(f"  {line}" for line in env_plan.explain())
    if estimate is not None:
        lines.append("")
        lines.append("One step, per GPU of the busiest pipeline stage (lower bounds at peak):")
        lines.extend(f"  {line}" for line in estimate.render().splitlines())
    extra = [w for w in doc["warnings"] if w not in plan.warnings]
    lines.extend(f"WARNING: {w}" for w in extra)
    return "\n".join(lines)


def _fail(message: str, code: int, *, as_json: bool) -> int:
    """Report a failure: one line on stderr and, with ``--json``, the error document on stdout."""
    if as_json:
        print(json.dumps({"error": message, "exit_code": code}, indent=2))
    print(message, file=sys.stderr)
    return code


def _raised_at(exc: BaseException) -> str:
    tb = exc.__traceback__
    if tb is None:
        return "an unknown place"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"


def _fail_with(exc: Exception, *, as_json: bool) -> int:
    """The exit code and message of an exception out of a subcommand (see the exit codes above)."""
    if isinstance(exc, OverlapRefusedError):
        return _fail(f"bridge-overlap: refused (--strict): {exc}", EXIT_REFUSED, as_json=as_json)
    rejection = megatron_core_rejection(exc)
    if rejection is not None:
        return _fail(
            f"bridge-overlap: error: {_REJECTED}{rejection}", EXIT_INVALID, as_json=as_json
        )
    if isinstance(exc, ValueError | TypeError):
        return _fail(f"bridge-overlap: error: {exc}", EXIT_INVALID, as_json=as_json)
    return _fail(
        f"bridge-overlap: internal error (a bug in bridge-overlap, please report it with the "
        f"command line): {type(exc).__name__}: {exc} (raised at {_raised_at(exc)})",
        EXIT_INTERNAL,
        as_json=as_json,
    )


def _run(argv: list[str], *, as_json: bool) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        if not as_json:
            parser.print_usage(sys.stderr)
        return _fail(str(exc), EXIT_INVALID, as_json=as_json)
    except SystemExit as exc:  # --help, after printing the help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    if args.command == "recipes":
        try:
            rows = list_recipes()
        except Exception as exc:
            return _fail_with(exc, as_json=as_json)
        print(json.dumps({"recipes": rows}, indent=2) if args.json else _render_recipes(rows))
        return EXIT_OK
    try:
        doc, plan, env_plan = explain(args)
    except Exception as exc:
        return _fail_with(exc, as_json=as_json)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(_render(doc, plan, env_plan, args._estimate))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bridge-overlap`` console script; returns the exit code.

    Never raises: every failure is a message and one of the exit codes of this module's
    docstring (``EXIT_CODES``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        try:
            code = _run(argv, as_json=as_json)
        except KeyboardInterrupt:
            code = _fail("bridge-overlap: interrupted", EXIT_INTERRUPTED, as_json=as_json)
        # Written out here, inside the guard, rather than at interpreter exit.
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader is gone (``| head``): stop quietly. Python's signal docs: point stdout at
        # devnull so that the interpreter's last flush does not fail again.
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    return code


def _stdout_to_devnull() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # stdout is no file (a test's capture): nothing is flushed to it at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
