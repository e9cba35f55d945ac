"""The variables a user sets in ``cfg.env_vars`` are theirs (``env_vars.with_user_env``).

Through the real ``PerfEnvPlugin`` on a real NeMo-Run ``LocalExecutor``, and through
``bridge-overlap explain --json``: a user's value is exported and shown as written (source
``user``), a tuned value other than the plan's carries a note, an unknown variable passes
through, and a value that breaks what the layout requires is refused before launch.
"""

from __future__ import annotations

import json
import logging
import textwrap

import jsonschema
import nemo_run as run
import pytest

from megatron.bridge import schema
from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, main
from megatron.bridge.models import GPTModelProvider
from megatron.bridge.recipes import get_recipe
from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from tests.unit_tests.conftest import bf16_container

LOGGER = "megatron.bridge.recipes.run_plugins"


def _script():
    return run.Script(path="/opt/megatron/pretrain.py", entrypoint="python")


def _container(env_vars, comm_overlap=None, **model_fields):
    """A real ConfigContainer of a small GPT (bf16, distributed optimizer) with ``env_vars``."""
    model = GPTModelProvider(
        num_layers=4, hidden_size=64, num_attention_heads=4, seq_length=128, vocab_size=1000
    )
    cfg = bf16_container(model, comm_overlap=comm_overlap, **model_fields)
    cfg.env_vars = dict(env_vars)
    return cfg


#: TP2 with sequence parallelism on 8 GPUs (Hopper without a GPU name): the plan sets
#: CUDA_DEVICE_MAX_CONNECTIONS=1 and LayerNorm margins of 20.
TP2 = {"tensor_model_parallel_size": 2, "sequence_parallel": True}

#: Two experts per EP rank over EP2, alltoall dispatcher, EP all-to-all overlap requested.
A2A = {
    "num_moe_experts": 4,
    "expert_model_parallel_size": 2,
    "expert_tensor_parallel_size": 1,
    "add_bias_linear": False,
    "moe_token_dispatcher_type": "alltoall",
    **TP2,
}


def _entries(plan):
    return {e.name: e for e in plan.entries}


# --------------------------------------------------------------------------- PerfEnvPlugin


def test_plugin_exports_the_users_values_as_written():
    cfg = _container(
        {"NVTE_FWD_LAYERNORM_SM_MARGIN": 0, "CUDA_DEVICE_MAX_CONNECTIONS": 8, "NCCL_DEBUG": "WARN"},
        **TP2,
    )
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=8)
    executor = run.LocalExecutor()
    plugin.setup(_script(), executor)
    assert executor.env_vars["NVTE_FWD_LAYERNORM_SM_MARGIN"] == "0"
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert executor.env_vars["NCCL_DEBUG"] == "WARN"  # unknown to the plan: passed through
    assert executor.env_vars["NVTE_BWD_LAYERNORM_SM_MARGIN"] == "20"  # the plan's, not set
    entries = _entries(plugin.launch_env_plan())
    assert {n for n, e in entries.items() if e.source == "user"} == {
        "NVTE_FWD_LAYERNORM_SM_MARGIN",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "NCCL_DEBUG",
    }
    # A tuned value other than the plan's is kept, and the note says what the plan would set.
    assert "the plan would set 1" in entries["CUDA_DEVICE_MAX_CONNECTIONS"].note
    assert "the plan would set 20" in entries["NVTE_FWD_LAYERNORM_SM_MARGIN"].note
    assert entries["NCCL_DEBUG"].note is None
    assert entries["NVTE_BWD_LAYERNORM_SM_MARGIN"].source == "derived"
    assert cfg.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == 8  # the container is as written


