"""Tests for megatron/bridge/check/: the check on real multi-process gloo worlds.

Each end-to-end test launches ``python -m torch.distributed.run --standalone --nproc-per-node 4
-m megatron.bridge.check ...`` in a subprocess (about 40-90 s each on a 2-core machine, almost
all of it imports in four processes); one module-scoped fixture per layout runs it once for all
the tests that read its report. The comparison is tested on those real reports with one rank's
report perturbed.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from megatron.bridge.check import (
    EXIT_DISAGREE,
    EXIT_ERROR,
    EXIT_OK,
    Layout,
    build_check_config,
    build_parser,
    compare_reports,
    fit_layout,
    overlap_off_request,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "launch_check.py"
TORCHRUN_TIMEOUT_S = 300
LAUNCHER = REPO / "examples" / "launch_gpt3_175b.py"
#: torchrun's own exit code when a worker exits non-zero (its ChildFailedError).
TORCHRUN_FAILED = 1


@dataclass
class Launch:
    """One torchrun launch of the check: its process, rank 0's JSON report, its wall time."""

    proc: subprocess.CompletedProcess
    document: dict[str, Any] | None
    wall_s: float


def _env(pythonpath: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    # A launch from inside another distributed job must not inherit its rank variables.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["OMP_NUM_THREADS"] = "1"
    return env


def torchrun(
    nproc: int, *args: str, script: Path | None = None, pythonpath: Path | None = None
) -> Launch:
    """Launch the check (or ``script``) on ``nproc`` local processes under torchrun;
    ``pythonpath`` is put first on the workers' import path."""
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
        env=_env(pythonpath),
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
    assert first["layout"] == {
        "tp": 2,
        "pp": 2,
        "vpp": 2,
        "cp": 1,
        "dp": 1,
        "ep": 1,
        "etp": None,
        "world_size": 4,
    }
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
    assert first["layout"] == {
        "tp": 2,
        "pp": 1,
        "vpp": None,
        "cp": 1,
        "dp": 2,
        "ep": 1,
        "etp": None,
        "world_size": 4,
    }
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


def _worker_exit_codes(stderr: str) -> dict[int, int]:
    """Each worker's exit code, from torchrun's failure summary (rank -> code)."""
    summary = re.findall(r"rank\s*: (\d+) \(local_rank.*\n\s*exitcode\s*: (-?\d+)", stderr)
    return {int(rank): int(code) for rank, code in summary}


def _exited_as_documented(launch: Launch, code: int, nproc: int = 4) -> None:
    """The documented exit codes under torchrun: every worker exits with the check's code
    (those torchrun stops first show -15, SIGTERM) and torchrun itself exits 1."""
    assert launch.proc.returncode == TORCHRUN_FAILED, _explain(launch)
    codes = _worker_exit_codes(launch.proc.stderr)
    assert codes.keys() == set(range(nproc)), launch.proc.stderr[-3000:]
    assert code in codes.values() and set(codes.values()) <= {code, -15}, codes


def test_sizes_that_do_not_split_the_world_fail_fast_on_every_rank():
    launch = torchrun(4, "--recipe", "gpt3_175b", "--tiny", "--tp", "3", "--json")
    assert launch.wall_s < 120, "an error must not leave ranks waiting"
    _exited_as_documented(launch, EXIT_ERROR)
    doc = launch.document
    assert (doc["exit_code"], doc["agree"], doc["reports"]) == (EXIT_ERROR, False, [])
    (error,) = doc["errors"]
    assert error.startswith("ranks 0-3: ValueError: world size 4 is not divisible by TP3")


def test_a_command_line_argparse_rejects_exits_2_on_every_rank():
    launch = torchrun(2, "--recipe", "gpt3_175b", "--gpu", "tpu_v5")
    _exited_as_documented(launch, EXIT_ERROR, nproc=2)
    assert "argument --gpu: invalid choice: 'tpu_v5'" in launch.proc.stderr
    assert launch.document is None


MOE_LAYOUT_RECIPE = """
    from megatron.bridge.recipes import recipe_spec

    # GPT-3 175B's shape as an MoE with dense first layers, EP8, on a custom layout string.
    MOE_LAYOUT = {
        "model.num_moe_experts": 64,
        "model.moe_router_topk": 4,
        "model.moe_ffn_hidden_size": 2048,
        "model.moe_layer_freq": (0,) * 2 + (1,) * 94,
        "model.moe_token_dispatcher_type": "alltoall",
        "model.expert_model_parallel_size": 8,
        "model.expert_tensor_parallel_size": 1,
        "model.add_bias_linear": False,
        "model.bias_activation_fusion": False,
        "model.virtual_pipeline_model_parallel_size": None,
        "model.pipeline_model_parallel_layout": "Et*5|(t*6|)*14t*7L",
    }


    def moe_layout(**overrides):
        return recipe_spec("gpt3_175b").changed(**MOE_LAYOUT).with_overrides(**overrides)
"""


def test_moe_on_a_custom_layout_builds_tiny_with_every_rank_agreeing(tmp_path):
    (tmp_path / "moe_layout_recipe.py").write_text(textwrap.dedent(MOE_LAYOUT_RECIPE))
    launch = torchrun(
        4, "--recipe", "moe_layout_recipe:moe_layout", "--tiny", "--json", pythonpath=tmp_path
    )
    assert launch.proc.returncode == 0, _explain(launch)
    doc = launch.document
    assert (doc["exit_code"], doc["disagreements"]) == (EXIT_OK, [])
    first = doc["reports"][0]
    assert (first["layout"]["pp"], first["layout"]["vpp"], first["layout"]["ep"]) == (2, 2, 2)
    # The layout string rebuilt on PP2 x VPP2: "Et|t|t|tL", one decoder per chunk.
    assert first["model"]["num_layers"] == 4
    assert all(c["layers"] == 1 for r in doc["reports"] for c in r["chunks"])
    assert any(n.startswith("moe_token_dispatcher_type 'alltoall' turned") for n in first["notes"])


PER_RANK_RECIPE = """
    import os

    from megatron.bridge.recipes import recipe_spec


    def per_rank(**overrides):
        # A recipe that reads a setting of its own process: rank 1 turns the DP overlap off.
        spec = recipe_spec("gpt3_175b", **overrides)
        if os.environ["RANK"] == "1":
            spec = spec.changed(overlap=(("overlap_grad_reduce", False),))
        return spec
"""


def test_ranks_that_disagree_exit_1_on_every_rank(tmp_path):
    (tmp_path / "per_rank_recipe.py").write_text(textwrap.dedent(PER_RANK_RECIPE))
    launch = torchrun(
        4,
        "--recipe",
        "per_rank_recipe:per_rank",
        "--tiny",
        "--pp",
        "1",
        "--json",
        pythonpath=tmp_path,
    )
    _exited_as_documented(launch, EXIT_DISAGREE)
    doc = launch.document
    assert (doc["exit_code"], doc["agree"], doc["errors"]) == (EXIT_DISAGREE, False, [])
    assert any(
        line.startswith("rank 1: plan differs") and "overlap_grad_reduce" in line
        for line in doc["disagreements"]
    ), doc["disagreements"]


def test_the_documented_exit_codes_are_the_checks():
    # The exit codes the command's help and the docs give are the ones the tests above see.
    assert (EXIT_OK, EXIT_DISAGREE, EXIT_ERROR) == (0, 1, 2)
    epilog = build_parser().epilog
    assert "0 all ranks agree; 1 they disagree; 2 an error on any rank" in epilog
    assert "torchrun itself exits 1" in epilog
    docs = (REPO / "docs" / "training" / "communication-overlap.md").read_text()
    for row in (
        "| 0 | every rank agrees",
        "| 1 | the ranks disagree",
        "| 2 | an error on any rank",
    ):
        assert row in docs, row


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


def _choices(parser: argparse.ArgumentParser, dest: str) -> list[str]:
    (action,) = [a for a in parser._actions if a.dest == dest]
    return list(action.choices)


def test_gpu_and_precision_take_explains_choices():
    from megatron.bridge.cli.parser import build_parser as explain_parser
    from megatron.bridge.training.precisions import PRECISIONS

    explain = explain_parser()
    (sub,) = [a for a in explain._actions if isinstance(a, argparse._SubParsersAction)]
    for dest in ("gpu", "precision"):
        assert _choices(build_parser(), dest) == _choices(sub.choices["explain"], dest)
    # Every precision of the table, so a new row is a new choice.
    assert set(PRECISIONS) <= set(_choices(build_parser(), "precision"))


def _check_config(*argv: str, world_size: int = 4):
    args = build_parser().parse_args(["--recipe", "gpt3_175b", *argv])
    return build_check_config(args, world_size=world_size, on_cuda=False)


def test_the_checked_config_follows_gpu_and_precision():
    cfg, _, notes = _check_config("--tiny", "--gpu", "b200", "--precision", "fp8_cs")
    assert cfg.gpu == "b200"
    assert (cfg.model.fp8, cfg.model.fp8_recipe) == ("hybrid", "tensorwise")
    assert any(
        n.startswith("no GPU visible: the plan and the launch environment are for b200")
        for n in notes
    )
    # The aliases explain takes resolve the same way.
    alias, _, _ = _check_config("--tiny", "--gpu", "b200", "--precision", "mxfp8")
    assert alias.model.fp8_recipe == "mxfp8"
    # Without the flags: the recipe's precision, and on a CPU no GPU.
    plain, _, notes = _check_config("--tiny")
    assert (plain.gpu, plain.model.fp8) == (None, None)
    assert any(
        n.startswith("no GPU visible: the launch environment is planned as for Hopper")
        for n in notes
    )


def test_a_precision_the_gpu_cannot_train_in_is_refused_as_explain_refuses_it(capsys):
    from megatron.bridge.cli import main as explain

    with pytest.raises(ValueError, match="MXFP8") as refused:
        _check_config("--tiny", "--gpu", "h100", "--precision", "fp8_mx")
    argv = ["explain", "--recipe", "gpt3_175b", "--gpu", "h100", "--precision", "fp8_mx"]
    assert explain(argv) == 2
    assert str(refused.value) in capsys.readouterr().err


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("gpu", "precision"), [("b200", "fp8_cs"), ("h100", None)])
def test_the_launcher_checks_the_config_it_exports(tmp_path, gpu, precision):
    launcher = _load(LAUNCHER)
    sbatch = launcher.sbatch_for(gpu=gpu, precision=precision, job_dir=tmp_path, nsys=False)
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in sbatch.splitlines()
        if line.startswith("export ")
    )
    srun = next(line for line in sbatch.splitlines() if line.startswith("srun "))
    argv = shlex.split(srun.partition(" -m megatron.bridge.check ")[2])
    args = build_parser().parse_args(argv)
    assert (args.gpu, args.precision) == (gpu, precision)
    # The check, at the launch's size, builds the config whose environment the script exports.
    num_gpus = launcher.gpt3_175b.SPEC.num_gpus
    cfg, layout, _ = build_check_config(args, world_size=num_gpus, on_cuda=False)
    assert (cfg.gpu, layout.dp) == (gpu, 32)
    assert cfg.env_vars and all(exports.get(k) == v for k, v in cfg.env_vars.items()), (
        cfg.env_vars,
        exports,
    )
    connections = "32" if gpu == "b200" else "1"
    assert exports["CUDA_DEVICE_MAX_CONNECTIONS"] == connections


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
