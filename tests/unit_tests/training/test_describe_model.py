"""describe_model (megatron/bridge/training/job_configs.py) reads a megatron-core model config
as it stands on every call, though equal readings share one frozen description."""

from __future__ import annotations

from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.training.job_configs import _described_raw, describe_model


def _config() -> TransformerConfig:
    return TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4)


def test_equal_configs_share_a_description_and_a_change_is_seen():
    first, second = _config(), _config()
    assert describe_model(first) is describe_model(second)
    second.num_layers = 4
    assert describe_model(second).num_layers == 4
    assert describe_model(first).num_layers == 2


def test_a_bool_is_not_taken_for_an_equal_int():
    # True == 1 and hash(True) == hash(1): the description keeps what the config holds, so the
    # checks downstream still see the bool.
    config = _config()
    assert type(describe_model(config).tensor_model_parallel_size) is int
    config.tensor_model_parallel_size = True
    assert type(describe_model(config).tensor_model_parallel_size) is bool
    config.recompute_modules = [True]
    assert describe_model(config).recompute_modules == (True,)
    assert type(describe_model(config).recompute_modules[0]) is bool


def test_a_value_that_cannot_be_hashed_is_still_described():
    config = _config()
    config.moe_layer_freq = {"every": 1}  # not a form megatron-core takes; read as it stands
    assert describe_model(config).moe_layer_freq == {"every": 1}


def test_list_fields_are_read_through_the_keyed_cache():
    # megatron-core holds offload_modules and recompute_modules as lists: a reading with them is
    # keyed as tuples (element types included), so a second equal reading is a cache hit.
    config = _config()
    config.recompute_modules = ["core_attn", "mlp"]
    first = describe_model(config)
    hits = _described_raw.cache_info().hits
    assert describe_model(config) is first
    assert _described_raw.cache_info().hits == hits + 1
    assert first.recompute_modules == ("core_attn", "mlp")
    config.recompute_modules = ("core_attn", "mlp")  # the tuple form reads alike
    assert describe_model(config) is first
    config.recompute_modules = ["mlp"]
    assert describe_model(config).recompute_modules == ("mlp",)
