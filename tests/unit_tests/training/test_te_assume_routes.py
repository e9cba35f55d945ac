"""One ``te="assume"`` on every route: each MoE recipe, with an override, plans as on its cluster.

megatron-core's own config validation reads the Transformer Engine version
(``megatron.core.utils.is_te_min_version``: MoE in FP8 needs TE >= 1.7), and this machine has
no TE (megatron-core reads 0.0.0). A plan made with ``te="assume"`` is validated against the
assumed version on every route that builds a container: KEY=VALUE overrides (the CLI), a YAML
round trip, a recipe's keywords, ``runtime_config_update``. The check builds real models, so it
validates against what is installed and says what it changed for this machine. Nothing is
patched: megatron-core's cache of the TE version is read before and after to show it is put
back.
"""

from __future__ import annotations

import argparse
import json

import pytest
from megatron.core import utils as mcore_utils

from megatron.bridge.check import build_check_config
from megatron.bridge.check import build_parser as check_parser
from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.recipes import get_recipe, plan_recipe, recipe_spec
from megatron.bridge.training.comm_overlap import te_status
from megatron.bridge.training.comm_overlap.knobs import KNOBS
from megatron.bridge.training.comm_overlap.te import ASSUMED_TE_VERSION, megatron_core_sees
from megatron.bridge.training.config import ConfigContainer, runtime_config_update
from megatron.bridge.training.overrides import apply_overrides
from megatron.bridge.training.precisions import PRECISIONS
from megatron.bridge.training.resolve import resolve_config
from tests.unit_tests.conftest import BUILDABLE_RECIPES

MOE_RECIPES = [name for name in BUILDABLE_RECIPES if recipe_spec(name).job.model.moe]


@pytest.fixture(autouse=True)
def te_cache_put_back():
    """megatron-core's TE version cache is the same after the test as before it."""
    before = mcore_utils.get_te_version()
    yield
    assert mcore_utils.get_te_version() == before


def _override(name: str) -> tuple[int, int]:
    """(world size, a global batch size twice the recipe's: still divisible by its DP)."""
    spec = recipe_spec(name)
    return spec.num_gpus, 2 * spec.job.global_batch_size


def _knobs(plan) -> dict:
    return {knob: plan.value(knob) for knob in KNOBS}


def _assumed(plan, name: str, gbs: int) -> None:
    spec = recipe_spec(name)
    assert plan.job.te_available and plan.job.te_version == ASSUMED_TE_VERSION
    assert plan.job.global_batch_size == gbs
    # The recipe's precision (FP8 on most MoE recipes) is planned as it is, not lowered.
    assert plan.job.precision == spec.job.precision


def test_the_moe_recipes_are_found():
    # The routes below run over every shipped MoE recipe; FP8 ones among them are what
    # megatron-core refused with "your version is 0.0.0".
    assert {"qwen3_30b_a3b", "deepseek_v3"} <= set(MOE_RECIPES)
    assert any(PRECISIONS[recipe_spec(n).precision].preset_family == "fp8" for n in MOE_RECIPES)


def test_megatron_core_reads_the_assumed_version_only_inside_the_block():
    installed = mcore_utils.get_te_version()
    with megatron_core_sees(te_status("assume")):
        assert str(mcore_utils.get_te_version()) == ASSUMED_TE_VERSION
        assert mcore_utils.is_te_min_version("1.7.0")
    assert mcore_utils.get_te_version() == installed
    with pytest.raises(RuntimeError), megatron_core_sees(te_status("assume", version="2.7")):
        assert str(mcore_utils.get_te_version()) == "2.7"
        raise RuntimeError("the block failed")
    assert mcore_utils.get_te_version() == installed
    # Not available (what this machine detects): megatron-core reads what is installed.
    with megatron_core_sees(te_status("detect")):
        assert mcore_utils.get_te_version() == installed


@pytest.mark.parametrize("name", MOE_RECIPES)
def test_cli_override(name, capsys):
    world, gbs = _override(name)
    assert main(["explain", "--json", "--recipe", name, f"train.global_batch_size={gbs}"]) == (
        EXIT_OK
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["layout"]["precision"] == recipe_spec(name).job.precision
    assert doc["layout"]["world_size"] == world


@pytest.mark.parametrize("name", MOE_RECIPES)
def test_yaml_round_trip_then_override(name, tmp_path):
    world, gbs = _override(name)
    get_recipe(name).to_yaml(tmp_path / "config.yaml")
    cfg = apply_overrides(
        ConfigContainer.from_yaml(tmp_path / "config.yaml"), [f"train.global_batch_size={gbs}"]
    )
    plan = resolve_config(cfg, world_size=world, te="assume").plan
    _assumed(plan, name, gbs)
    assert _knobs(plan) == _knobs(recipe_spec(name).changed(global_batch_size=gbs).plan())


@pytest.mark.parametrize("name", MOE_RECIPES)
def test_recipe_keyword(name):
    world, gbs = _override(name)
    plan = resolve_config(get_recipe(name, global_batch_size=gbs), world_size=world, te="assume")
    _assumed(plan.plan, name, gbs)
    assert _knobs(plan.plan) == _knobs(plan_recipe(name, te="assume", global_batch_size=gbs))


@pytest.mark.parametrize("name", MOE_RECIPES)
def test_runtime_config_update(name):
    world, gbs = _override(name)
    cfg = get_recipe(name)
    cfg.train.global_batch_size = gbs
    plan = runtime_config_update(cfg, world_size=world, te="assume")
    _assumed(plan, name, gbs)
    assert cfg.overlap_plan is plan


def test_the_issue_example():
    # megatron-core refused this with "transformer-engine>=1.7.0 ... your version is 0.0.0".
    cfg = get_recipe("qwen3_30b_a3b")
    assert PRECISIONS[recipe_spec("qwen3_30b_a3b").precision].preset_family == "fp8"
    plan = runtime_config_update(cfg, world_size=8, te="assume")
    assert plan.job.te_version == ASSUMED_TE_VERSION and plan.job.precision == "fp8"


@pytest.mark.parametrize("name", MOE_RECIPES)
def test_the_check_config_resolves(name):
    # The check builds real models: on this CPU machine it validates against the TE installed
    # (none), so it plans the precision it can build and says so, instead of failing.
    args: argparse.Namespace = check_parser().parse_args(["--recipe", name, "--tiny"])
    cfg, layout, notes = build_check_config(args, world_size=8, on_cuda=False)
    plan = resolve_config(cfg, world_size=8).plan
    assert (plan.job.world_size, plan.job.tp_size, plan.job.ep_size) == (8, layout.tp, layout.ep)
    if PRECISIONS[recipe_spec(name).precision].preset_family == "fp8":
        assert plan.job.precision == "bf16"
        assert any("turned to bf16 on the CPU" in note for note in notes)


@pytest.mark.parametrize("name", MOE_RECIPES)
def test_the_launch_plugin_from_a_changed_container(name):
    # PerfEnvPlugin.from_config resolves the container with TE assumed where the job runs.
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

    world, gbs = _override(name)
    cfg = get_recipe(name)
    cfg.train.global_batch_size = gbs
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=world)
    assert (
        plugin.launch_env_plan().env
        == resolve_config(cfg, world_size=world, te="assume").launch_env().env
    )
