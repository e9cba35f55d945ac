"""NeMo-Run plugins (megatron/bridge/recipes/run_plugins/) on real NeMo-Run objects."""

import importlib
import logging
import os
import sys
from types import MappingProxyType

import nemo_run as run
import pytest

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.recipes import run_plugins
from megatron.bridge.recipes.run_plugins import VBOOST_SETUP_LINE, NsysPlugin, PerfEnvPlugin
from megatron.bridge.training.comm_overlap import CommOverlapConfig, te_status
from megatron.bridge.training.resolve import resolve_config
from megatron.bridge.utils.root_logger import root_logger_preserved
from tests.unit_tests.conftest import CONNECTION_MATRIX, bf16_container, modules_loaded_by

LOGGER = "megatron.bridge.recipes.run_plugins"


def _script():
    return run.Script(path="/opt/megatron/pretrain.py", entrypoint="python")


def _slurm(tmp_path, **kwargs):
    return run.SlurmExecutor(
        account="acct",
        partition="batch",
        nodes=1,
        ntasks_per_node=8,
        tunnel=run.LocalTunnel(job_dir=str(tmp_path / "jobs")),
        packager=run.Packager(),
        **kwargs,
    )


def argparse_style(args):
    """A PerfEnvPlugin converter a Megatron-LM style argparse script would want."""
    flags = ["--manual-gc"] if args.enable_manual_gc else []
    return [*flags, "--manual-gc-interval", str(args.manual_gc_interval)]


def train_with_profiling(
    profile_step_start: int = 0, profile_step_end: int = 1, profile_ranks=None
):
    """Stand-in training entry point that accepts a profile window."""
    return profile_step_start, profile_step_end, profile_ranks


def train_plain(lr: float = 1.0):
    """Stand-in training entry point with no profiling parameters."""
    return lr


# --------------------------------------------------------------------- connection matrix


@pytest.mark.parametrize(("layout", "expected"), CONNECTION_MATRIX)
def test_connection_matrix_on_local_executor(layout, expected):
    plugin_fields = {k: v for k, v in layout.items() if k != "dp_size"}
    num_gpus = layout["tp_size"] * layout["cp_size"] * layout["pp_size"] * layout["dp_size"]
    executor = run.LocalExecutor()
    PerfEnvPlugin(**plugin_fields, num_gpus=num_gpus).setup(_script(), executor)
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == str(expected)


#: A plugin's layout with both tensor and pipeline parallelism: TP2 x PP2 on 8 GPUs (DP 2).
TP2_PP2 = MappingProxyType({"tp_size": 2, "pp_size": 2, "num_gpus": 8})


def test_plugin_uses_the_shared_plan():
    plugin = PerfEnvPlugin(**TP2_PP2, nccl_pp_comm_chunksize=4194304)
    executor = run.LocalExecutor()
    plugin.setup(_script(), executor)
    assert executor.env_vars == plugin.launch_env_plan().env
    assert plugin.dp_size == 2


