"""Pipeline message volumes of the step estimate against megatron-core's own p2p tensor shapes.

``megatron.core.pipeline_parallel.schedules.get_tensor_shapes`` is what the schedules allocate
for every send and receive between stages. Its TP and CP groups are only asked for their size,
so stand-ins with ``size()`` take the place of process groups of that size, which a
single-process test cannot create.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from megatron.core.pipeline_parallel.schedules import get_tensor_shapes

from megatron.bridge.training.comm_overlap import CommOverlapConfig, plan_comm_overlap
from megatron.bridge.training.estimate import estimate_step
from tests.unit_tests.conftest import h100_job, tiny_model

DIMS = tiny_model(num_layers=8, bf16=True)


def _group(size: int) -> SimpleNamespace:
    return SimpleNamespace(size=lambda: size)


def _estimated(mode: str, *, tp: int, pp: int, cp: int, dp: int, sp: bool, mbs: int, gbs: int):
    """The step estimate's one communication entry of ``mode``, for a job of DIMS (overlap off)."""
    layout = {"tp_size": tp, "pp_size": pp, "cp_size": cp, "sequence_parallel": sp}
    job = h100_job(DIMS, dp_size=dp, micro_batch_size=mbs, global_batch_size=gbs, **layout)
    plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False), job)
    (entry,) = [c for c in estimate_step(plan).communication if c.mode == mode]
    return entry


def _p2p_tensor_elements(*, tp: int, cp: int, sp: bool, mbs: int) -> int:
    """Elements of the p2p tensor megatron-core allocates for a job of DIMS."""
    config = SimpleNamespace(
        variable_seq_lengths=False, sequence_parallel=sp, hidden_size=DIMS.hidden_size
    )
    (shape,) = get_tensor_shapes(
        seq_length=DIMS.seq_length,
        micro_batch_size=mbs,
        decoder_seq_length=None,
        config=config,
        tp_group=_group(tp),
        cp_group=_group(cp),
    )
    return math.prod(shape)


@pytest.mark.parametrize("sp", [True, False])
@pytest.mark.parametrize("cp", [1, 2])
@pytest.mark.parametrize("mbs", [1, 2])
def test_pp_message_is_megatron_cores_p2p_tensor(sp, cp, mbs):
    tp, pp, dp, gbs = 4, 2, 2, 16
    pp_entry = _estimated("pp", tp=tp, pp=pp, cp=cp, dp=dp, sp=sp, mbs=mbs, gbs=gbs)
    elements = _p2p_tensor_elements(tp=tp, cp=cp, sp=sp, mbs=mbs)
    micro_batches = gbs // (mbs * dp)
    # Without interleaving, an edge stage (the busiest here) sends one message per micro-batch:
    # activations forward from the first stage, or gradients backward from the last.
    bf16_bytes = 2
    assert pp_entry.bytes_per_gpu_per_step == micro_batches * elements * bf16_bytes


@pytest.mark.parametrize("cp", [1, 2])
@pytest.mark.parametrize("tp", [2, 4])
def test_tp_collectives_move_megatron_cores_full_sequence_tensor(tp, cp):
    # With sequence parallelism every TP all-gather produces, and every reduce-scatter consumes,
    # the full-sequence activation: the p2p tensor megatron-core would use without SP. A ring
    # collective over TP ranks sends (TP-1)/TP of it from each GPU.
    pp, dp, mbs, gbs = 2, 2, 1, 8
    tp_entry = _estimated("tp", tp=tp, pp=pp, cp=cp, dp=dp, sp=True, mbs=mbs, gbs=gbs)
    full = _p2p_tensor_elements(tp=tp, cp=cp, sp=False, mbs=mbs)
    per_collective = (tp - 1) / tp * full * 2
    collectives = tp_entry.bytes_per_gpu_per_step / per_collective
    micro_batches = gbs // (mbs * dp)
    layers_per_stage = DIMS.num_layers // pp
    # Whole collectives only: 10 per layer (attention and MLP: gather and scatter forward;
    # scatter, gather and the wgrad re-gather backward) plus the edge stage's extra ones.
    assert collectives == round(collectives)
    per_micro_batch = collectives / micro_batches
    assert 10 * layers_per_stage <= per_micro_batch <= 10 * layers_per_stage + 3
