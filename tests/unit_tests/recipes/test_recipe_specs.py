"""Torch-free recipe specs (megatron/bridge/recipes/spec.py) and recipes of your own.

The two routes from a recipe, its spec's plan (no torch) and the container resolved as at
model-build time, must reach the same job description and plan. Transformer Engine is assumed present
(``te="assume"``), as on the cluster: it cannot be installed on a CPU machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, main
from megatron.bridge.recipes import (
    RECIPES,
    available_recipes,
    get_recipe,
    plan_recipe,
    recipe_spec,
)
from megatron.bridge.recipes.spec import RecipeSpec
from megatron.bridge.training.resolve import resolve_config
from tests.unit_tests.conftest import BUILDABLE_RECIPES, REFUSED_PRECISIONS

# Refuses torch and megatron-core the way a launch node without them would: any import of
# either raises ModuleNotFoundError, what a package that is not installed raises.
BLOCKER = textwrap.dedent(
    """
    import sys
    class _Blocker:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith(("torch.", "megatron.core")):
                raise ModuleNotFoundError(f"{name} is not installed on this launch node")
            return None
    sys.meta_path.insert(0, _Blocker())
    """
)


def _without_torch(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("name", BUILDABLE_RECIPES)
@pytest.mark.parametrize(
    "overrides",
    [{}, {"gpu": "b200"}, {"precision": "fp8"}, {"vpp_size": None}, {"tp_comm_overlap": False}],
    ids=["published", "b200", "fp8", "no-vpp", "tp-overlap-off"],
)
def test_spec_and_container_reach_the_same_plan(name, overrides):
    # MoE recipes in FP8 too: megatron-core's own checks (MoE FP8 needs Transformer Engine >= 1.7)
    # read the assumed TE version, not this machine's.
    spec = recipe_spec(name, **overrides)
    if (name, spec.precision) in REFUSED_PRECISIONS:
        refusal = REFUSED_PRECISIONS[name, spec.precision]
        with pytest.raises(ValueError, match=refusal):
            spec.plan(te="assume")
        with pytest.raises(ValueError, match=refusal):
            resolve_config(get_recipe(name, **overrides), world_size=spec.num_gpus, te="assume")
        return
    torch_free = spec.plan(te="assume")
    built = resolve_config(get_recipe(name, **overrides), world_size=spec.num_gpus, te="assume")
    assert built.job == torch_free.job
    assert built.plan.to_dict() == torch_free.to_dict()


def test_explain_recipe_and_plugin_run_without_torch():
    result = _without_torch(
        """
        import json, sys
        from megatron.bridge.cli import main
        code = main(["explain", "--recipe", "llama31_405b", "--json"])
        from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
        plugin = PerfEnvPlugin.from_recipe("llama31_405b")
        print(json.dumps({"code": code, "env": plugin.launch_env_plan().env,
                          "dp": plugin.dp_size}), file=sys.stderr)
        """
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["recipe"] == "llama31_405b" and doc["layout"]["dp"] == 8
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report["code"] == EXIT_OK and report["dp"] == 8
    assert report["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_the_blocker_really_blocks():
    # Guards the test above: without the blocker working, it would prove nothing.
    result = _without_torch("import torch")
    assert result.returncode != 0 and "not installed on this launch node" in result.stderr


def test_plugin_from_recipe_matches_plugin_from_config():
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

    for name in BUILDABLE_RECIPES:
        spec = recipe_spec(name)
        if spec.job.model.moe and spec.job.precision != "bf16":
            # megatron-core finalizes an MoE model in FP8 only with Transformer Engine >= 1.7,
            # absent here (test_spec_and_container_reach_the_same_plan holds that refusal).
            spec = recipe_spec(name, precision="bf16")
        from_spec = PerfEnvPlugin.from_recipe(spec)
        from_cfg = PerfEnvPlugin.from_config(
            get_recipe(name, precision=spec.precision), num_gpus=spec.num_gpus
        )
        assert from_spec.launch_env_plan() == from_cfg.launch_env_plan()


def test_unknown_keyword_lists_the_recipe_keywords():
    with pytest.raises(TypeError, match=r"unexpected keyword\(s\) \['tp'\].*'tp_size'"):
        recipe_spec("gpt3_175b", tp=8)


# --------------------------------------------------------------------- recipes of your own

USER_MODULE = textwrap.dedent(
    """
    from typing import Any

    from megatron.bridge.recipes.spec import RecipeSpec, spec_of
    from megatron.bridge.training.job import ModelDescription

    SPEC = spec_of(
        "tiny_gpt",
        provider="megatron.bridge.recipes.gpt3_175b:gpt3_provider",
        model=ModelDescription(
            num_layers=8,
            hidden_size=1024,
            num_attention_heads=16,
            ffn_hidden_size=4096,
            vocab_size=32000,
            seq_length=2048,
            tensor_model_parallel_size=2,
            pipeline_model_parallel_size=2,
            virtual_pipeline_model_parallel_size=2,
        ),
        world_size=16,
        gpu="h100",
        global_batch_size=32,
    )


    def tiny_gpt(**overrides: Any) -> RecipeSpec:
        return SPEC.with_overrides(**overrides)


    def tiny_gpt_container(**overrides: Any):
        return SPEC.with_overrides(**overrides).build()
    """
)


@pytest.fixture
def user_recipes(importable_module, tmp_path):
    """An importable module of the user's, and a distribution registering one of its recipes."""
    importable_module("my_recipes", USER_MODULE)
    dist = tmp_path / "my_recipes-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-recipes\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[megatron_bridge.recipes]\ntiny_gpt = my_recipes:tiny_gpt\n"
    )
    return tmp_path


