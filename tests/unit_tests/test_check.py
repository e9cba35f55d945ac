"""Tests for megatron/bridge/check/: the check on real multi-process gloo worlds.

Each end-to-end test launches ``python -m torch.distributed.run --standalone --nproc-per-node 4
-m megatron.bridge.check ...`` in a subprocess (about 40-90 s each on a 2-core machine, almost
all of it imports in four processes); one module-scoped fixture per layout runs it once for all
the tests that read its report. The comparison is tested on those real reports with one rank's
report perturbed.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from megatron.bridge.check import Layout, compare_reports, fit_layout, overlap_off_request

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "launch_check.py"
TORCHRUN_TIMEOUT_S = 300


@dataclass
class Launch:
    """One torchrun launch of the check: its process, rank 0's JSON report, its wall time."""

    proc: subprocess.CompletedProcess
    document: dict[str, Any] | None
    wall_s: float


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # A launch from inside another distributed job must not inherit its rank variables.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["OMP_NUM_THREADS"] = "1"
    return env


def torchrun(nproc: int, *args: str, script: Path | None = None) -> Launch:
    """Launch the check (or ``script``) on ``nproc`` local processes under torchrun."""
    target = [str(script)] if script else ["-m", "megatron.bridge.check"]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # rendezvous on a free local port
        "--nproc-per-node",
        str(nproc),
        *target,
        *args,
    ]
    start = time.perf_counter()
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=TORCHRUN_TIMEOUT_S,
        cwd=REPO,
        env=_env(),
    )
    wall = time.perf_counter() - start
    print(f"torchrun {' '.join(args)}: {wall:.1f} s wall, exit {proc.returncode}")
    documents = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(documents) <= 1, "only rank 0 prints a report"
    return Launch(proc, documents[0] if documents else None, wall)


def _explain(launch: Launch) -> str:
    return f"exit {launch.proc.returncode}\nstdout:\n{launch.proc.stdout}\nstderr:\n{launch.proc.stderr[-6000:]}"


@pytest.fixture(scope="module")
def tp2_pp2_vpp2() -> Launch:
    """GPT-3 175B, tiny, on 4 ranks: the recipe's TP4 x PP8 (VPP6) fitted to TP2 x PP2 (VPP2)."""
    return torchrun(4, "--recipe", "gpt3_175b", "--tiny", "--json")


@pytest.fixture(scope="module")
def tp2_dp2() -> Launch:
    """Llama-3 70B, tiny, on 4 ranks without pipeline or context parallelism: TP2 x DP2."""
    return torchrun(4, "--recipe", "llama3_70b", "--tiny", "--pp", "1", "--cp", "1", "--json")


def _layer_params(model: dict[str, Any], tp: int) -> int:
    """Parameters of one GPT-3 layer on one TP rank (LayerNorm, biases, FFN 4 x hidden)."""
    h = model["hidden_size"]
    return (
        2 * h  # input LayerNorm (replicated)
        + 3 * h * h // tp
        + 3 * h // tp  # fused QKV, column-parallel
        + h * h // tp
        + h  # attention projection, row-parallel (its bias is whole on every rank)
        + 2 * h  # pre-MLP LayerNorm
        + 4 * h * h // tp
        + 4 * h // tp  # fc1, column-parallel
        + 4 * h * h // tp
        + h  # fc2, row-parallel
    )


def _sp_off_note(report: dict[str, Any]) -> str:
    (note,) = [n for n in report["notes"] if n.startswith("sequence_parallel turned OFF")]
    return note


