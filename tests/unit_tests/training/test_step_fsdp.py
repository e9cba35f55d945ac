"""Megatron-FSDP and distributed-optimizer instances (HSDP) in the step and memory estimates.

Megatron-FSDP with ``optim_grads_params`` gathers each layer's parameters before its forward and
again before its backward, and reduce-scatters its gradients after every backward
(``megatron_fsdp.py``): per micro-batch, where the distributed optimizer gathers and reduces
once per step. ``num_distributed_optimizer_instances`` splits the DP ranks into groups the
sharding stays within; the groups reduce among themselves once per step.
"""

from __future__ import annotations

import dataclasses

import pytest

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, main
from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.estimate import estimate_step
from megatron.bridge.training.estimate.comm import FSDP_GATHER, FSDP_REDUCE
from megatron.bridge.training.estimate.memory import memory_of_job
from megatron.bridge.training.estimate.result import FSDP_PREFETCH
from megatron.bridge.training.job import JobDescription, ModelDescription
from tests.unit_tests.conftest import size_fields

#: A dense GPT, 8 layers, on 16 H100 (two 8-GPU NVLink domains) at TP1: DP16.
MODEL = ModelDescription(
    **size_fields(layers=8, hidden=2048, heads=16, ffn=8192, seq=2048, vocab=32000), bf16=True
)


def _job(**fields) -> JobDescription:
    base = {
        "gpu": "h100",
        "micro_batch_size": 1,
        "global_batch_size": 64,  # 4 micro-batches per DP rank
        "use_distributed_optimizer": True,
        "grad_reduce_in_fp32": False,
    }
    return JobDescription(model=MODEL, world_size=16, **(base | fields))


def _dp(job: JobDescription) -> dict[str, object]:
    estimate = estimate_step(plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False), job))
    return {c.collective: c for c in estimate.communication if c.mode == "dp"}


def test_megatron_fsdp_gathers_twice_and_reduces_once_per_micro_batch():
    dist_opt = _dp(_job())
    fsdp = _dp(_job(use_megatron_fsdp=True))
    gather = dist_opt["all-gather (params)"].bytes_per_gpu_per_step
    reduce = dist_opt["reduce-scatter (grads)"].bytes_per_gpu_per_step
    # By hand: the dense parameters P, 15/16 of them sent in bf16 (2 bytes), 4 micro-batches.
    params = gather / (15 / 16) / 2
    assert set(fsdp) == {FSDP_GATHER, FSDP_REDUCE}
    assert fsdp[FSDP_GATHER].bytes_per_gpu_per_step == pytest.approx(4 * 2 * 15 / 16 * params * 2)
    assert fsdp[FSDP_REDUCE].bytes_per_gpu_per_step == pytest.approx(4 * reduce)
    assert {c.hidden_by for c in fsdp.values()} == {FSDP_PREFETCH}


def test_hsdp_shards_within_a_group_on_nvlink_and_reduces_across_groups_once():
    whole = _dp(_job(use_megatron_fsdp=True))
    hsdp = _dp(
        _job(
            use_megatron_fsdp=True,
            num_distributed_optimizer_instances=2,
            outer_dp_sharding_strategy="optim",
        )
    )
    params = whole[FSDP_REDUCE].bytes_per_gpu_per_step / 4 / (15 / 16) / 2
    # 16 ranks in 2 groups of 8: each group is one H100 NVLink domain.
    assert whole[FSDP_GATHER].link == "network"
    assert hsdp[FSDP_GATHER].link == "nvlink"
    assert hsdp[FSDP_GATHER].bytes_per_gpu_per_step == pytest.approx(4 * 2 * 7 / 8 * params * 2)
    assert hsdp[FSDP_REDUCE].bytes_per_gpu_per_step == pytest.approx(4 * 7 / 8 * params * 2)
    # Once per step across the 2 groups: half of each rank's 1/8 shard, grads and params.
    across = ("reduce-scatter (grads) across the groups", "all-gather (params) across the groups")
    for name in across:
        assert hsdp[name].bytes_per_gpu_per_step == pytest.approx(1 / 2 * params / 8 * 2)
        assert hsdp[name].link == "network"
    no_shard = _dp(_job(use_megatron_fsdp=True, num_distributed_optimizer_instances=2))
    assert no_shard["all-reduce (grads) across the groups"].bytes_per_gpu_per_step == pytest.approx(
        2 * 1 / 2 * params / 8 * 2
    )


