"""Recipes the installed megatron-core cannot build: planned and costed, building refused.

DeepSeek-V4 Flash's hybrid attention needs TransformerConfig fields megatron-core 0.19 does not
declare. ``explain`` plans it with exit 0 and a note saying so; the container (``build()``) and
the model-build-time resolution of a provider carrying the description refuse it, naming the
fields. Nemotron 3 Super and Ultra (hybrid Mamba with latent MoE) build and resolve on the CPU.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json

import pytest
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.models import GPTModelProvider
from megatron.bridge.recipes import RECIPES, get_recipe, recipe_spec
from megatron.bridge.training.comm_overlap import te_status
from megatron.bridge.training.job_configs import write_model
from megatron.bridge.training.megatron_core_support import (
    DSV4_HYBRID_FIELDS,
    cannot_build_reason,
    installed_config_fields,
)
from megatron.bridge.training.resolve import resolve_config
from tests.unit_tests.conftest import BUILDABLE_RECIPES

UNBUILDABLE = sorted(set(RECIPES) - set(BUILDABLE_RECIPES))
CORE_FIELDS = frozenset(f.name for f in dataclasses.fields(TransformerConfig))


def test_the_source_read_names_the_fields_the_imported_class_declares():
    # The torch-free reading (the plan's note) and the imported class (the model build) agree
    # on the fields TransformerConfig's own body declares (its base, ModelParallelConfig, holds
    # the parallel sizes).
    assert installed_config_fields() == set(TransformerConfig.__annotations__)


def test_deepseek_v4_flash_is_the_recipe_megatron_core_cannot_build():
    assert UNBUILDABLE == ["deepseek_v4_flash"]
    assert not set(DSV4_HYBRID_FIELDS) & CORE_FIELDS


@pytest.mark.parametrize("name", UNBUILDABLE)
def test_explain_plans_it_and_says_megatron_core_cannot_build_it(name, capsys):
    capsys.readouterr()
    assert main(["explain", "--recipe", name, "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    notes = [n for n in doc["overlap"]["notes"] if "cannot build" in n]
    assert len(notes) == 1
    assert all(field in notes[0] for field in DSV4_HYBRID_FIELDS)
    # The version, read from megatron-core's package_info.py, is the installed distribution's.
    installed = importlib.metadata.version("megatron-core")
    assert notes[0].startswith(f"megatron-core {installed} (installed) cannot build")
    assert doc["estimate"]["prediction"]["tokens_per_s_per_gpu"] > 0
    assert main(["explain", "--recipe", name]) == EXIT_OK
    assert "cannot build experimental_attention_variant='dsv4_hybrid'" in capsys.readouterr().out


@pytest.mark.parametrize("name", UNBUILDABLE)
def test_building_it_is_refused_naming_the_missing_fields(name):
    with pytest.raises(ValueError, match=r"megatron-core .* cannot build .*o_lora_rank, o_groups"):
        get_recipe(name)


@pytest.mark.parametrize("name", UNBUILDABLE)
def test_resolving_a_provider_with_its_description_is_refused(name):
    provider = GPTModelProvider()
    write_model(provider, recipe_spec(name).job.model)
    with pytest.raises(ValueError, match="csa_compress_ratios, csa_window_size"):
        provider.finalize()


def test_a_megatron_core_that_declares_the_fields_could_build_it():
    model = recipe_spec("deepseek_v4_flash").job.model
    assert cannot_build_reason(model, CORE_FIELDS | set(DSV4_HYBRID_FIELDS)) is None
    reason = cannot_build_reason(model, CORE_FIELDS | {"o_lora_rank", "o_groups"})
    assert reason is not None and "o_lora_rank" not in reason and "csa_window_size" in reason


@pytest.mark.parametrize(
    ("name", "gpu", "tp", "fsdp"),
    [
        ("nemotron_3_super", "gb300", 1, False),
        ("nemotron_3_super", "gb200", 2, False),
        ("nemotron_3_ultra", "gb300", 1, True),
        ("nemotron_3_ultra", "gb200", 2, True),
    ],
)
def test_nemotron_3_super_and_ultra_build_and_resolve_on_the_cpu(name, gpu, tp, fsdp):
    spec = recipe_spec(name, gpu=gpu)
    cfg = get_recipe(name, gpu=gpu)
    # MoE in FP8: megatron-core's own check reads the assumed Transformer Engine version.
    resolved = resolve_config(cfg, world_size=spec.num_gpus, te=te_status("assume"))
    assert resolved.job == spec.job_on()
    m = cfg.model
    assert (m.tensor_model_parallel_size, m.sequence_parallel) == (tp, tp > 1)
    assert m.expert_model_parallel_size == 64 and cfg.ddp.use_megatron_fsdp is fsdp
    assert m.moe_latent_size in (1024, 2048) and m.moe_router_topk_scaling_factor == 5.0
    assert m.moe_router_enable_expert_bias and m.mtp_use_repeated_layer and m.mtp_num_layers == 2