def test_tp2_pp2_vpp2_all_ranks_agree_and_every_chunk_is_built(tp2_pp2_vpp2):
    launch = tp2_pp2_vpp2
    assert launch.proc.returncode == 0, _explain(launch)
    doc = launch.document
    assert (doc["exit_code"], doc["agree"], doc["errors"], doc["disagreements"]) == (
        0,
        True,
        [],
        [],
    )
    assert (doc["world_size"], doc["backend"]) == (4, "gloo")
    reports = doc["reports"]
    assert [r["rank"] for r in reports] == [0, 1, 2, 3]
    assert compare_reports(reports) == []
    first = reports[0]
    assert first["layout"] == {"tp": 2, "pp": 2, "vpp": 2, "cp": 1, "dp": 1, "world_size": 4}
    assert {(r["coords"]["tp"], r["coords"]["pp"]) for r in reports} == {
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
    }

    # SP was on in the recipe; the local layer spec cannot run it, and the report says so.
    model = first["model"]
    assert (model["sequence_parallel"], model["layer_spec"]) == (False, "local")
    # The recipe asks for TP overlap where the layout can run it ("auto"): this run cannot.
    assert "TP comm overlap" in _sp_off_note(first) and "not planned" in _sp_off_note(first)
    tp_overlap = next(d for d in first["plan"]["decisions"] if d["knob"] == "tp_comm_overlap")
    assert (tp_overlap["value"], tp_overlap["source"]) == (False, "derived")
    assert "not requested" in tp_overlap["reason"]
    assert "sequence_parallel is False" in tp_overlap["reason"]
    # The interleaved pipeline's own overlap is derived from the live layout.
    p2p = next(d for d in first["plan"]["decisions"] if d["knob"] == "overlap_p2p_comm")
    assert (p2p["value"], p2p["source"]) == (True, "derived")

    # Every (pp rank, chunk) is built on both TP ranks with the same count, and the counts add up:
    # each chunk holds one layer; the first adds the embeddings, the last the final LayerNorm
    # and the output layer.
    chunks = {
        (r["coords"]["pp"], c["vp_stage"], r["coords"]["tp"]): c
        for r in reports
        for c in r["chunks"]
    }
    assert len(chunks) == 8
    h, seq = model["hidden_size"], model["seq_length"]
    vocab_rows = math.ceil(model["vocab_size"] / (128 * 2)) * 128 * 2 // 2
    layer = _layer_params(model, tp=2)
    expected = {
        (0, 0): layer + vocab_rows * h + seq * h,
        (0, 1): layer,
        (1, 0): layer,
        (1, 1): layer + 2 * h + vocab_rows * h,
    }
    for (pp, vp, tp), chunk in chunks.items():
        assert chunk["layers"] == 1
        assert chunk["params"] == expected[(pp, vp)], (pp, vp, tp)
        assert chunk["pre_process"] == ((pp, vp) == (0, 0))
        assert chunk["post_process"] == ((pp, vp) == (1, 1))


def test_tp2_dp2_all_ranks_agree(tp2_dp2):
    launch = tp2_dp2
    assert launch.proc.returncode == 0, _explain(launch)
    doc = launch.document
    assert (doc["exit_code"], doc["agree"], doc["disagreements"]) == (0, True, [])
    reports = doc["reports"]
    first = reports[0]
    assert first["layout"] == {"tp": 2, "pp": 1, "vpp": None, "cp": 1, "dp": 2, "world_size": 4}
    assert {(r["coords"]["tp"], r["coords"]["dp"]) for r in reports} == {
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
    }
    assert "TP comm overlap" in _sp_off_note(first)
    assert any("VPP5 of the recipe dropped" in n for n in first["notes"])
    # One chunk per rank, with the embedding and the output layer; TP peers and DP replicas
    # hold the same count.
    assert all(len(r["chunks"]) == 1 for r in reports)
    assert all(r["chunks"][0]["pre_process"] and r["chunks"][0]["post_process"] for r in reports)
    assert len({r["chunks"][0]["params"] for r in reports}) == 1
    decisions = {d["knob"]: d for d in first["plan"]["decisions"]}
    assert (
        decisions["overlap_grad_reduce"]["value"],
        decisions["overlap_grad_reduce"]["source"],
    ) == (
        True,
        "derived",
    )
    assert decisions["overlap_p2p_comm"]["value"] is False


def _decision(report: dict[str, Any], knob: str) -> dict[str, Any]:
    return next(d for d in report["plan"]["decisions"] if d["knob"] == knob)


def _flip_tp_overlap(reports):
    _decision(reports[2], "tp_comm_overlap")["value"] = True


def _other_max_connections(reports):
    entry = next(e for e in reports[3]["launch_env"] if e["name"] == "CUDA_DEVICE_MAX_CONNECTIONS")
    entry["value"] = "32"


def _more_params_on_one_tp_rank(reports):
    reports[1]["chunks"][0]["params"] += 1


def _chunk_missing(reports):
    del reports[3]["chunks"][1]


def _embedding_on_the_wrong_chunk(reports):
    reports[0]["chunks"][1]["pre_process"] = True


