"""The global batch splits into micro-batches the schedule can run, as megatron-core requires."""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.cli import main
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training.comm_overlap import check_layout
from megatron.bridge.training.parallel_layout import micro_batches_per_step


@pytest.mark.parametrize(
    ("gbs", "mbs", "dp", "pp", "interleaved", "count"),
    [
        (128, 1, 2, 4, True, 64),
        (32, 1, 8, 4, True, 4),
        (8, 1, 8, 4, False, 1),  # 1F1B runs fewer micro-batches than stages (warmup shrinks)
        (24, 2, 4, 1, False, 3),
    ],
)
def test_the_count_megatron_core_runs(gbs, mbs, dp, pp, interleaved, count):
    got = micro_batches_per_step(
        global_batch_size=gbs, micro_batch_size=mbs, dp_size=dp, pp_size=pp, interleaved=interleaved
    )
    assert got == count


def test_a_batch_that_does_not_split_over_the_replicas_is_refused():
    with pytest.raises(ValueError, match=r"micro_batch_size x DP = 2 x 4 = 8 must divide it"):
        micro_batches_per_step(
            global_batch_size=12, micro_batch_size=2, dp_size=4, pp_size=1, interleaved=False
        )


@pytest.mark.parametrize("gbs", [8, 48])  # 1 micro-batch (< PP) and 6 (last group of 2 < PP)
def test_the_interleaved_schedule_needs_whole_groups_of_pp(gbs):
    with pytest.raises(ValueError, match=r"groups of PP=4 .* multiple of 32"):
        micro_batches_per_step(
            global_batch_size=gbs, micro_batch_size=1, dp_size=8, pp_size=4, interleaved=True
        )


def test_check_layout_reads_the_job_batch():
    job = recipe_spec("llama3_70b").job  # PP4 x VPP5, DP 2, micro-batch 1
    check_layout(job)
    assert job.micro_batches == 64
    with pytest.raises(ValueError, match=r"global_batch_size=4 gives 2 micro-batch\(es\)"):
        check_layout(dataclasses.replace(job, global_batch_size=4))


def test_the_cli_refuses_it_with_exit_2(capsys):
    assert main(["explain", "--global-batch-size", "8"]) == 2
    assert "forward_backward_pipelining_with_interleaving" in capsys.readouterr().err
