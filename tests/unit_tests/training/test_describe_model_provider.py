"""describe_model (megatron/bridge/training/job_configs.py) on a GPT provider, which declares
every field the description reads: equal readings share one description, and the value each
field holds now, with its type, is what the description holds."""

from __future__ import annotations

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.training.job_configs import describe_model


def _provider() -> GPTModelProvider:
    return GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=128)


def test_equal_providers_share_a_description_and_a_change_is_seen():
    first, second = _provider(), _provider()
    assert describe_model(first) is describe_model(second)
    second.num_layers = 4
    second.seq_length = 256
    assert (describe_model(second).num_layers, describe_model(second).seq_length) == (4, 256)
    assert (describe_model(first).num_layers, describe_model(first).seq_length) == (2, 128)


def test_equal_values_of_other_types_are_told_apart():
    # True == 1 == 1.0 and they hash alike: the description keeps the type the config holds.
    provider = _provider()
    seen = []
    for value in (2, 2.0, True, 1):
        provider.tensor_model_parallel_size = value
        held = describe_model(provider).tensor_model_parallel_size
        seen.append((held, type(held)))
    assert seen == [(2, int), (2.0, float), (True, bool), (1, int)]


def test_flags_are_read_for_truth_and_a_zero_count_as_unset():
    provider = _provider()
    provider.sequence_parallel = 1  # megatron-core reads it for truth
    provider.mtp_num_layers = 0  # no MTP layers: the same job as None
    # Below its bound (LIMITS): held as given, so check_limits refuses it (megatron-core would
    # divide by it).
    provider.num_query_groups = 0
    described = describe_model(provider)
    assert described.sequence_parallel is True
    assert described.mtp_num_layers is None
    assert described.num_query_groups == 0


def test_a_list_a_function_and_the_layout_are_read_as_they_stand():
    provider = _provider()
    provider.recompute_modules = ["core_attn", "mlp"]
    provider.pipeline_model_parallel_layout = [["embedding", "decoder"], ["decoder", "loss"]]
    described = describe_model(provider)
    assert described.recompute_modules == ("core_attn", "mlp")
    assert described.activation_func == provider.activation_func.__name__
    assert described.pipeline_model_parallel_layout == (
        ("embedding", "decoder"),
        ("decoder", "loss"),
    )
    provider.recompute_modules = ["mlp"]
    assert describe_model(provider).recompute_modules == ("mlp",)
