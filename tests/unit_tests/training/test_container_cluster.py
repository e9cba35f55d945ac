"""A ``ConfigContainer`` carries the cluster its job description names (``gpus_per_node``,
``nvlink_domain``), so what is planned at model build, written to YAML, overridden and exported
by ``PerfEnvPlugin`` is the cluster ``explain`` described, not the GPU catalogue's.

The case: an H100 cluster whose NVLink joins 16 GPUs runs TP16 with TP overlap; the catalogue's
8-GPU node would plan TP overlap off. No GPU is needed: the plan, the YAML and the launch
environment are pure.
"""

from __future__ import annotations

import json
from copy import deepcopy

import pytest

from megatron.bridge.check.cli import build_parser as check_parser
from megatron.bridge.check.config import build_check_config
from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, main
from megatron.bridge.recipes import recipe_spec
from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
from megatron.bridge.training.container import ConfigContainer
from megatron.bridge.training.launch_env import HYBRID_EP_ENV_NAMES
from megatron.bridge.training.override_syntax import OverrideValueError
from megatron.bridge.training.overrides import apply_overrides
from megatron.bridge.training.resolve import resolve_config
from megatron.bridge.training.serialization import from_yaml, to_yaml
from megatron.bridge.training.validators import LimitError
from megatron.bridge.training.value_types import ConfigValueError

TP16 = {"model.tensor_model_parallel_size": 16, "model.pipeline_model_parallel_size": 8}


def _tp16_spec(**cluster: int):
    return recipe_spec("llama31_405b").changed(gpu="h100", **TP16, **cluster)


def _with(cfg: ConfigContainer, **fields: object) -> ConfigContainer:
    """A copy of ``cfg`` with ``fields`` set, keeping what the recipe derived."""
    copy = deepcopy(cfg)
    for name, value in fields.items():
        setattr(copy, name, value)
    return copy


def _tp_overlap(cfg: ConfigContainer, world: int) -> bool:
    plan = resolve_config(cfg, world_size=world, te="assume").plan
    return plan.decision("tp_comm_overlap").value


@pytest.fixture(scope="module")
def wide():
    """The TP16 recipe on an H100 cluster with 16-GPU NVLink domains, built."""
    spec = _tp16_spec(nvlink_domain=16)
    return spec, spec.build()


def test_the_built_container_plans_the_jobs_cluster(wide):
    spec, cfg = wide
    assert (cfg.gpu, cfg.gpus_per_node, cfg.nvlink_domain) == ("h100", None, 16)
    resolved = resolve_config(cfg, world_size=spec.num_gpus, te="assume")
    assert resolved.job.nvlink_ranks == 16
    assert resolved.plan.decision("tp_comm_overlap").value is True
    # The same recipe on the catalogue's 8-GPU nodes: the TP group crosses two of them.
    catalogue = _with(cfg, nvlink_domain=None)
    assert _tp_overlap(catalogue, spec.num_gpus) is False


def test_yaml_keeps_the_cluster_and_checks_it(wide):
    spec, cfg = wide
    text = to_yaml(cfg)
    assert "\nnvlink_domain: 16\n" in text and "\ngpus_per_node: null\n" in text
    back = from_yaml(text)
    assert (back.gpus_per_node, back.nvlink_domain) == (None, 16)
    assert _tp_overlap(back, spec.num_gpus) is True
    with pytest.raises(LimitError, match="nvlink_domain must be >= 1, got 0"):
        from_yaml(text.replace("\nnvlink_domain: 16\n", "\nnvlink_domain: 0\n"))
    with pytest.raises(ConfigValueError, match="gpus_per_node: expected"):
        from_yaml(text.replace("\ngpus_per_node: null\n", "\ngpus_per_node: four\n"))
    # A document without the keys takes the catalogue's cluster.
    doc = {k: v for k, v in cfg.to_dict().items() if k not in ("gpus_per_node", "nvlink_domain")}
    assert ConfigContainer.from_dict(doc).nvlink_domain is None


