"""``bridge-overlap``: read the overlap plan of a layout before launching it.

``bridge-overlap explain`` prints, for plain parallel sizes (or a recipe), every overlap
decision with its source and reason, the userbuffers preset and whether it fits the model, the
launch environment the NeMo-Run plugin would set, and the warnings with their fixes. It needs
no GPU and no cluster, and imports neither torch, megatron-core nor Transformer Engine unless a
recipe is asked for.

Exit codes: 0 the plan is valid; 1 ``--strict`` refused a requested overlap; 2 invalid input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, get_args

from megatron.bridge.training import launch_env
from megatron.bridge.training.comm_overlap import (
    PUBLISHED_PRESETS,
    CommOverlapConfig,
    LayoutFacts,
    OverlapPlan,
    OverlapRefusedError,
    TEStatus,
    find_userbuffers_preset,
    plan_comm_overlap,
    preset_shapes_of,
    probe_transformer_engine,
)

#: GPUs the command knows, with whether each is SM100 (Blackwell) or newer.
GPUS: dict[str, bool] = {"a100": False, "h100": False, "h200": False, "b200": True, "gb200": True}

#: Version of the ``--json`` document layout; bumped when a key changes meaning or goes away.
JSON_SCHEMA_VERSION = 1

EXIT_OK, EXIT_REFUSED, EXIT_INVALID = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep the message one line
        self.print_usage(sys.stderr)
        self.exit(EXIT_INVALID, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


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
            "bf16, hidden 12288, seq 2048, mbs 1)."
        ),
    )
    ex.add_argument("--recipe", help="explain a recipe (its sizes; flags given here override them)")
    ex.add_argument("--tp", type=_positive_int, help="tensor-parallel size (default 4)")
    ex.add_argument("--pp", type=_positive_int, help="pipeline-parallel size (default 4)")
    ex.add_argument("--vpp", type=_positive_int, help="virtual pipeline size (default 2; 1 = none)")
    ex.add_argument("--cp", type=_positive_int, help="context-parallel size (default 1)")
    ex.add_argument("--ep", type=_positive_int, help="expert-parallel size (default 1)")
    ex.add_argument("--world-size", type=_positive_int, help="number of GPUs (default 128)")
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
        default=True,
        help="request TP comm overlap (default: on)",
    )
    ex.add_argument("--gpu", choices=sorted(GPUS), help="GPU model (default h100)")
    ex.add_argument(
        "--precision", choices=["bf16", "fp8"], help="training precision (default bf16)"
    )
    ex.add_argument("--seq-length", type=_positive_int, help="sequence length (default 2048)")
    ex.add_argument("--micro-batch-size", type=_positive_int, help="micro-batch size (default 1)")
    ex.add_argument("--hidden-size", type=_positive_int, help="model hidden size (default 12288)")
    ex.add_argument("--num-moe-experts", type=_positive_int, help="MoE experts (default: dense)")
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
    ex.add_argument("--strict", action="store_true", help="exit 1 instead of falling back")
    ex.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    return parser


_REFERENCE = {
    "tp": 4,
    "pp": 4,
    "vpp": 2,
    "cp": 1,
    "ep": 1,
    "world_size": 128,
    "gpu": "h100",
    "precision": "bf16",
    "seq_length": 2048,
    "micro_batch_size": 1,
    "hidden_size": 12288,
    "distributed_optimizer": True,
    "num_moe_experts": None,
    "moe_token_dispatcher": None,
}


#: CLI flag -> recipe keyword, for the flags a recipe takes as overrides.
_RECIPE_OVERRIDES = {
    "gpu": "gpu",
    "precision": "precision",
    "tp": "tp_size",
    "pp": "pp_size",
    "vpp": "vpp_size",
    "cp": "cp_size",
    "seq_length": "seq_length",
    "micro_batch_size": "micro_batch_size",
}


def _layout(args: argparse.Namespace) -> dict[str, Any]:
    """The layout to explain: reference defaults, then the recipe's sizes, then the flags."""
    layout = dict(_REFERENCE)
    layout["preset"] = "auto"
    layout["preset_source"] = "auto"
    if args.recipe:
        from megatron.bridge.recipes import recipe_layout  # imports megatron-core: only here

        # Flags that shape the model go into the recipe, so it picks its preset for them.
        overrides = {
            recipe_kw: getattr(args, flag)
            for flag, recipe_kw in _RECIPE_OVERRIDES.items()
            if getattr(args, flag) is not None
        }
        try:
            layout.update(recipe_layout(args.recipe, **overrides))
        except TypeError as exc:  # a recipe without that keyword
            raise ValueError(f"--recipe {args.recipe}: {exc}") from None
        layout["preset_source"] = "recipe"
    if args.preset is not None:
        layout["preset_source"] = "user"
    for key in (*_REFERENCE, "preset"):
        given = getattr(args, key, None)
        if given is not None:
            layout[key] = given
    if layout["vpp"] == 1:
        layout["vpp"] = None
    if args.sequence_parallel is None:
        layout.setdefault("sequence_parallel", layout["tp"] > 1)
    else:
        layout["sequence_parallel"] = args.sequence_parallel
    try:
        layout["dp"] = launch_env.data_parallel_size(
            num_gpus=layout["world_size"],
            tp_size=layout["tp"],
            cp_size=layout["cp"],
            pp_size=layout["pp"],
        )
    except ValueError as exc:
        raise ValueError(f"--world-size {layout['world_size']}: {exc}") from None
    return layout


