"""Measure the overlap layer's costs as ratios against baselines taken in the same run.

    uv run python benchmarks/bench_overlap.py [--repeats N]

Prints five figures (goals in brackets):
  1. plan time per call              (pure resolution on plain facts)
  2. setup() time per call           (real megatron-core configs; every call resolves)
  3. import comm_overlap / import megatron.core transformer_config       [<= 0.10]
  4. `bridge-overlap explain` wall / bare `python -c pass`               [<= 25x]
  5. `bridge-overlap explain --recipe llama31_405b` / `python -c pass`   [<= 25x]
The machines are noisy: each figure is the median of several runs, and the two sides of a
ratio are measured alternately so that load affects both alike. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path
from unittest import mock

# Child interpreters may write .pyc files, as on a user's machine: with PYTHONDONTWRITEBYTECODE
# set (some CI images set it), every start would recompile megatron-core and torch from source.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_ENV)
    return time.perf_counter() - start


def _paired(a: list[str], b: list[str], repeats: int) -> tuple[float, float]:
    """Median wall time of two commands, run alternately."""
    _wall(a), _wall(b)  # warm the file cache and write .pyc files
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(_wall(a))
        tb.append(_wall(b))
    return statistics.median(ta), statistics.median(tb)


def _per_call(stmt, number: int, repeats: int) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=repeats)) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    py = sys.executable
    logging.disable(logging.WARNING)  # the refusal warnings are not what is being timed

    from megatron.bridge.recipes import gpt3_175b
    from megatron.bridge.training import comm_overlap as co

    # GPT-3 175B at TP4 x PP4 (VPP2) on 128 GPUs (DP 8), TP overlap on with its published preset.
    spec = gpt3_175b.spec(pp_size=4, vpp_size=2).changed(world_size=128, tp_comm_overlap=True)
    facts = spec.job
    request = spec.request()
    plan_s = _per_call(lambda: co.plan_comm_overlap(request, facts), 2000, args.repeats)

    # The same recipe's megatron-core configs (imports torch and megatron-core).
    cfg = spec.build()
    model, opt, ddp = cfg.model, cfg.optimizer, cfg.ddp
    with mock.patch.object(co, "HAVE_TE", True):  # TE cannot be imported on a CPU machine
        setup_s = _per_call(
            lambda: request.setup(model, opt, ddp, data_parallel_size=8, micro_batch_size=1),
            2000,
            args.repeats,
        )
    ours, mcore = _paired(
        [py, "-c", "import megatron.bridge.training.comm_overlap"],
        [py, "-c", "import megatron.core.transformer.transformer_config"],
        args.repeats,
    )
    script = shutil.which("bridge-overlap") or str(Path(py).with_name("bridge-overlap"))
    explain, bare = _paired([script, "explain"], [py, "-c", "pass"], args.repeats)
    # A recipe is planned from its torch-free spec, as on a launch node without torch.
    recipe, bare_again = _paired(
        [script, "explain", "--recipe", "llama31_405b"], [py, "-c", "pass"], args.repeats
    )

    print(f"plan_comm_overlap per call : {plan_s * 1e6:8.1f} us")
    print(f"setup() per call           : {setup_s * 1e6:8.1f} us")
    print(
        f"import ratio               : {ours / mcore:8.3f}      (goal <= 0.10; "
        f"comm_overlap {ours * 1e3:.0f} ms vs megatron.core transformer_config {mcore * 1e3:.0f} ms)"
    )
    print(
        f"explain / bare python      : {explain / bare:8.2f}x     (goal <= 25x; "
        f"bridge-overlap explain {explain * 1e3:.0f} ms vs python -c pass {bare * 1e3:.0f} ms)"
    )
    print(
        f"explain --recipe / bare    : {recipe / bare_again:8.2f}x     (goal <= 25x; "
        f"explain --recipe llama31_405b {recipe * 1e3:.0f} ms vs python -c pass "
        f"{bare_again * 1e3:.0f} ms)"
    )


if __name__ == "__main__":
    main()