def test_a_recipes_derived_values_stay_the_plans_and_a_changed_one_is_the_users():
    cfg = get_recipe("gpt3_175b")
    cfg.env_vars["NVTE_FWD_LAYERNORM_SM_MARGIN"] = 16
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=1024, gpu="h100")
    assert plugin.user_env_vars == {"NVTE_FWD_LAYERNORM_SM_MARGIN": "16"}
    executor = run.LocalExecutor()
    plugin.setup(_script(), executor)
    assert executor.env_vars["NVTE_FWD_LAYERNORM_SM_MARGIN"] == "16"
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"  # derived: Hopper, TP4
    sources = {e.name: e.source for e in plugin.launch_env_plan().entries}
    assert sources["CUDA_DEVICE_MAX_CONNECTIONS"] == "derived"
    assert sources["NVTE_FWD_LAYERNORM_SM_MARGIN"] == "user"


@pytest.mark.parametrize(
    ("build", "env_vars", "match"),
    [
        # One CUDA queue runs the all-to-all stream after the compute stream: no overlap.
        (
            lambda env: _container(
                env,
                CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True),
                **A2A,
            ),
            {"CUDA_DEVICE_MAX_CONNECTIONS": 1},
            r"cfg.env_vars\['CUDA_DEVICE_MAX_CONNECTIONS'\]='1' breaks what this job needs: EP "
            r"all-to-all overlap is on.*Set cfg.env_vars\['CUDA_DEVICE_MAX_CONNECTIONS'\] = '32'",
        ),
        # Megatron-FSDP's collectives need their own queues (upstream asserts > 1 or unset).
        (
            lambda env: _fsdp(_container(env, **TP2)),
            {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
            r"cfg.env_vars\['CUDA_DEVICE_MAX_CONNECTIONS'\]='1' breaks.*Megatron-FSDP is on",
        ),
        # HybridEPBuffer asserts that the ranks per NVLink domain divide the EP size.
        (
            lambda env: _container(
                env,
                **{**A2A, "moe_token_dispatcher_type": "flex"},
                moe_flex_dispatcher_backend="hybridep",
            ),
            {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 3},
            r"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN'\]='3' breaks.*does not divide EP=2.*"
            r"Remove it from cfg.env_vars",
        ),
    ],
    ids=["ep-overlap-one-queue", "fsdp-one-queue", "hybridep-ranks"],
)
def test_plugin_refuses_a_users_value_that_breaks_a_requirement(build, env_vars, match):
    cfg = build(env_vars)
    with pytest.raises(ValueError, match=match):
        PerfEnvPlugin.from_config(cfg, num_gpus=8)


def _fsdp(cfg):
    cfg.ddp.use_megatron_fsdp = True
    return cfg


def test_executor_value_wins_over_cfg_env_vars_with_a_warning(caplog):
    cfg = _container({"NVTE_FWD_LAYERNORM_SM_MARGIN": 0}, **TP2)
    executor = run.LocalExecutor(env_vars={"NVTE_FWD_LAYERNORM_SM_MARGIN": "8"})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        PerfEnvPlugin.from_config(cfg, num_gpus=8).setup(_script(), executor)
    assert executor.env_vars["NVTE_FWD_LAYERNORM_SM_MARGIN"] == "8"
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "LocalExecutor.env_vars sets NVTE_FWD_LAYERNORM_SM_MARGIN=8" in warning
    assert "cfg.env_vars sets 0" in warning and "Remove one of them" in warning


def test_from_config_reads_user_env_vars_from_the_container_only():
    cfg = _container({}, **TP2)
    with pytest.raises(TypeError, match=r"reads user_env_vars from cfg.env_vars.*Choose one"):
        PerfEnvPlugin.from_config(cfg, num_gpus=8, user_env_vars={"NCCL_DEBUG": "INFO"})


# --------------------------------------------------------------------------- explain