def test_every_value_is_logged_once_with_its_reason(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    PerfEnvPlugin(tp_size=2, num_gpus=8).setup(_script(), run.LocalExecutor())
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    cdmc = [m for m in messages if "CUDA_DEVICE_MAX_CONNECTIONS=1" in m]
    assert len(cdmc) == 1 and "launch order" in cdmc[0]
    assert len([m for m in messages if "NVTE_FWD_LAYERNORM_SM_MARGIN=20" in m]) == 1
    assert any("train.manual_gc=true added" in m for m in messages)


# --------------------------------------------------------------------- margins, chunk size


def test_margin_already_on_executor_wins(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    executor = run.LocalExecutor(env_vars={"NVTE_FWD_LAYERNORM_SM_MARGIN": "8"})
    PerfEnvPlugin(layernorm_sm_margin=20).setup(_script(), executor)
    assert executor.env_vars["NVTE_FWD_LAYERNORM_SM_MARGIN"] == "8"
    assert executor.env_vars["NVTE_BWD_LAYERNORM_SM_MARGIN"] == "20"
    assert any(
        "keeping NVTE_FWD_LAYERNORM_SM_MARGIN=8 from the executor" in r.getMessage()
        for r in caplog.records
    )


def test_user_tuned_connection_count_is_kept_quietly(caplog):
    # Hopper TP4 plans 1, but 8 breaks nothing (TE orders the comm kernels either way): a
    # recipe's tuned value is kept without a warning, and the log says what the plan had.
    caplog.set_level(logging.INFO, logger=LOGGER)
    executor = run.LocalExecutor(env_vars={"CUDA_DEVICE_MAX_CONNECTIONS": "8"})
    PerfEnvPlugin(tp_size=4, num_gpus=8).setup(_script(), executor)
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    infos = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert any("keeping CUDA_DEVICE_MAX_CONNECTIONS=8" in m and "plan: 1" in m for m in infos)


def test_user_connection_count_that_breaks_a2a_overlap_is_kept_but_warned(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    executor = run.LocalExecutor(env_vars={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    PerfEnvPlugin(tp_size=2, num_gpus=8, a2a_overlap=True).setup(_script(), executor)
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "EP all-to-all overlap is on" in warnings[0] and "must be above 1" in warnings[0]


def test_margins_disabled():
    executor = run.LocalExecutor()
    PerfEnvPlugin(enable_layernorm_sm_margin=False).setup(_script(), executor)
    assert "NVTE_FWD_LAYERNORM_SM_MARGIN" not in executor.env_vars
    assert "NVTE_BWD_LAYERNORM_SM_MARGIN" not in executor.env_vars
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"


@pytest.mark.parametrize(("pp", "expected"), [(2, "2097152"), (1, None)])
def test_chunk_size_only_with_pipeline_parallelism(pp, expected):
    executor = run.LocalExecutor()
    PerfEnvPlugin(pp_size=pp, num_gpus=8, nccl_pp_comm_chunksize=2097152).setup(_script(), executor)
    assert executor.env_vars.get("NCCL_P2P_NET_CHUNKSIZE") == expected


def test_no_chunk_size_by_default_even_with_pipeline():
    executor = run.LocalExecutor()
    PerfEnvPlugin(pp_size=4, num_gpus=8).setup(_script(), executor)
    assert "NCCL_P2P_NET_CHUNKSIZE" not in executor.env_vars


# --------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"layernorm_sm_margin": -1},
            ValueError,
            r"PerfEnvPlugin\.layernorm_sm_margin must be >= 0",
        ),
        ({"layernorm_sm_margin": True}, TypeError, r"PerfEnvPlugin\.layernorm_sm_margin"),
        ({"layernorm_sm_margin": "16"}, TypeError, r"PerfEnvPlugin\.layernorm_sm_margin"),
        (
            {"nccl_pp_comm_chunksize": 0},
            ValueError,
            r"PerfEnvPlugin\.nccl_pp_comm_chunksize must be >= 2, got 0",
        ),
        ({"nccl_pp_comm_chunksize": 1.5e6}, TypeError, r"PerfEnvPlugin\.nccl_pp_comm_chunksize"),
        ({"nccl_pp_comm_chunksize": False}, TypeError, r"PerfEnvPlugin\.nccl_pp_comm_chunksize"),
        ({"manual_gc_interval": -10}, ValueError, r"PerfEnvPlugin\.manual_gc_interval"),
        ({"moe_flex_dispatcher_backend": "deep_ep"}, ValueError, r"'deepep', 'hybridep', 'ncclep'"),
        ({"tp_size": 0}, ValueError, "tp_size must be >= 1"),
        ({"tp_size": 3, "num_gpus": 8}, ValueError, "num_gpus=8 is not divisible"),
        (
            {"gpu_sm100_or_newer": "yes"},
            TypeError,
            r"PerfEnvPlugin\.gpu_sm100_or_newer must be True, False or None",
        ),
        ({"script_args_converter_fn": "hydra"}, TypeError, "script_args_converter_fn"),
    ],
)
def test_bad_input_names_the_field(kwargs, error, match):
    with pytest.raises(error, match=match):
        PerfEnvPlugin(**kwargs)


def test_fields_changed_after_construction_are_checked_in_setup():
    plugin = PerfEnvPlugin()
    plugin.layernorm_sm_margin = -3
    with pytest.raises(ValueError, match="layernorm_sm_margin"):
        plugin.setup(_script(), run.LocalExecutor())


def test_converter_must_return_strings():
    plugin = PerfEnvPlugin(
        script_args_converter_fn=lambda args: [args.enable_manual_gc, args.manual_gc_interval]
    )
    with pytest.raises(TypeError, match="must return a list of str"):
        plugin.setup(_script(), run.LocalExecutor())


def test_import_without_nemo_run_tells_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nemo_run", None)
    monkeypatch.delitem(sys.modules, "megatron.bridge.recipes.run_plugins")
    with pytest.raises(ImportError, match=r"pip install 'megatron-bridge-overlap\[run\]'"):
        importlib.import_module("megatron.bridge.recipes.run_plugins")


# --------------------------------------------------------------------- manual GC


def test_manual_gc_hydra_overrides_by_default():
    task = _script()
    PerfEnvPlugin(manual_gc_interval=50).setup(task, run.LocalExecutor())
    assert task.args == ["train.manual_gc=true", "train.manual_gc_interval=50"]


def test_manual_gc_disabled_adds_nothing():
    task = _script()
    PerfEnvPlugin(enable_manual_gc=False).setup(task, run.LocalExecutor())
    assert task.args == []


def test_manual_gc_converter_changes_the_form():
    task = _script()
    PerfEnvPlugin(script_args_converter_fn=argparse_style).setup(task, run.LocalExecutor())
    assert task.args == ["--manual-gc", "--manual-gc-interval", "100"]


def test_manual_gc_user_override_wins():
    task = run.Script(
        path="/opt/megatron/pretrain.py", entrypoint="python", args=["train.manual_gc_interval=5"]
    )
    PerfEnvPlugin().setup(task, run.LocalExecutor())
    assert task.args == ["train.manual_gc_interval=5", "train.manual_gc=true"]


def test_manual_gc_on_inline_script_warns_and_adds_nothing(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    task = run.Script(inline="python /opt/megatron/pretrain.py")
    PerfEnvPlugin().setup(task, run.LocalExecutor())
    assert task.args == []
    assert any("inline" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_manual_gc_on_partial_warns(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    task = run.Partial(train_plain, lr=0.1)
    PerfEnvPlugin().setup(task, run.LocalExecutor())
    assert task.lr == 0.1
    assert any("run.Script tasks only" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("converter", [None, argparse_style])
def test_setup_twice_is_idempotent(tmp_path, converter):
    plugin = PerfEnvPlugin(
        **TP2_PP2,
        nccl_pp_comm_chunksize=2097152,
        enable_vboost=True,
        script_args_converter_fn=converter,
    )
    task, executor = _script(), _slurm(tmp_path)
    plugin.setup(task, executor)
    env, args, lines = dict(executor.env_vars), list(task.args), executor.setup_lines
    plugin.setup(task, executor)
    assert executor.env_vars == env
    assert task.args == args
    assert executor.setup_lines == lines
    assert lines.count("boost-slider") == 1


# --------------------------------------------------------------------- vboost


def test_vboost_on_slurm_keeps_existing_setup_lines(tmp_path):
    executor = _slurm(tmp_path, setup_lines="module load cuda")
    PerfEnvPlugin(enable_vboost=True).setup(_script(), executor)
    assert executor.setup_lines.splitlines() == ["module load cuda", VBOOST_SETUP_LINE]


def test_vboost_off_leaves_slurm_alone(tmp_path):
    executor = _slurm(tmp_path)
    PerfEnvPlugin().setup(_script(), executor)
    assert executor.setup_lines is None


def test_vboost_on_local_executor_warns_and_skips(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    executor = run.LocalExecutor()
    PerfEnvPlugin(enable_vboost=True).setup(_script(), executor)
    assert "boost" not in repr(executor.to_config())
    assert any(
        "enable_vboost needs a SlurmExecutor" in r.getMessage() and r.levelno == logging.WARNING
        for r in caplog.records
    )


# --------------------------------------------------------------------- from_config


def _container(comm_overlap=None, **model_kwargs):
    """A real ConfigContainer for a small model (bf16, distributed optimizer)."""
    model = GPTModelProvider(
        num_layers=4, hidden_size=64, num_attention_heads=4, seq_length=128, vocab_size=1000
    )
    return bf16_container(model, comm_overlap=comm_overlap, **model_kwargs)


def _moe(**kwargs):
    return {
        "num_moe_experts": 4,
        "expert_model_parallel_size": 2,
        "expert_tensor_parallel_size": 1,
        "add_bias_linear": False,
        "sequence_parallel": True,
        **kwargs,
    }


def test_from_config_reads_parallel_sizes():
    cfg = _container(
        CommOverlapConfig(tp_comm_overlap=True),
        tensor_model_parallel_size=4,
        context_parallel_size=2,
        pipeline_model_parallel_size=2,
        sequence_parallel=True,
    )
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=32, layernorm_sm_margin=8)
    assert (plugin.tp_size, plugin.cp_size, plugin.pp_size, plugin.dp_size) == (4, 2, 2, 2)
    assert plugin.layernorm_sm_margin == 8
    assert plugin.moe_flex_dispatcher_backend is None and plugin.a2a_overlap is False
    executor = run.LocalExecutor()
    plugin.setup(_script(), executor)
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    # Planning resolved copies: the container is as the recipe wrote it.
    assert cfg.model.tp_comm_overlap is False and cfg.overlap_plan is None


def test_from_config_reads_megatron_fsdp_and_never_exports_the_refused_one_queue():
    cfg = _container(tensor_model_parallel_size=2, sequence_parallel=True)
    cfg.ddp.use_megatron_fsdp = True
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=8)
    assert plugin.megatron_fsdp is True and plugin.tp_size == 2
    executor = run.LocalExecutor()
    plugin.setup(_script(), executor)
    # Hopper at TP2 would take 1; Megatron-Bridge refuses 1 under Megatron-FSDP.
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"


def test_plugin_warns_about_one_queue_under_megatron_fsdp(caplog):
    executor = run.LocalExecutor(env_vars={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    with caplog.at_level(logging.WARNING):
        PerfEnvPlugin(tp_size=2, megatron_fsdp=True).setup(_script(), executor)
    assert executor.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"  # the executor's value wins
    assert any("Megatron-FSDP is on" in r.getMessage() for r in caplog.records)


def test_from_config_ignores_default_backend_of_dense_model():
    # megatron-core sets moe_flex_dispatcher_backend="deepep" on every TransformerConfig.
    cfg = _container(tensor_model_parallel_size=2)
    assert cfg.model.moe_flex_dispatcher_backend == "deepep"
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=8)
    assert plugin.moe_flex_dispatcher_backend is None
    assert plugin.launch_env_plan().env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_from_config_flex_backend():
    cfg = _container(
        **_moe(
            tensor_model_parallel_size=2,
            moe_token_dispatcher_type="flex",
            moe_flex_dispatcher_backend="hybridep",
        )
    )
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=8)
    assert plugin.moe_flex_dispatcher_backend == "hybridep"
    plan = plugin.launch_env_plan()
    # Hopper (the default without a GPU), TP2, no EP overlap: upstream's tuned 1 whatever the
    # backend (glm_moe_dsa/h100/glm5.py glm51_sft_416gpu_h100_bf16_config, deepep at CP32).
    assert plan.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    # No GPU named: HybridEP's topology is left to its own detection, and the plan says so.
    assert plan.entry("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN").value is None
    assert "no GPU named" in plan.entry("USE_MNNVL").reason


@pytest.mark.parametrize(
    ("model_flag", "request_flag", "expected"),
    [
        # No comm_overlap request: the library leaves the model's own flag, and reads it.
        (True, "no request", True),
        # A request that leaves EP overlap to the rules: off unless requested, and the flag set
        # straight on the model is reported as replaced (the plan and the plugin agree).
        (True, None, False),
        (False, True, True),
        (True, False, False),
    ],
)
def test_from_config_a2a_overlap_follows_the_plan(model_flag, request_flag, expected):
    request = (
        None
        if request_flag == "no request"
        else CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=request_flag)
    )
    cfg = _container(
        request,
        **_moe(
            tensor_model_parallel_size=2,
            moe_token_dispatcher_type="alltoall",
            overlap_moe_expert_parallel_comm=model_flag,
        ),
    )
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=8)
    assert plugin.a2a_overlap is expected
    assert plugin.launch_env_plan().env["CUDA_DEVICE_MAX_CONNECTIONS"] == (
        "32" if expected else "1"
    )
    if request is not None:
        plan = resolve_config(cfg, world_size=8, te=te_status("assume")).plan
        assert plan.value("overlap_moe_expert_parallel_comm") is expected
        replaced = [w for w in plan.warnings if "cfg.model.overlap_moe_expert_parallel_comm" in w]
        assert bool(replaced) == (model_flag and not expected)


def test_from_config_refuses_layout_overrides():
    cfg = _container(tensor_model_parallel_size=2)
    with pytest.raises(TypeError, match=r"reads \['tp_size'\] from cfg.*Choose one"):
        PerfEnvPlugin.from_config(cfg, num_gpus=8, tp_size=4)


def test_from_config_checks_divisibility():
    cfg = _container(tensor_model_parallel_size=4)
    with pytest.raises(ValueError, match="num_gpus=6 is not divisible"):
        PerfEnvPlugin.from_config(cfg, num_gpus=6)


def test_from_config_takes_the_generation_from_the_gpu():
    cfg = _container(tensor_model_parallel_size=2)
    cfg.gpu = "b200"
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=16)
    assert plugin.gpu == "b200" and plugin.gpu_sm100_or_newer is None
    assert plugin.launch_env_plan().env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    with pytest.raises(TypeError, match="pass the GPU name only"):
        PerfEnvPlugin.from_config(cfg, num_gpus=16, gpu_sm100_or_newer=False)


# --------------------------------------------------------------------- NsysPlugin


def test_nsys_settings_on_local_launcher(tmp_path):
    executor = run.LocalExecutor()
    task = _script()
    NsysPlugin(
        profile_step_start=10,
        profile_step_end=12,
        profile_ranks=[0, 4],
        nsys_trace=["nvtx", "cuda", "osrt"],
        nsys_extra_args=["--sample=none"],
        record_shapes=True,
    ).setup(task, executor)
    launcher = executor.get_launcher()
    assert launcher.nsys_profile is True
    assert launcher.nsys_trace == ["nvtx", "cuda", "osrt"]
    assert launcher.nsys_extra_args[-1] == "--sample=none"
    assert "--capture-range=cudaProfilerApi" in launcher.nsys_extra_args
    prefix = launcher.get_nsys_prefix(profile_dir=str(tmp_path))
    assert prefix[prefix.index("-t") + 1] == "nvtx,cuda,osrt"
    assert task.args == [
        "profiling.use_nsys_profiler=true",
        "profiling.profile_step_start=10",
        "profiling.profile_step_end=12",
        "profiling.profile_ranks=[0,4]",
        "profiling.record_shapes=true",
    ]


def test_nsys_on_slurm_keeps_torchrun_launcher_and_names_files_per_rank(tmp_path):
    executor = _slurm(tmp_path, launcher="torchrun")
    plugin = NsysPlugin(profile_step_start=3, profile_step_end=5, nsys_extra_args=["--sample=none"])
    plugin.setup(_script(), executor)
    plugin.setup(_script(), executor)
    launcher = executor.get_launcher()
    assert isinstance(launcher, run.Torchrun)
    assert launcher.nsys_profile is True
    assert "%q{SLURM_PROCID}" in launcher.nsys_filename
    assert launcher.nsys_extra_args.count("--sample=none") == 1


def test_nsys_sets_partial_attributes_that_exist(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    task = run.Partial(train_with_profiling)
    NsysPlugin(profile_step_start=2, profile_step_end=4, profile_ranks=[1]).setup(
        task, run.LocalExecutor()
    )
    assert (task.profile_step_start, task.profile_step_end, task.profile_ranks) == (2, 4, [1])
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_nsys_warns_when_partial_cannot_take_the_window(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    task = run.Partial(train_plain, lr=0.5)
    executor = run.LocalExecutor()
    NsysPlugin(profile_step_start=2, profile_step_end=4).setup(task, executor)
    assert executor.get_launcher().nsys_profile is True
    assert task.lr == 0.5
    assert any(
        "takes no" in r.getMessage() and "profile_step_start" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"profile_step_start": 5, "profile_step_end": 5},
            ValueError,
            r"profile_step_start \(5\) must be < profile_step_end \(5\)",
        ),
        (
            {"profile_step_start": 7, "profile_step_end": 3},
            ValueError,
            "must be < profile_step_end",
        ),
        (
            {"profile_step_start": -1, "profile_step_end": 3},
            ValueError,
            r"NsysPlugin\.profile_step_start must be >= 0",
        ),
        (
            {"profile_step_start": True, "profile_step_end": 3},
            TypeError,
            r"NsysPlugin\.profile_step_start",
        ),
        (
            {"profile_step_start": 0, "profile_step_end": 2.0},
            TypeError,
            r"NsysPlugin\.profile_step_end",
        ),
        (
            {"profile_step_start": 0, "profile_step_end": 2, "profile_ranks": ["0"]},
            ValueError,
            r"NsysPlugin\.profile_ranks",
        ),
        (
            {"profile_step_start": 0, "profile_step_end": 2, "profile_ranks": []},
            TypeError,
            r"NsysPlugin\.profile_ranks",
        ),
        (
            {"profile_step_start": 0, "profile_step_end": 2, "profile_ranks": 0},
            TypeError,
            r"NsysPlugin\.profile_ranks",
        ),
        (
            {"profile_step_start": 0, "profile_step_end": 2, "nsys_trace": "cuda"},
            TypeError,
            r"NsysPlugin\.nsys_trace",
        ),
    ],
)
def test_nsys_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        NsysPlugin(**kwargs)


# --------------------------------------------------------------------- real Slurm dry run


@pytest.fixture
def devnull_stdin(monkeypatch):
    # LocalTunnel runs its shell commands through invoke, which forwards our stdin; pytest's
    # captured stdin refuses reads, so give the dry run what a batch launch has: nothing.
    with open(os.devnull) as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        yield


def _dry_run(tmp_path, task, executor, plugins):
    # Kept in its own frame so the experiment is garbage once this returns: its __del__ then runs
    # inside root_logger_preserved rather than in some later test.
    with run.Experiment(
        "overlap-dryrun", executor=executor, base_dir=str(tmp_path), log_level="WARN"
    ) as exp:
        exp.add(task, executor=executor, name="pretrain", plugins=plugins)
        exp.dryrun(log=False, delete_exp_dir=False)


def _dry_run_sbatch(tmp_path, task, executor, plugins):
    with root_logger_preserved():
        _dry_run(tmp_path, task, executor, plugins)
    scripts = list(tmp_path.rglob("pretrain_sbatch.sh"))
    assert len(scripts) == 1, scripts
    return scripts[0].read_text()


def test_slurm_dry_run_sbatch_exports(tmp_path, devnull_stdin):
    plugin = PerfEnvPlugin(
        tp_size=4, pp_size=2, num_gpus=8, nccl_pp_comm_chunksize=2097152, enable_vboost=True
    )
    executor = _slurm(tmp_path, env_vars={"NVTE_BWD_LAYERNORM_SM_MARGIN": "24"})
    sbatch = _dry_run_sbatch(tmp_path, _script(), executor, [plugin])
    lines = sbatch.splitlines()
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in lines
    assert "export NVTE_FWD_LAYERNORM_SM_MARGIN=20" in lines
    assert "export NVTE_BWD_LAYERNORM_SM_MARGIN=24" in lines
    assert "export NCCL_P2P_NET_CHUNKSIZE=2097152" in lines
    assert VBOOST_SETUP_LINE in lines
    srun = next(line for line in lines if line.startswith("srun --output"))
    assert srun.endswith(
        "python /opt/megatron/pretrain.py train.manual_gc=true train.manual_gc_interval=100"
    )
    # The plugin works on the experiment's clone; the caller's executor stays as written.
    assert executor.env_vars == {"NVTE_BWD_LAYERNORM_SM_MARGIN": "24"}


def test_slurm_dry_run_blackwell_with_nsys_and_converter(tmp_path, devnull_stdin):
    plugins = [
        PerfEnvPlugin(
            gpu_sm100_or_newer=True, tp_size=2, num_gpus=8, script_args_converter_fn=argparse_style
        ),
        NsysPlugin(profile_step_start=10, profile_step_end=11),
    ]
    sbatch = _dry_run_sbatch(tmp_path, _script(), _slurm(tmp_path), plugins)
    lines = sbatch.splitlines()
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=32" in lines
    srun = next(line for line in lines if line.startswith("srun --output"))
    assert " nsys profile -s none -t nvtx,cuda " in srun
    assert "--manual-gc --manual-gc-interval 100" in srun
    assert "profiling.profile_step_start=10 profiling.profile_step_end=11" in srun


def test_module_exports_are_documented_plugins_and_helpers():
    for name in run_plugins.__all__:
        value = getattr(run_plugins, name)
        assert isinstance(value, str) or value.__doc__, f"{name} has no docstring"
    assert issubclass(PerfEnvPlugin, run.Plugin) and issubclass(NsysPlugin, run.Plugin)
    assert run_plugins.no_script_args(object()) == []


def test_recipes_package_import_is_light():
    code = "import megatron.bridge.recipes"
    assert modules_loaded_by(code, ("torch", "megatron.core", "nemo_run")) == []
