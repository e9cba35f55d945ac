"""Changing the GPU or the precision re-derives what depends on them, wherever it is changed.

A recipe's derived choices (the userbuffers preset it chose, the launch environment it wrote
into ``cfg.env_vars``) follow the job's GPU and precision; a choice the user made that no longer
fits after such a change is an error naming it, the change and the fix.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from megatron.bridge.cli.entry import main
from megatron.bridge.recipes import get_recipe, recipe_spec
from megatron.bridge.training.launch_env import CUDA_DEVICE_MAX_CONNECTIONS as CDMC
from megatron.bridge.training.resolve import resolve_config, runtime_config_update


def test_explain_with_a_gpu_override_checks_the_environment_derived_for_that_gpu(capsys):
    assert main(["explain", "--json", "--recipe", "gpt3_175b", "gpu=b200"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not [w for w in doc["warnings"] if CDMC in w]


@pytest.mark.parametrize(("gpu", "connections"), [("b200", "32"), ("h100", "1")])
def test_a_derived_variable_follows_a_gpu_set_after_the_build(gpu, connections):
    cfg = get_recipe("llama3_70b", gpu="b200" if gpu == "h100" else "h100")
    cfg.gpu = gpu
    resolved = resolve_config(cfg, world_size=64, te="assume")
    assert resolved.env_vars[CDMC] == connections
    assert cfg.env_vars[CDMC] != connections  # resolving alone writes nothing


def test_a_value_the_user_set_is_kept_across_a_gpu_change_that_it_does_not_break():
    cfg = get_recipe("llama3_70b")  # H100: the recipe derives 1
    cfg.env_vars[CDMC] = 8  # the user's own value
    assert resolve_config(cfg, world_size=64, te="assume").env_vars[CDMC] == 8
    cfg.gpu = "b200"
    # B200's tuned value is 32, but no overlap of this dense layout requires it: the user's 8 is
    # a tuned value of theirs and stays (launch_env.check_live_environment holds the rules).
    assert resolve_config(cfg, world_size=64, te="assume").env_vars[CDMC] == 8


def test_a_precision_change_moves_the_derivation_with_it():
    cfg = get_recipe("llama3_70b")
    cfg.mixed_precision = "bf16_with_fp8_delayed_scaling_mixed"
    runtime_config_update(cfg, world_size=64, te="assume")
    assert cfg._derived_env.precision == "fp8"
    assert cfg.env_vars[CDMC] == "1"


def test_the_plugin_for_another_gpu_than_the_configs_says_so(caplog):
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

    cfg = get_recipe("llama3_70b", gpu="b200")
    with caplog.at_level(logging.WARNING, logger="megatron.bridge.recipes.run_plugins"):
        plugin = PerfEnvPlugin.from_config(cfg, num_gpus=64, gpu="h100")
    assert plugin.launch_env_plan().env[CDMC] == "1"
    said = [r.getMessage() for r in caplog.records if "cfg.gpu is 'b200'" in r.getMessage()]
    assert len(said) == 1 and f"{CDMC} 32 -> 1" in said[0] and "cfg.gpu = 'h100'" in said[0]


def test_a_second_job_in_one_session_replaces_the_first_jobs_export(caplog):
    os.environ.pop(CDMC, None)
    runtime_config_update(get_recipe("llama3_70b"), world_size=64, te="assume")
    assert os.environ[CDMC] == "1"
    with caplog.at_level(logging.WARNING, logger="megatron.bridge.training.resolve"):
        runtime_config_update(get_recipe("llama3_70b", gpu="b200"), world_size=64, te="assume")
    assert os.environ[CDMC] == "32"
    assert not [r for r in caplog.records if CDMC in r.getMessage()]


def test_a_launcher_value_still_wins_over_a_second_job():
    os.environ[CDMC] = "1"  # the launcher's, not this process's export
    cfg = get_recipe("llama3_70b", gpu="b200")
    runtime_config_update(cfg, world_size=64, te="assume")
    assert os.environ[CDMC] == "1"
    assert cfg.applied_env_vars.kept_from_environment == {CDMC: "1"}


def test_a_named_preset_that_no_longer_fits_a_changed_gpu_is_an_error():
    name = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    spec = recipe_spec("llama3_70b").changed(preset=name)
    with pytest.raises(ValueError, match=rf"{name}.*h100 bf16.*b200 bf16.*preset='auto'"):
        spec.changed(gpu="b200")
    # Named together with the GPU it is the user's knowing choice: planned, with a warning.
    plan = recipe_spec("llama3_70b").changed(preset=name, gpu="b200").plan()
    assert any("precision or GPU differs" in w for w in plan.warnings)


def test_a_named_preset_on_a_container_is_refused_after_a_precision_change():
    from megatron.bridge.training.userbuffers import PUBLISHED_PRESETS

    name = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    cfg = get_recipe("llama3_70b")
    cfg.comm_overlap.tp_comm_overlap_cfg = PUBLISHED_PRESETS[name]
    cfg.comm_overlap.preset_chosen_by = None
    cfg.mixed_precision = "bf16_with_fp8_delayed_scaling_mixed"
    with pytest.raises(ValueError, match=rf"you named \({name}.*fp8 on h100.*'auto'"):
        resolve_config(cfg, world_size=64, te="assume")