def test_distributed_optimizer_instances_all_reduce_their_shards_across_groups():
    dp = _dp(_job(num_distributed_optimizer_instances=4))
    params = dp["reduce-scatter (grads)"].bytes_per_gpu_per_step / (3 / 4) / 2
    assert dp["all-gather (params)"].bytes_per_gpu_per_step == pytest.approx(3 / 4 * params * 2)
    across = dp["all-reduce (grads) across the groups"]
    assert across.bytes_per_gpu_per_step == pytest.approx(2 * 3 / 4 * params / 4 * 2)
    assert across.hidden_by == "overlap_grad_reduce"


def test_per_micro_batch_gathers_slow_a_step_whose_compute_cannot_hide_them():
    # Eight GPUs over the network (one per node) with a tiny micro-batch: the gathers of every
    # micro-batch outlast its compute, where the distributed optimizer's once-per-step gather
    # hides under the backward.
    small = dict(gpu="h100", micro_batch_size=1, global_batch_size=256, nvlink_domain=1)
    dist_opt = estimate_step(
        plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False), _job(**small))
    )
    fsdp = estimate_step(
        plan_comm_overlap(
            CommOverlapConfig(tp_comm_overlap=False), _job(use_megatron_fsdp=True, **small)
        )
    )
    assert fsdp.prediction.step_seconds > dist_opt.prediction.step_seconds
    assert fsdp.prediction.exposed_seconds > dist_opt.prediction.exposed_seconds
    assert any(
        a.startswith("Megatron-FSDP shards with optim_grads_params") for a in fsdp.assumptions
    )


def _memory(job: JobDescription, part: str) -> int:
    return memory_of_job(job).part(part)


def test_hsdp_memory_shards_within_a_group_and_the_optimizer_over_groups_with_optim():
    fsdp = _job(use_megatron_fsdp=True)
    hsdp = dataclasses.replace(fsdp, num_distributed_optimizer_instances=4)
    optim = dataclasses.replace(hsdp, outer_dp_sharding_strategy="optim")
    for part in ("parameters", "gradients"):
        assert _memory(hsdp, part) == pytest.approx(4 * _memory(fsdp, part), rel=1e-6)
        assert _memory(optim, part) == _memory(hsdp, part)
    for part in ("master weights", "optimizer state"):
        assert _memory(hsdp, part) == pytest.approx(4 * _memory(fsdp, part), rel=1e-6)
        assert _memory(optim, part) == pytest.approx(_memory(fsdp, part), rel=1e-6)
    # The distributed optimizer alone shards its state within one instance.
    plain = _job()
    grouped = dataclasses.replace(plain, num_distributed_optimizer_instances=4)
    assert _memory(grouped, "optimizer state") == pytest.approx(
        4 * _memory(plain, "optimizer state"), rel=1e-6
    )


def test_instances_that_do_not_divide_the_data_parallel_ranks_are_refused(capsys):
    args = ["explain", "--recipe", "llama3_8b", "--gpu", "h100", "--world-size", "8"]
    assert main([*args, "--num-distributed-optimizer-instances", "3"]) == EXIT_INVALID
    err = capsys.readouterr().err
    assert "num_distributed_optimizer_instances=3 does not divide the 8" in err
    assert main([*args, "--num-distributed-optimizer-instances", "2", "--json"]) == EXIT_OK