def _preset(layout: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Choose the userbuffers preset; returns (preset or None, description for the output)."""
    wanted = layout["preset"]
    if wanted == "none":
        if layout["preset_source"] == "recipe":
            detail = "the recipe found no published preset for its shape: TE defaults"
            return None, {"name": None, "source": "recipe", "detail": detail}
        return None, {"name": None, "source": "none", "detail": "TE defaults (--preset none)"}
    if wanted != "auto":
        if wanted not in PUBLISHED_PRESETS:
            raise ValueError(
                f"--preset {wanted!r} is not a published preset; choose 'auto', 'none' or one of: "
                + ", ".join(sorted(PUBLISHED_PRESETS))
            )
        preset = PUBLISHED_PRESETS[wanted]
        if layout["preset_source"] == "recipe":
            return preset, {"name": wanted, "source": "recipe", "detail": "picked by the recipe"}
        return preset, {"name": wanted, "source": "user", "detail": "named with --preset"}
    try:
        name, preset = find_userbuffers_preset(
            precision=layout["precision"],
            gpu=layout["gpu"],
            hidden_size=layout["hidden_size"],
            tp_size=layout["tp"],
            cp_size=layout["cp"],
            micro_batch_size=layout["micro_batch_size"],
            seq_length=layout["seq_length"],
        )
    except ValueError:
        return None, {
            "name": None,
            "source": "auto",
            "detail": "no published preset for this shape: TE defaults",
        }
    return preset, {"name": name, "source": "auto", "detail": "published preset for this shape"}


def explain(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], OverlapPlan, launch_env.LaunchEnvPlan]:
    """Build the explanation document, the overlap plan and the launch-environment plan."""
    layout = _layout(args)
    preset, preset_info = _preset(layout)
    if args.te == "detect":
        te = probe_transformer_engine()
    else:
        # Planning for a cluster: TE is installed there even though it cannot import here.
        te = TEStatus(
            True, None, "assumed present where the job runs (--te detect checks this machine)"
        )
    te_info = {
        "mode": args.te,
        "available": te.available,
        "version": te.version,
        "reason": te.reason,
    }
    facts = LayoutFacts(
        tp_size=layout["tp"],
        pp_size=layout["pp"],
        vpp_size=layout["vpp"],
        cp_size=layout["cp"],
        ep_size=layout["ep"],
        dp_size=layout["dp"],
        sequence_parallel=layout["sequence_parallel"],
        te_available=te.available,
        te_reason=te.reason if not te.available else "",
        te_version=te.version,
        use_distributed_optimizer=layout["distributed_optimizer"],
        hidden_size=layout["hidden_size"],
        seq_length=layout["seq_length"],
        micro_batch_size=layout["micro_batch_size"],
        bf16=True,
        fp8=layout["precision"] == "fp8",
        num_moe_experts=layout["num_moe_experts"],
        moe_token_dispatcher_type=layout["moe_token_dispatcher"],
    )
    request = CommOverlapConfig(
        tp_comm_overlap=args.tp_comm_overlap,
        tp_comm_overlap_cfg=preset,
        overlap_moe_expert_parallel_comm=True if args.ep_overlap else None,
        strict=args.strict,
    )
    plan = plan_comm_overlap(request, facts)
    env_plan = launch_env.plan_launch_env(
        gpu_sm100_or_newer=GPUS[layout["gpu"]],
        tp_size=layout["tp"],
        cp_size=layout["cp"],
        dp_size=layout["dp"],
        pp_size=layout["pp"],
        moe_flex_dispatcher_backend=args.moe_flex_backend,
        a2a_overlap=bool(plan.value("overlap_moe_expert_parallel_comm")),
        layernorm_sm_margin=args.layernorm_sm_margin,
        nccl_pp_comm_chunksize=args.nccl_pp_chunksize,
    )
    if preset is not None and plan.value("tp_comm_overlap"):
        shapes = preset_shapes_of(preset)
        preset_info["matches_model"] = any(
            s.hidden_size == layout["hidden_size"] and s.tp_size == layout["tp"] for s in shapes
        )
    else:
        preset_info["matches_model"] = None
    doc = {
        "schema_version": JSON_SCHEMA_VERSION,
        "recipe": args.recipe,
        "layout": {
            k: layout[k]
            for k in (
                "world_size",
                "tp",
                "pp",
                "vpp",
                "cp",
                "ep",
                "dp",
                "sequence_parallel",
                "distributed_optimizer",
                "gpu",
                "precision",
                "hidden_size",
                "seq_length",
                "micro_batch_size",
            )
        },
        "transformer_engine": te_info,
        "preset": preset_info,
        "overlap": plan.to_dict(),
        "launch_env": [
            {"name": e.name, "value": e.value, "reason": e.reason} for e in env_plan.entries
        ],
        "warnings": list(plan.warnings),
    }
    return doc, plan, env_plan


def _render(doc: dict[str, Any], plan: OverlapPlan, env_plan: launch_env.LaunchEnvPlan) -> str:
    lay = doc["layout"]
    head = (
        f"Layout: {lay['world_size']} x {lay['gpu'].upper()}  TP{lay['tp']} PP{lay['pp']}"
        f" VPP{lay['vpp'] or '-'} CP{lay['cp']} EP{lay['ep']} -> DP{lay['dp']}"
        f"  SP {'on' if lay['sequence_parallel'] else 'off'}"
        f"  dist-opt {'on' if lay['distributed_optimizer'] else 'off'}  {lay['precision']}"
        f"  hidden {lay['hidden_size']} seq {lay['seq_length']} mbs {lay['micro_batch_size']}"
    )
    if doc["recipe"]:
        head = f"Recipe: {doc['recipe']}\n{head}"
    te = doc["transformer_engine"]
    lines = [
        head,
        f"Transformer Engine: {te['mode']} ({'available' if te['available'] else 'NOT available'}; {te['reason'] or te['version']})",
    ]
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
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bridge-overlap`` console script."""
    args = build_parser().parse_args(argv)
    try:
        doc, plan, env_plan = explain(args)
    except OverlapRefusedError as exc:
        print(f"bridge-overlap: refused (--strict): {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except (ValueError, TypeError) as exc:
        print(f"bridge-overlap: error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(_render(doc, plan, env_plan))
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
