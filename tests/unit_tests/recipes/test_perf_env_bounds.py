"""``PerfEnvPlugin`` meets the bounds the CLI meets (``validators.LIMITS``, through the same
validators), refuses an EP size that does not tile the GPUs, and, like a recipe's
``env_vars``, refuses environment variable names that are not POSIX ``[A-Za-z_][A-Za-z0-9_]*``.
Real NeMo-Run executors and tasks; nothing is patched.
"""

from __future__ import annotations

import nemo_run as run
import pytest

from megatron.bridge.cli import EXIT_INVALID, main
from megatron.bridge.recipes import get_recipe
from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
from megatron.bridge.training.env_vars import check_env_vars
from megatron.bridge.training.overrides import OverrideError, apply_overrides
from megatron.bridge.training.validators import LIMITS, LimitError

#: (plugin field, its entry in LIMITS, the CLI flag with that bound).
PLUGIN_BOUNDS = [
    ("layernorm_sm_margin", "layernorm_sm_margin", "--layernorm-sm-margin"),
    ("nccl_pp_comm_chunksize", "nccl_pp_comm_chunksize", "--nccl-pp-chunksize"),
    ("num_gpus", "world_size", "--world-size"),
    ("tp_size", "model.tensor_model_parallel_size", "--tp"),
]

BAD_NAMES = ["BAD\nNAME", "é", "CAFÉ_MODE", "1ST", "A-B", "A B", ""]


def _script():
    return run.Script(path="/opt/megatron/pretrain.py", entrypoint="python")


@pytest.mark.parametrize(("field", "limit", "flag"), PLUGIN_BOUNDS)
def test_the_plugin_refuses_what_the_cli_refuses_and_takes_the_bound(field, limit, flag, capsys):
    maximum = LIMITS[limit].maximum
    too_big = 2**63
    with pytest.raises(LimitError, match=rf"PerfEnvPlugin\.{field}={too_big} is above its bound"):
        PerfEnvPlugin(**{field: too_big})
    assert main(["explain", flag, str(too_big)]) == EXIT_INVALID
    err = capsys.readouterr().err
    assert flag in err and f"bound {maximum}" in err
    # A model-parallel size at its bound needs as many GPUs.
    extra = {"num_gpus": maximum} if field == "tp_size" else {}
    assert getattr(PerfEnvPlugin(**{field: maximum}, **extra), field) == maximum


def test_the_layernorm_margin_of_a_million_sms_is_refused_with_the_fix():
    with pytest.raises(LimitError, match=r"layernorm_sm_margin=1000000 .*give at most 1024"):
        PerfEnvPlugin(layernorm_sm_margin=10**6)


@pytest.mark.parametrize(
    ("sizes", "expert_grid"),
    [
        ({"ep_size": 3, "num_gpus": 8}, "1 \\* 3 \\* 1 = 3"),
        ({"ep_size": 4, "etp_size": 4, "num_gpus": 8}, "4 \\* 4 \\* 1 = 16"),
        ({"ep_size": 2, "pp_size": 2, "etp_size": 4, "num_gpus": 8}, "4 \\* 2 \\* 2 = 16"),
    ],
)
def test_an_ep_size_that_does_not_tile_the_gpus_is_refused(sizes, expert_grid):
    with pytest.raises(ValueError, match=rf"ep_size={sizes['ep_size']}.*{expert_grid}"):
        PerfEnvPlugin(**sizes)
    # Twice the GPUs tile the same expert grid.
    assert PerfEnvPlugin(**(sizes | {"num_gpus": 48})).ep_size == sizes["ep_size"]


def test_an_ep_size_changed_after_construction_is_refused_at_setup():
    plugin = PerfEnvPlugin(ep_size=4, num_gpus=8)
    plugin.ep_size = 3
    executor = run.LocalExecutor()
    with pytest.raises(ValueError, match="expert grid"):
        plugin.setup(_script(), executor)
    assert executor.env_vars == {}


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_that_is_not_posix_is_refused_in_a_recipes_env_vars(name):
    with pytest.raises(ValueError, match=r"not a valid environment variable name.*\[A-Za-z_\]"):
        check_env_vars({name: "1"})
    cfg = get_recipe("llama3_8b")
    with pytest.raises(ValueError, match="not a valid environment variable name"):
        type(cfg)(model=cfg.model, env_vars={name: "1"})
    assert check_env_vars({"_A1": "x", "a_b": 2}) == {"_A1": "x", "a_b": "2"}


@pytest.mark.parametrize("name", ["BAD\nNAME", "é"])
def test_a_name_that_is_not_posix_is_refused_in_an_override(name):
    with pytest.raises(OverrideError, match="not a valid environment variable name"):
        apply_overrides(get_recipe("llama3_8b"), [f"env_vars.{name}=1"])


@pytest.mark.parametrize("name", ["BAD\nNAME", "é"])
def test_the_plugin_refuses_an_executor_variable_that_is_not_posix(name):
    executor = run.LocalExecutor(env_vars={name: "1"})
    with pytest.raises(ValueError, match=r"LocalExecutor\.env_vars key .*not a valid"):
        PerfEnvPlugin().setup(_script(), executor)
    assert executor.env_vars == {name: "1"}


@pytest.mark.parametrize(
    ("name", "limit"),
    [
        ("NVTE_FWD_LAYERNORM_SM_MARGIN", "layernorm_sm_margin"),
        ("NCCL_P2P_NET_CHUNKSIZE", "nccl_pp_comm_chunksize"),
    ],
)
def test_a_recipes_env_vars_meet_the_plugins_bounds(name, limit):
    maximum = LIMITS[limit].maximum
    with pytest.raises(ValueError, match=rf"{name}: expected an integer .*<= {maximum}, got"):
        check_env_vars({name: 10**12})
    assert check_env_vars({name: maximum}) == {name: str(maximum)}