def _explain_json(capsys, *argv):
    code = main(["explain", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_explain_json_shows_the_users_variables_beside_the_derived_ones(capsys):
    code, doc = _explain_json(
        capsys,
        "--recipe",
        "gpt3_175b",
        "env_vars.NVTE_FWD_LAYERNORM_SM_MARGIN=0",
        "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=8",
        "env_vars.NCCL_DEBUG=WARN",
    )
    assert code == EXIT_OK, doc
    jsonschema.Draft202012Validator(schema.explain_schema()).validate(doc)
    env = {e["name"]: e for e in doc["launch_env"]}
    assert (
        env["NVTE_FWD_LAYERNORM_SM_MARGIN"]["value"],
        env["CUDA_DEVICE_MAX_CONNECTIONS"]["value"],
    ) == ("0", "8")
    assert env["NVTE_FWD_LAYERNORM_SM_MARGIN"]["source"] == "user"
    assert "the plan would set 20" in env["NVTE_FWD_LAYERNORM_SM_MARGIN"]["note"]
    assert "the plan would set 1" in env["CUDA_DEVICE_MAX_CONNECTIONS"]["note"]
    assert env["NCCL_DEBUG"] == {
        "name": "NCCL_DEBUG",
        "value": "WARN",
        "reason": env["NCCL_DEBUG"]["reason"],
        "source": "user",
        "note": None,
    }
    assert "passed through unchanged" in env["NCCL_DEBUG"]["reason"]
    assert env["NVTE_BWD_LAYERNORM_SM_MARGIN"]["source"] == "derived"
    assert env["NVTE_BWD_LAYERNORM_SM_MARGIN"]["value"] == "20"

    assert main(["explain", "--recipe", "gpt3_175b", "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=8"]) == 0
    text = capsys.readouterr().out
    assert "CUDA_DEVICE_MAX_CONNECTIONS=8  # user: set in cfg.env_vars" in text
    assert "NOTE: the plan would set 1" in text


def test_explain_refuses_a_users_value_that_breaks_a_requirement(capsys):
    code, doc = _explain_json(
        capsys,
        "--recipe",
        "qwen3_30b_a3b",
        "comm_overlap.overlap_moe_expert_parallel_comm=true",
        "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1",
    )
    assert code == EXIT_INVALID
    assert (
        "cfg.env_vars['CUDA_DEVICE_MAX_CONNECTIONS']='1' breaks what this job needs: EP "
        "all-to-all overlap is on"
    ) in doc["error"]
    assert "Set cfg.env_vars['CUDA_DEVICE_MAX_CONNECTIONS'] = '32'" in doc["error"]


CONTAINER_RECIPE = textwrap.dedent(
    """
    from megatron.bridge.recipes.spec import spec_of
    from megatron.bridge.training.job import ModelDescription

    SPEC = spec_of(
        "tiny_env_gpt",
        provider="megatron.bridge.recipes.gpt3_175b:gpt3_provider",
        model=ModelDescription(
            num_layers=8,
            hidden_size=1024,
            num_attention_heads=16,
            ffn_hidden_size=4096,
            vocab_size=32000,
            seq_length=2048,
            tensor_model_parallel_size=2,
        ),
        world_size=16,
        gpu="h100",
        global_batch_size=32,
    )


    def tiny_container():
        cfg = SPEC.build()
        cfg.env_vars["NVTE_FWD_LAYERNORM_SM_MARGIN"] = 0
        cfg.env_vars["TORCHINDUCTOR_WORKER_START"] = "fork"
        return cfg
    """
)


def test_explain_json_shows_a_container_recipes_own_variables(importable_module, capsys):
    module = importable_module("env_recipes", CONTAINER_RECIPE)
    code, doc = _explain_json(
        capsys, "--recipe", f"{module}:tiny_container", "--world-size", "16", "--te", "assume"
    )
    assert code == EXIT_OK, doc
    env = {e["name"]: e for e in doc["launch_env"]}
    assert (
        env["NVTE_FWD_LAYERNORM_SM_MARGIN"]["value"],
        env["NVTE_FWD_LAYERNORM_SM_MARGIN"]["source"],
    ) == ("0", "user")
    assert env["TORCHINDUCTOR_WORKER_START"]["source"] == "user"
    # What the recipe derived stays the plan's.
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"]["source"] == "derived"
    assert env["NVTE_BWD_LAYERNORM_SM_MARGIN"]["value"] == "20"
