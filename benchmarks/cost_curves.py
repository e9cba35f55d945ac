"""How the step estimate moves between the published points: sequence length, CP, micro-batch,
VPP and scale.

    uv run python benchmarks/cost_curves.py [--json]

Prints, each as a table, the estimate's tokens/s/GPU and the share of its step in core
attention and in exposed communication for:

- Llama-3 8B (FP8 current scaling) from 4K to 1M tokens per sequence on H100 and B200, one
  GPU per 1K tokens as NVIDIA's long-sequence tables lay them out, without CP (TP up to 8, the
  rest DP) and with CP (TP 4 or 8, CP the rest, DP 4 where the count allows);
- Llama-3 70B on 64 H100, micro-batch 1 to 8 at a fixed global batch;
- Llama-3 70B on 64 H100, PP 4 and VPP 1 to 20 (the interleave the layers allow);
- Llama-3 70B on H100 from 8 to 16384 GPUs at a fixed batch per GPU, with the time the estimate
  itself takes.

Reported, not asserted: a layout the plan refuses (memory, divisibility) prints its reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from megatron.bridge.recipes import plan_recipe
from megatron.bridge.training.estimate import estimate_step


def _layout(
    tp: int = 1,
    pp: int = 1,
    vpp: int | None = None,
    cp: int = 1,
    *,
    gpus: int,
    gbs: int,
    mbs: int,
    seq: int,
) -> dict[str, Any]:
    return {
        "world_size": gpus,
        "global_batch_size": gbs,
        "micro_batch_size": mbs,
        "model.tensor_model_parallel_size": tp,
        "model.pipeline_model_parallel_size": pp,
        "model.virtual_pipeline_model_parallel_size": vpp,
        "model.context_parallel_size": cp,
        "model.sequence_parallel": tp > 1,
        "model.seq_length": seq,
    }


def point(recipe: str, gpu: str, precision: str, **layout: Any) -> dict[str, Any]:
    """The estimate of ``recipe`` at ``layout`` (see :func:`_layout`), or why there is none."""
    started = time.perf_counter()
    try:
        plan = plan_recipe(recipe, gpu=gpu, precision=precision, changes=_layout(**layout))
        estimate = estimate_step(plan)
    except ValueError as exc:
        return {**layout, "refused": str(exc).splitlines()[0]}
    seconds = time.perf_counter() - started
    p = estimate.prediction
    attention = sum(
        c.seconds_at_achieved_bandwidth for c in estimate.communication if c.mode == "cp"
    )
    return {
        **layout,
        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "step_s": p.step_seconds,
        "exposed_share": p.exposed_seconds / p.step_seconds,
        "bubble_share": p.bubble_seconds / p.step_seconds,
        "cp_ring_s": attention,
        "estimate_ms": seconds * 1e3,
    }


def long_sequences(gpu: str) -> list[dict[str, Any]]:
    """Llama-3 8B FP8 from 4K to 1M tokens, one GPU per 1K tokens, with and without CP."""
    out = []
    for k in (4, 8, 16, 32, 64, 128, 256, 512, 1024):
        seq, gpus = k * 1024, k
        tp = min(8, gpus)
        without = point(
            "llama3_8b", gpu, "fp8_cs", tp=tp, gpus=gpus, gbs=gpus // tp, mbs=1, seq=seq
        )
        dp = 4 if gpus >= 32 else 1
        tp_cp = 8 if gpus >= 64 else min(4, gpus)
        cp = max(1, gpus // (tp_cp * dp))
        with_cp = point(
            "llama3_8b", gpu, "fp8_cs", tp=tp_cp, cp=cp, gpus=gpus, gbs=dp, mbs=1, seq=seq
        )
        out.append({"seq_k": k, "gpu": gpu, "without_cp": without, "with_cp": with_cp})
    return out


def micro_batches() -> list[dict[str, Any]]:
    return [
        point("llama3_70b", "h100", "fp8_cs", tp=4, pp=8, vpp=5, gpus=64, gbs=256, mbs=m, seq=8192)
        for m in (1, 2, 4, 8)
    ]


def interleave() -> list[dict[str, Any]]:
    return [
        point("llama3_70b", "h100", "fp8_cs", tp=4, pp=4, vpp=v, gpus=64, gbs=256, mbs=1, seq=8192)
        for v in (None, 2, 4, 5, 10, 20)
    ]


def scale() -> list[dict[str, Any]]:
    out = []
    for gpus in (8, 64, 512, 2048, 8192, 16384):
        tp, pp = (8, 1) if gpus == 8 else (4, 8)
        out.append(
            point(
                "llama3_70b",
                "h100",
                "fp8_cs",
                tp=tp,
                pp=pp,
                vpp=None if pp == 1 else 5,
                gpus=gpus,
                gbs=gpus * 4 // (tp * pp) * pp,
                mbs=1,
                seq=8192,
            )
        )
    return out


def _fmt(p: dict[str, Any]) -> str:
    if "refused" in p:
        return f"refused: {p['refused'][:60]}"
    return (
        f"{p['tokens_per_s_per_gpu']:.0f} tok/s/GPU, exposed {p['exposed_share']:.1%}, "
        f"bubble {p['bubble_share']:.1%}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print every point as JSON")
    args = parser.parse_args(argv)
    doc = {
        "long_sequences": long_sequences("h100") + long_sequences("b200"),
        "micro_batch": micro_batches(),
        "vpp": interleave(),
        "scale": scale(),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print("| GPU | seq | without CP | with CP | CP speedup |")
    print("|---|---:|---|---|---:|")
    for r in doc["long_sequences"]:
        a, b = r["without_cp"], r["with_cp"]
        speedup = (
            f"{b['tokens_per_s_per_gpu'] / a['tokens_per_s_per_gpu']:.2f}"
            if "refused" not in a and "refused" not in b
            else "-"
        )
        print(
            f"| {r['gpu']} | {r['seq_k']}K | {_fmt(a)} (TP{a['tp']}) | {_fmt(b)} "
            f"(TP{b['tp']} CP{b['cp']}) | {speedup} |"
        )
    for title, key, col in (
        ("micro-batch", "micro_batch", "mbs"),
        ("VPP", "vpp", "vpp"),
        ("GPUs", "scale", "gpus"),
    ):
        print(f"\n| {title} | estimate | ms to estimate |\n|---:|---|---:|")
        for p in doc[key]:
            ms = f"{p['estimate_ms']:.1f}" if "estimate_ms" in p else "-"
            print(f"| {p[col]} | {_fmt(p)} | {ms} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