def _same_position_twice(reports):
    reports[1]["coords"] = dict(reports[0]["coords"])


@pytest.mark.parametrize(
    ("perturb", "expected"),
    [
        (
            _flip_tp_overlap,
            r"^rank 2: plan differs .*decisions\[tp_comm_overlap\]\.value: False != True",
        ),
        (_other_max_connections, r"^rank 3: launch_env differs .*CUDA_DEVICE_MAX_CONNECTIONS"),
        (_more_params_on_one_tp_rank, r"^pp rank 0 chunk 0: .*different parameter counts"),
        (_chunk_missing, r"^rank 3 holds chunks \[0\], expected \[0, 1\]"),
        (_embedding_on_the_wrong_chunk, r"^rank 0 chunk 1: embedding \(pre_process\) is True"),
        (_same_position_twice, r"^rank 1 and rank 0 both sit at"),
    ],
)
def test_compare_reports_names_the_rank_that_disagrees(tp2_pp2_vpp2, perturb, expected):
    assert tp2_pp2_vpp2.document is not None, _explain(tp2_pp2_vpp2)
    reports = copy.deepcopy(tp2_pp2_vpp2.document["reports"])
    perturb(reports)
    problems = compare_reports(reports)
    assert problems, "the perturbed reports must disagree"
    assert re.search(expected, problems[0]), problems


def test_sizes_that_do_not_split_the_world_fail_fast_on_every_rank():
    launch = torchrun(4, "--recipe", "gpt3_175b", "--tiny", "--tp", "3", "--json")
    assert launch.proc.returncode != 0
    assert launch.wall_s < 120, "an error must not leave ranks waiting"
    doc = launch.document
    assert (doc["exit_code"], doc["agree"], doc["reports"]) == (2, False, [])
    (error,) = doc["errors"]
    assert error.startswith("ranks 0-3: ValueError: world size 4 is not divisible by TP3")
    # torchrun lists every worker: none exited 0 (those it stopped first show -15, SIGTERM).
    summary = re.findall(
        r"rank\s*: (\d+) \(local_rank.*\n\s*exitcode\s*: (-?\d+)", launch.proc.stderr
    )
    codes = {int(rank): int(code) for rank, code in summary}
    assert codes.keys() == {0, 1, 2, 3}, launch.proc.stderr[-3000:]
    assert 2 in codes.values() and 0 not in codes.values(), codes


ONE_RANK_FAILS = """
    import json
    import sys
    from pathlib import Path

    import torch.distributed as dist
    from megatron.bridge.check import gather_outcomes

    dist.init_process_group("gloo")

    def step():
        if dist.get_rank() == 1:
            raise RuntimeError("rank 1 broke while building")
        return {"built": True}

    outcomes = gather_outcomes(step)
    # One file per rank: the ranks share torchrun's stdout, where their lines could interleave.
    Path(sys.argv[1], f"rank{dist.get_rank()}.json").write_text(json.dumps(outcomes))
    dist.destroy_process_group()
"""


def test_a_rank_that_fails_still_joins_the_gather(tmp_path):
    # Only rank 1 fails; if it left without joining the all-gather, rank 0 would wait for it
    # until the subprocess timeout.
    script = tmp_path / "one_rank_fails.py"
    script.write_text(textwrap.dedent(ONE_RANK_FAILS))
    launch = torchrun(2, str(tmp_path), script=script)
    assert launch.proc.returncode == 0, _explain(launch)
    seen = {rank: json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)}
    assert seen[0] == seen[1]
    ok, failed = seen[0]
    assert ok == {"rank": 0, "ok": True, "value": {"built": True}}
    assert (failed["rank"], failed["ok"], failed["error"]) == (
        1,
        False,
        "RuntimeError: rank 1 broke while building",
    )
    assert "Traceback" in failed["traceback"]


GPT3 = {"tp": 4, "pp": 8, "vpp": 6, "cp": 1}
LLAMA3_70B = {"tp": 4, "pp": 4, "vpp": 5, "cp": 2}
NONE: dict[str, int | None] = {}


