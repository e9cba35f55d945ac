"""One record of the library's writes: finalize's derivations and the plan's, side by side."""

from __future__ import annotations

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training import write_record
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.comm_overlap.megatron_io import undo_plan
from tests.unit_tests.conftest import make_configs


def test_each_writer_undoes_only_its_own_writes():
    cfgs = make_configs()
    model = GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=128)
    assert model.ffn_hidden_size is None
    CommOverlapConfig(tp_comm_overlap=False).setup(
        model, cfgs.optimizer, cfgs.ddp, data_parallel_size=8
    )
    model.finalize()  # megatron-core derives ffn_hidden_size = 4 x hidden
    assert model.ffn_hidden_size == 4 * model.hidden_size
    assert "ffn_hidden_size" in write_record.records(model, "finalize")
    assert "overlap_p2p_comm" in write_record.records(model, "plan")

    model.clear_derived()
    assert model.ffn_hidden_size is None  # finalize's write undone
    assert write_record.records(model, "finalize") == {}
    assert "overlap_p2p_comm" in write_record.records(model, "plan")  # the plan's kept

    assert "cfg.model.overlap_p2p_comm" in undo_plan(model, cfgs.optimizer, cfgs.ddp)
    assert write_record.records(model, "plan") == {}


def test_record_and_forget_keep_other_writers():
    class Config:
        pass

    config = Config()
    write_record.record(config, "plan", {"a": (1, write_record.NOTHING)})
    write_record.record(config, "finalize", {"b": (2, None)})
    write_record.record(config, "plan", {"c": (3, False)})
    assert dict(write_record.records(config, "plan")) == {
        "a": (1, write_record.NOTHING),
        "c": (3, False),
    }
    write_record.forget(config, "plan")
    assert write_record.records(config, "plan") == {}
    assert dict(write_record.records(config, "finalize")) == {"b": (2, None)}