def test_module_function_recipe_is_explained_with_overrides(user_recipes, capsys):
    assert main(["explain", "--recipe", "my_recipes:tiny_gpt", "--json", "--gpu", "b200"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["layout"]["gpu"] == "b200" and doc["layout"]["dp"] == 4
    env = {e["name"]: e["value"] for e in doc["launch_env"]}
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"  # Blackwell, TP and DP both split
    assert main(["explain", "--recipe", "my_recipes:tiny_gpt", "--tp", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["tp"] == 4


def test_entry_point_recipe_is_listed_and_planned(user_recipes, capsys):
    assert available_recipes()["tiny_gpt"] == "my_recipes:tiny_gpt"
    assert main(["recipes", "--json"]) == EXIT_OK
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["recipes"]}
    assert set(RECIPES) < set(rows)
    assert rows["tiny_gpt"]["layout"]["tp"] == 2 and rows["tiny_gpt"]["layout"]["world_size"] == 16
    plan = plan_recipe("tiny_gpt", precision="fp8")
    assert plan.job.precision == "fp8" and plan.job.dp_size == 4


def test_container_recipe_needs_a_world_size_and_is_resolved(user_recipes, capsys):
    code = main(["explain", "--recipe", "my_recipes:tiny_gpt_container", "--json"])
    assert code == EXIT_INVALID
    assert "--world-size" in json.loads(capsys.readouterr().out)["error"]
    argv = ["explain", "--recipe", "my_recipes:tiny_gpt_container", "--world-size", "16"]
    assert main([*argv, "--te", "assume", "--json"]) == EXIT_OK
    from_container = json.loads(capsys.readouterr().out)
    assert main(["explain", "--recipe", "my_recipes:tiny_gpt", "--json"]) == EXIT_OK
    from_spec = json.loads(capsys.readouterr().out)
    assert from_container["overlap"] == from_spec["overlap"]


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ("llama2_70b", r"Did you mean 'llama3_70b'"),
        ("no_such_module:fn", r"cannot import 'no_such_module'"),
        ("megatron.bridge.recipes.spec:nope", r"has no function 'nope'"),
    ],
)
def test_bad_recipe_names_are_clear_errors(target, match, capsys):
    assert main(["explain", "--recipe", target]) == EXIT_INVALID
    assert pytest.importorskip("re").search(match, capsys.readouterr().err)


def test_spec_refuses_what_the_catalogue_refuses():
    with pytest.raises(
        ValueError, match=r"precision fp8_ds \(FP8 delayed scaling\) needs FP8 tensor cores"
    ):
        recipe_spec("gpt3_175b", gpu="a100", precision="fp8")
    assert isinstance(recipe_spec("gpt3_175b", gpu="a100"), RecipeSpec)


def test_planning_a_shipped_recipe_reads_no_package_metadata_without_a_registration():
    # importlib.metadata costs some 50 ms to import; it is read only when an installed
    # distribution's entry_points.txt names the recipe group (none does in this environment).
    code = (
        "import contextlib, io, sys\n"
        "from megatron.bridge.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['explain', '--recipe', 'llama3_70b'])\n"
        "print('importlib.metadata' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
