"""The one job description: megatron-core's names and defaults, one conversion each way."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.models.hybrid.hybrid_model import HybridModel
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.transformer_config import MLATransformerConfig

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.recipes import get_recipe, recipe_spec
from megatron.bridge.recipes.spec import PRECISIONS
from megatron.bridge.training.comm_overlap import (
    CommOverlapConfig,
    check_layout,
    describe_configs,
    plan_comm_overlap,
    te_status,
)
from megatron.bridge.training.hardware import GPUS
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.job_configs import describe_model, write_model
from megatron.bridge.training.mixed_precision import get_mixed_precision_config
from megatron.bridge.training.resolve import resolve_config
from tests.unit_tests.conftest import (
    BUILDABLE_RECIPES,
    REFUSED_PRECISIONS,
    layout_fields,
    tiny_model,
)


def _default(field: dataclasses.Field):
    """A dataclass field's default, a ``default_factory``'s value included."""
    if field.default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


# Where megatron-core names each model field: the GPT provider (a TransformerConfig), MLA's
# config for the multi-latent attention dimensions, the HybridModel for the layer pattern.
_PROVIDER_DEFAULTS = {
    **{f.name: _default(f) for f in dataclasses.fields(MLATransformerConfig)},
    **{f.name: _default(f) for f in dataclasses.fields(GPTModelProvider)},
    "hybrid_layer_pattern": inspect.signature(HybridModel)
    .parameters["hybrid_layer_pattern"]
    .default,
}


@pytest.mark.parametrize("field", dataclasses.fields(ModelDescription), ids=lambda f: f.name)
def test_every_model_field_is_megatron_cores_with_its_default(field):
    assert field.name in _PROVIDER_DEFAULTS, f"{field.name} is not a megatron-core model field"
    theirs = _PROVIDER_DEFAULTS[field.name]
    if field.name == "cuda_graph_modules":
        assert theirs == "full" and field.default == ()  # "full" names no module
    elif isinstance(theirs, list):
        assert field.default == tuple(theirs)  # the description holds lists as tuples
    elif field.name == "activation_func":
        assert theirs.__name__ == field.default  # the callable, by its name
    elif field.default is None and theirs == 0:
        pass  # megatron-core's "unset" count; the description says None (unknown)
    elif field.name in ("seq_length", "vocab_size"):
        assert field.default is None  # the provider's placeholders; a job states its own
    else:
        assert field.default == theirs


def test_describe_then_write_round_trips_a_provider():
    model = tiny_model(
        num_query_groups=2,
        tensor_model_parallel_size=2,
        sequence_parallel=True,
        num_moe_experts=4,
        moe_token_dispatcher_type="alltoall",
        recompute_granularity="selective",
        recompute_modules=("core_attn", "mlp"),
        cuda_graph_impl="transformer_engine",
        cuda_graph_modules=("attn",),
        bf16=True,
        fp8="hybrid",
    )
    provider = GPTModelProvider()
    write_model(provider, model)
    assert describe_model(provider) == model
    assert provider.recompute_modules == ["core_attn", "mlp"]


@pytest.mark.parametrize("name", BUILDABLE_RECIPES)
@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_a_built_recipe_describes_back_to_its_spec(name, precision):
    # One description, two routes: the torch-free spec and the resolved megatron-core configs.
    # The recipes publish H100 runs; a precision H100 cannot train in runs on B200.
    gpu = "h100" if GPUS["h100"].precision_refusal(precision) is None else "b200"
    spec = recipe_spec(name, precision=precision, gpu=gpu)
    cfg = get_recipe(name, precision=precision, gpu=gpu)
    if (name, precision) in REFUSED_PRECISIONS:
        refusal = REFUSED_PRECISIONS[name, precision]
        with pytest.raises(ValueError, match=refusal):
            spec.plan()
        with pytest.raises(ValueError, match=refusal):
            resolve_config(cfg, world_size=spec.num_gpus, te=te_status("assume"))
        return
    # MoE in FP8 too: megatron-core's own check (Transformer Engine >= 1.7) reads the assumed
    # TE version, not this machine's.
    resolved = resolve_config(cfg, world_size=spec.num_gpus, te=te_status("assume"))
    assert resolved.job == spec.job_on()
    assert resolved.plan.to_dict() == spec.plan().to_dict()


@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_precision_fields_are_what_the_mixed_precision_preset_writes(precision):
    setting = PRECISIONS[precision]
    provider = GPTModelProvider()
    mixed = get_mixed_precision_config(setting.mixed_precision)
    mixed.setup(provider, OptimizerConfig(), ddp := DistributedDataParallelConfig())
    model = describe_model(provider)
    assert {k: getattr(model, k) for k in setting.model} == dict(setting.model)
    assert ddp.grad_reduce_in_fp32 is setting.grad_reduce_in_fp32


def test_layout_properties_derive_from_the_fields():
    job = JobDescription(
        model=ModelDescription(
            **layout_fields(tp_size=2, pp_size=4, vpp_size=1, cp_size=2, ep_size=4),
            num_moe_experts=8,
        ),
        world_size=64,
    )
    assert (job.dp_size, job.vpp_size, job.interleaved, job.etp_size) == (4, None, False, 2)
    assert job.expert_data_parallel_size == 64 // (2 * 4 * 4)
    with pytest.raises(ValueError, match="num_gpus=60 is not divisible"):
        job.replace(world_size=60).dp_size  # noqa: B018


def test_replace_changes_model_fields_by_name():
    job = JobDescription(model=ModelDescription(), world_size=8)
    changed = job.replace(world_size=16, **{"model.num_layers": 4, "model.sequence_parallel": True})
    assert (changed.world_size, changed.model.num_layers, changed.sequence_parallel) == (
        16,
        4,
        True,
    )
    assert job.model.num_layers is None  # frozen: the original is untouched


def test_json_round_trip():
    job = JobDescription(
        model=ModelDescription(recompute_modules=("mlp",), cuda_graph_modules=("attn",)),
        world_size=8,
        direct_settings=(("ddp", "bucket_size", 10),),
    )
    assert JobDescription.from_dict(json.loads(json.dumps(job.to_dict()))) == job


def test_describe_configs_reads_the_batch_and_reduction_settings():
    provider = GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4)
    ddp = DistributedDataParallelConfig(grad_reduce_in_fp32=True)
    job = describe_configs(
        provider,
        OptimizerConfig(),
        ddp,
        world_size=8,
        micro_batch_size=2,
        global_batch_size=32,
        te_status=te_status("assume"),
    )
    assert (job.micro_batch_size, job.global_batch_size, job.grad_reduce_in_fp32) == (2, 32, True)
    assert job.model.num_layers == 2 and job.model.kv_channels is None


def test_a_custom_pipeline_layout_gives_the_interleaving_megatron_core_derives():
    # DeepSeek-V3 on PP4: 16 stages, so megatron-core runs 4 model chunks per rank.
    job = JobDescription(
        model=tiny_model(
            num_layers=61,
            mtp_num_layers=1,
            pipeline_model_parallel_size=4,
            pipeline_model_parallel_layout="Et*4|(t*4|)*14tmL",
        ),
        world_size=64,
    )
    assert (job.vpp_size, job.interleaved) == (4, True)
    check_layout(job)
    plan = plan_comm_overlap(CommOverlapConfig(tp_comm_overlap=False), job)
    assert plan.value("overlap_p2p_comm") is True
    assert "interleaved" in plan.decision("overlap_p2p_comm").reason