def test_a_value_set_in_python_is_checked_before_planning(wide):
    spec, cfg = wide
    bad = _with(cfg, nvlink_domain=True)
    with pytest.raises(ConfigValueError, match=r"cfg\.nvlink_domain: expected"):
        resolve_config(bad, world_size=spec.num_gpus, te="assume")


def test_overrides_set_the_cluster(wide):
    spec, cfg = wide
    catalogue = _with(cfg, nvlink_domain=None)
    apply_overrides(catalogue, ["nvlink_domain=16", "gpus_per_node=8"])
    assert (catalogue.nvlink_domain, catalogue.gpus_per_node) == (16, 8)
    assert _tp_overlap(catalogue, spec.num_gpus) is True
    apply_overrides(catalogue, ["nvlink_domain=null"])
    assert catalogue.nvlink_domain is None
    # The kinds of error a bad value gets from every other source: a bound, a type.
    with pytest.raises(LimitError, match=r"nvlink_domain must be >= 1, got 0"):
        apply_overrides(catalogue, ["nvlink_domain=0"])
    with pytest.raises(OverrideValueError, match=r"^gpus_per_node: expected int or None"):
        apply_overrides(catalogue, ["gpus_per_node=x"])
    assert catalogue.gpus_per_node == 8


def test_explain_with_overrides_plans_the_flags_cluster(capsys):
    flags = ["--recipe", "llama31_405b", "--gpu", "h100", "--tp", "16", "--pp", "8"]
    # An override makes explain build and resolve the container: the flag's domain reaches it.
    argv = ["explain", *flags, "--nvlink-domain", "16", "optimizer.lr=0.0002", "--json"]
    assert main(argv) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["layout"]["nvlink_ranks"] == 16
    (tp,) = [d for d in doc["overlap"]["decisions"] if d["knob"] == "tp_comm_overlap"]
    assert tp["value"] is True
    # The flag and an override naming another domain: refused, naming both.
    clash = ["explain", *flags, "--nvlink-domain", "16", "nvlink_domain=8", "--json"]
    assert main(clash) == EXIT_INVALID
    error = json.loads(capsys.readouterr().out)["error"]
    assert "--nvlink-domain 16" in error and "'nvlink_domain=8'" in error


def test_the_plugin_exports_the_containers_domain():
    spec = recipe_spec("qwen3_30b_a3b").changed(
        gpu="h100",
        precision="bf16",
        **{
            "model.moe_token_dispatcher_type": "flex",
            "model.moe_flex_dispatcher_backend": "hybridep",
        },
    )
    cfg = spec.build()

    def exported(cfg: ConfigContainer) -> tuple[str | None, str | None]:
        plugin = PerfEnvPlugin.from_config(cfg, num_gpus=spec.num_gpus)
        env = {e.name: e.value for e in plugin.launch_env_plan().entries}
        return env["NVLINK_DOMAIN_SIZE"], env["USE_MNNVL"]

    assert exported(cfg) == ("8", "0")
    # The recipe derived HybridEP's variables into cfg.env_vars for 8-GPU nodes; set on the
    # built container, the cluster's domain derives them again.
    cfg.nvlink_domain = 32
    assert PerfEnvPlugin.from_config(cfg, num_gpus=spec.num_gpus).nvlink_domain == 32
    assert exported(cfg) == ("32", "1")
    with pytest.raises(TypeError, match=r"reads .*'nvlink_domain'.* from cfg"):
        PerfEnvPlugin.from_config(cfg, num_gpus=spec.num_gpus, nvlink_domain=16)
    with pytest.raises(LimitError, match=r"PerfEnvPlugin\.nvlink_domain must be >= 1"):
        PerfEnvPlugin(gpu="h100", nvlink_domain=0)