@pytest.mark.parametrize(
    ("recipe", "world", "overrides", "tiny", "layout", "note"),
    [
        (GPT3, 4, NONE, True, Layout(tp=2, pp=2, vpp=2, cp=1, dp=1), None),
        (GPT3, 8, NONE, True, Layout(tp=2, pp=2, vpp=2, cp=1, dp=2), None),
        (GPT3, 4, {"pp": 1}, True, Layout(tp=2, pp=1, vpp=None, cp=1, dp=2), "VPP6"),
        (LLAMA3_70B, 4, NONE, True, Layout(tp=2, pp=2, vpp=2, cp=1, dp=1), "CP2"),
        (LLAMA3_70B, 8, NONE, True, Layout(tp=2, pp=2, vpp=2, cp=2, dp=1), None),
        (GPT3, 1, NONE, True, Layout(tp=1, pp=1, vpp=None, cp=1, dp=1), "TP4"),
        (GPT3, 1024, NONE, False, Layout(tp=4, pp=8, vpp=6, cp=1, dp=32), None),
        (
            GPT3,
            4,
            {"tp": 4, "pp": 1, "vpp": 1},
            False,
            Layout(tp=4, pp=1, vpp=None, cp=1, dp=1),
            None,
        ),
    ],
)
def test_fit_layout(recipe, world, overrides, tiny, layout, note):
    fitted, notes = fit_layout(world_size=world, recipe=recipe, overrides=overrides, tiny=tiny)
    assert fitted == layout
    if note is None:
        assert notes == []
    else:
        assert any(n.startswith(note) for n in notes), notes


@pytest.mark.parametrize(
    ("world", "overrides", "tiny", "match"),
    [
        (4, {"tp": 3}, True, "not divisible by TP3 x PP1 x CP1"),
        (4, NONE, False, "not divisible by TP4 x PP8 x CP1"),
        (4, {"pp": 1, "vpp": 2}, True, "--vpp 2 needs pipeline parallelism"),
    ],
)
def test_fit_layout_refuses_sizes_the_world_cannot_hold(world, overrides, tiny, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        fit_layout(world_size=world, recipe=GPT3, overrides=overrides, tiny=tiny)


def test_overlap_off_request_leaves_no_overlap_on():
    # The CUDA step timing compares the plan with this baseline; it must resolve (no conflict)
    # and keep nothing on, on a layout where the recipe's own request turns every area on.
    import dataclasses

    from megatron.bridge.recipes import get_recipe
    from megatron.bridge.training.comm_overlap import te_status
    from megatron.bridge.training.resolve import resolve_config

    cfg = get_recipe("gpt3_175b")
    planned = resolve_config(cfg, world_size=1024, te=te_status("assume")).plan
    assert {"tp_comm_overlap", "overlap_p2p_comm", "overlap_grad_reduce"} <= {
        d.knob for d in planned.decisions if d.value is True
    }
    off = dataclasses.replace(cfg, comm_overlap=overlap_off_request(cfg.comm_overlap))
    plan = resolve_config(off, world_size=1024, te=te_status("assume")).plan
    still_on = {d.knob for d in plan.decisions if d.value is True}
    # Batching pipeline sends overlaps nothing; the rules turn it on once p2p overlap is off.
    assert still_on <= {"batch_p2p_comm"}, still_on
    assert cfg.comm_overlap.tp_comm_overlap == "auto", "the recipe's own request is left as it was"


def test_slurm_dry_run_of_the_example_prints_the_srun_line(tmp_path):
    spec = importlib.util.spec_from_file_location("launch_check", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    sbatch = example.slurm_sbatch(recipe="gpt3_175b", job_dir=tmp_path, extra_args=["--pp", "1"])
    assert "#SBATCH --nodes=2" in sbatch.splitlines()
    srun = example.srun_line(sbatch)
    assert " torchrun " in srun and "--nnodes 2 --nproc-per-node 8" in srun
    assert srun.endswith("-m megatron.bridge.check --recipe gpt3_175b --tiny --json --pp 1")


def test_check_cuda_branch():
    import torch

    if not torch.cuda.is_available():
        pytest.skip(
            "needs CUDA: the NCCL world, TE userbuffers and the timed forward/backward steps "
            "only run on a GPU machine"
        )
    nproc = max(1, torch.cuda.device_count())
    launch = torchrun(nproc, "--recipe", "gpt3_175b", "--tiny", "--json")
    assert launch.proc.returncode == 0, _explain(launch)
    doc = launch.document
    assert (doc["backend"], doc["agree"]) == ("nccl", True)
    timings = doc["cuda_timings"]
    assert timings["planned_s"] > 0 and timings["all_off_s"] > 0