def test_the_check_builds_the_flags_cluster_into_its_container():
    args = check_parser().parse_args(
        ["--recipe", "llama3_8b", "--tiny", "--gpu", "h100", "--nvlink-domain", "16"]
    )
    cfg, _, _ = build_check_config(args, world_size=4, on_cuda=False)
    assert (cfg.nvlink_domain, cfg.gpus_per_node) == (16, None)
    assert resolve_config(cfg, world_size=4, te="assume").job.nvlink_ranks == 16


def test_without_a_gpu_the_given_cluster_sets_the_domain():
    # The job's figures alone, where no GPU names a catalogue entry: the TP rule and HybridEP's
    # variables read them instead of dropping them.
    from megatron.bridge.training.comm_overlap.rules.tp import tp_group_domain_crossed
    from megatron.bridge.training.job import JobDescription, ModelDescription

    model = ModelDescription(tensor_model_parallel_size=16, sequence_parallel=True)
    assert JobDescription(model=model, world_size=64).nvlink_ranks is None
    assert tp_group_domain_crossed(JobDescription(model=model, world_size=64)) is None
    wide = JobDescription(model=model, world_size=64, nvlink_domain=16)
    assert wide.nvlink_ranks == 16 and tp_group_domain_crossed(wide) is None
    narrow = JobDescription(model=model, world_size=64, gpus_per_node=8)
    assert tp_group_domain_crossed(narrow) == 8

    def hybridep(**cluster: int) -> dict[str, str | None]:
        plugin = PerfEnvPlugin(
            gpu_sm100_or_newer=True,
            num_gpus=64,
            ep_size=64,
            moe_flex_dispatcher_backend="hybridep",
            **cluster,
        )
        entries = plugin.launch_env_plan().entries
        return {e.name: e.value for e in entries if e.name in HYBRID_EP_ENV_NAMES}

    unset = dict.fromkeys(HYBRID_EP_ENV_NAMES)
    assert hybridep() == unset
    rack = {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "64", "NVLINK_DOMAIN_SIZE": "72"}
    assert hybridep(nvlink_domain=72, gpus_per_node=4) == {**rack, "USE_MNNVL": "1"}
    # Whether the domain spans nodes needs the node size: left to HybridEP, said in the reason.
    assert hybridep(nvlink_domain=72) == {**rack, "USE_MNNVL": None}


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "3"}, r"=3 does not divide EP=8"),
        ({"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "x"}, r"='x' is not a positive integer"),
    ],
)
def test_the_plugin_refuses_an_executor_value_the_job_fails_with(env, match):
    import nemo_run as run

    plugin = PerfEnvPlugin(
        gpu="h100", num_gpus=16, ep_size=8, moe_flex_dispatcher_backend="hybridep"
    )
    executor = run.LocalExecutor(env_vars=dict(env))
    with pytest.raises(ValueError, match=rf"LocalExecutor\.env_vars: .*{match}"):
        plugin.setup(run.Script(path="/opt/pretrain.py", entrypoint="python"), executor)
    assert executor.env_vars == env


@pytest.mark.parametrize(
    ("local", "flag", "expected"),
    [
        ("2", None, 2),  # 4 ranks over 2 nodes of 2: the node the launcher laid out
        ("4", None, None),  # one node: nothing crosses one
        ("2", "4", 4),  # the flag wins
        (None, None, None),  # not under torchrun
    ],
)
def test_the_check_takes_the_launchers_ranks_per_node(monkeypatch, local, flag, expected):
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    argv = ["--recipe", "llama3_8b", "--tiny", "--gpu", "h100"]
    args = check_parser().parse_args([*argv, *(["--gpus-per-node", flag] if flag else [])])
    cfg, _, notes = build_check_config(args, world_size=4, on_cuda=False)
    assert cfg.gpus_per_node == expected
    said = [n for n in notes if "LOCAL_WORLD_SIZE" in n]
    assert bool(said) is (expected is not None and flag is None)
