"""Shared fixtures: real megatron-core config objects, and Transformer Engine stand-ins.

Transformer Engine cannot be built or imported on these CPU-only machines, so tests that need
"TE is available" patch ``comm_overlap.HAVE_TE``; everything else is the real megatron-core code.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import logging
import os
import socket
import subprocess
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from unittest import mock

import pytest
import torch
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.models import GPTModelProvider
from megatron.bridge.recipes import RECIPES, recipe_spec
from megatron.bridge.training import comm_overlap
from megatron.bridge.training.config import ConfigContainer, TrainingConfig
from megatron.bridge.training.env_vars import forget_exports
from megatron.bridge.training.job import JobDescription, ModelDescription
from megatron.bridge.training.megatron_core_support import cannot_build_reason


@dataclass
class Configs:
    """One set of megatron-core configs, as a recipe's cfg.model / cfg.optimizer / cfg.ddp."""

    model: TransformerConfig
    optimizer: OptimizerConfig
    ddp: DistributedDataParallelConfig


#: The shipped recipes the installed megatron-core can build; the others are planned and costed
#: only, and building them is refused (tests/unit_tests/recipes/test_unbuildable_recipes.py).
BUILDABLE_RECIPES = tuple(
    sorted(name for name in RECIPES if cannot_build_reason(recipe_spec(name).job.model) is None)
)

#: (recipe, precision) pairs megatron-core refuses, with the words of the refusal: the recipe's
#: published recompute of the experts' activation (moe_act) does not run with delayed-scaling FP8
#: (TransformerConfig.__post_init__); the plan and the container refuse them alike.
REFUSED_PRECISIONS = {("nemotron_3_ultra", "fp8_ds"): r"\['moe_act'\] .*fp8_recipe='delayed'"}


def make_configs(
    *,
    tp: int = 1,
    pp: int = 1,
    vpp: int | None = None,
    cp: int = 1,
    ep: int = 1,
    sequence_parallel: bool = False,
    distributed_optimizer: bool = True,
    hidden_size: int = 1024,
    num_layers: int = 16,
    **model_kwargs,
) -> Configs:
    """Real megatron-core configs for a layout.

    Parallel sizes are assigned after construction, the way recipes assign them to
    ``cfg.model`` (megatron-core validates some combinations, e.g. SP without TP, only at
    construction).
    """
    model = TransformerConfig(
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_attention_heads=16,
        bf16=True,
        pipeline_dtype=torch.bfloat16,
        **model_kwargs,
    )
    model.tensor_model_parallel_size = tp
    model.pipeline_model_parallel_size = pp
    model.virtual_pipeline_model_parallel_size = vpp
    model.context_parallel_size = cp
    model.expert_model_parallel_size = ep
    model.sequence_parallel = sequence_parallel
    optimizer = OptimizerConfig(use_distributed_optimizer=distributed_optimizer, bf16=True)
    ddp = DistributedDataParallelConfig(use_distributed_optimizer=distributed_optimizer)
    return Configs(model=model, optimizer=optimizer, ddp=ddp)


def core_config(
    *, num_layers: int, pp: int = 1, vpp: int | None = None, **fields
) -> TransformerConfig:
    """A small real ``TransformerConfig`` (hidden 64, 4 heads) with a pipeline layout.

    megatron-core validates the layout here; ``fields`` add fields or replace those.
    """
    return TransformerConfig(
        **{
            "hidden_size": 64,
            "num_attention_heads": 4,
            "pipeline_dtype": torch.bfloat16,
            **fields,
        },
        num_layers=num_layers,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
    )


def snapshot(config) -> dict:
    """Field values, with megatron-core's init-method partials compared by what they compute."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, functools.partial):
            value = (value.func, value.args, tuple(sorted(value.keywords.items())))
        out[f.name] = value
    return out


def modules_loaded_by(code: str, names: Iterable[str]) -> list[str]:
    """Which of ``names`` are in ``sys.modules`` after a fresh interpreter ran ``code``.

    Fails the test, with the interpreter's stderr, when ``code`` raises.
    """
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted(m for m in {tuple(names)!r} if m in sys.modules)), file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"the probe failed:\n{result.stderr}")
    return json.loads(result.stderr.strip().splitlines()[-1])


def bf16_container(model, *, comm_overlap=None, gpu: str | None = None, **model_fields):
    """A real ConfigContainer around ``model``: bf16 mixed, micro-batch 1, distributed optimizer.

    ``model_fields`` are set on the model after construction, the way recipes write them.
    """
    for name, value in model_fields.items():
        setattr(model, name, value)
    cfg = ConfigContainer(
        model=model,
        train=TrainingConfig(micro_batch_size=1),
        mixed_precision="bf16_mixed",
        comm_overlap=comm_overlap,
        gpu=gpu,
    )
    cfg.ddp.use_distributed_optimizer = True
    return cfg


@pytest.fixture(autouse=True)
def root_logger_untouched():
    """Fail a test that leaves the root logger's handlers or level changed.

    Code that reconfigures the root logger (NeMo-Run's Experiment does) breaks log capture in
    whichever later test its leftovers meet: wrap it in ``root_logger_preserved``.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    assert (list(root.handlers), root.level) == (handlers, level), (
        f"the root logger changed during this test: handlers {handlers} -> {root.handlers}, "
        f"level {level} -> {root.level}; wrap the code that reconfigures it in "
        "megatron.bridge.utils.root_logger.root_logger_preserved()"
    )


@pytest.fixture(autouse=True)
def environment_restored():
    """Put ``os.environ`` back after each test.

    ``runtime_config_update`` exports a recipe's ``env_vars`` into the process environment (its
    job); without this, a variable one test's update exported would change what a later test's
    launch-environment check sees, and the outcome would depend on the order of the tests.
    """
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
    forget_exports()


#: Short layout names tests use, and the model field each one sets.
_LAYOUT_NAMES = {
    "tp_size": "tensor_model_parallel_size",
    "pp_size": "pipeline_model_parallel_size",
    "vpp_size": "virtual_pipeline_model_parallel_size",
    "cp_size": "context_parallel_size",
    "ep_size": "expert_model_parallel_size",
}
_MODEL_FIELDS = {f.name for f in dataclasses.fields(ModelDescription)}


def layout_fields(**sizes) -> dict:
    """megatron-core's names for a layout given by short names: ``tp_size=2`` ->
    ``tensor_model_parallel_size=2`` (also ``pp_size``, ``vpp_size``, ``cp_size``, ``ep_size``)."""
    return {_LAYOUT_NAMES[name]: size for name, size in sizes.items()}


def short_layout(model) -> dict:
    """The layout of ``model`` (a description, a provider or a ``TransformerConfig``) by the short
    names of :func:`layout_fields`."""
    return {name: getattr(model, field) for name, field in _LAYOUT_NAMES.items()}


#: Short size names tests use, and the model field each one sets.
_SIZE_NAMES = {
    "layers": "num_layers",
    "hidden": "hidden_size",
    "heads": "num_attention_heads",
    "groups": "num_query_groups",
    "ffn": "ffn_hidden_size",
    "seq": "seq_length",
    "vocab": "vocab_size",
}


def size_fields(**sizes) -> dict:
    """megatron-core's names for a model's sizes given by short names: ``layers=4`` ->
    ``num_layers=4`` (also ``hidden``, ``heads``, ``groups``, ``ffn``, ``seq``, ``vocab``), for a
    description, a provider or a ``TransformerConfig``."""
    return {_SIZE_NAMES[name]: size for name, size in sizes.items()}


def mamba_fields(*, state: int, head_dim: int, groups: int, heads: int | None = None) -> dict:
    """megatron-core's fields of a Mamba mixer: state size ``state``, heads ``head_dim`` wide in
    ``groups`` groups, ``heads`` of them (None: megatron-core's count, the inner width over
    ``head_dim``)."""
    fields = {"mamba_state_dim": state, "mamba_head_dim": head_dim, "mamba_num_groups": groups}
    return fields if heads is None else fields | {"mamba_num_heads": heads}


#: A model megatron-core builds on a CPU in a moment, as model fields (a description's or a
#: provider's): for tests whose point is not the model's size.
TINY_MODEL_FIELDS = MappingProxyType(
    {
        "num_layers": 4,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "seq_length": 128,
        "vocab_size": 1000,
    }
)


def tiny_model(**fields) -> ModelDescription:
    """A description of :data:`TINY_MODEL_FIELDS`; ``fields`` add model fields or replace those."""
    return ModelDescription(**{**TINY_MODEL_FIELDS, **fields})


def h100_job(model: ModelDescription, *, dp_size: int = 1, **fields) -> JobDescription:
    """A job of ``model`` on H100 (micro-batch 1, gradients reduced in fp32).

    ``fields`` are model fields (the layout by its short names, ``tp_size`` ...) or job fields;
    the world size is TP x CP x PP x ``dp_size``.
    """
    fields = {_LAYOUT_NAMES.get(k, k): v for k, v in fields.items()}
    model = dataclasses.replace(model, **{k: v for k, v in fields.items() if k in _MODEL_FIELDS})
    job = {"gpu": "h100", "micro_batch_size": 1, "grad_reduce_in_fp32": True}
    job |= {k: v for k, v in fields.items() if k not in _MODEL_FIELDS}
    world = (
        model.tensor_model_parallel_size
        * model.context_parallel_size
        * model.pipeline_model_parallel_size
        * dp_size
    )
    return JobDescription(model=model, world_size=world, **job)


def hybridep_container(*, strict: bool) -> ConfigContainer:
    """A :func:`bf16_container` of a tiny MoE model (8 experts, top-2, fp32 router) dispatching
    through HybridEP (the flex dispatcher) at EP 4, TP overlap off; ``strict`` as the user sets it.
    """
    model = GPTModelProvider(
        **TINY_MODEL_FIELDS,
        num_moe_experts=8,
        moe_router_topk=2,
        moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend="hybridep",
        moe_router_dtype="fp32",
    )
    model.expert_model_parallel_size = 4
    return bf16_container(
        model, comm_overlap=comm_overlap.CommOverlapConfig(tp_comm_overlap=False, strict=strict)
    )


#: The layout fields ``launch_env.cuda_device_max_connections`` takes, in matrix-row order.
_CONNECTION_FIELDS = (
    "gpu_sm100_or_newer",
    "tp_size",
    "cp_size",
    "dp_size",
    "pp_size",
    "moe_flex_dispatcher_backend",
    "a2a_overlap",
    "megatron_fsdp",
)


def connection_layout(*values) -> dict:
    """A row's (gpu, tp, cp, dp, pp, flex backend, a2a overlap, Megatron-FSDP) as
    launch-environment keywords."""
    return dict(zip(_CONNECTION_FIELDS, values, strict=True))


_CONNECTION_TABLE = Path(__file__).parent / "training" / "data" / "cuda_device_max_connections.csv"


def _connection_matrix() -> list:
    """The rows of ``training/data/cuda_device_max_connections.csv`` as (keywords, expected)."""
    with _CONNECTION_TABLE.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return [
        pytest.param(
            connection_layout(
                {"blackwell": True, "hopper": False}[row["gpu"]],
                int(row["tp"]),
                int(row["cp"]),
                int(row["dp"]),
                int(row["pp"]),
                row["flex_backend"] or None,
                {"yes": True, "no": False}[row["a2a_overlap"]],
                {"yes": True, "no": False}[row["megatron_fsdp"]],
            ),
            int(row["expected"]),
            id=row["id"],
        )
        for row in rows
    ]


#: CUDA_DEVICE_MAX_CONNECTIONS by layout, as (keywords, expected value): upstream
#: Megatron-Bridge's tuned values, with their sources, in ``cuda_device_max_connections.csv``.
CONNECTION_MATRIX = _connection_matrix()


def connection_rule_inputs(layout: dict) -> dict:
    """The keywords of a matrix row ``launch_env.cuda_device_max_connections`` reads."""
    keys = ("gpu_sm100_or_newer", "tp_size", "cp_size", "a2a_overlap", "megatron_fsdp")
    return {k: layout[k] for k in keys}


#: The launch variables the recipes' ``env_vars`` hold (runtime_config_update exports them).
LAUNCH_VARS = (
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "NVTE_FWD_LAYERNORM_SM_MARGIN",
    "NVTE_BWD_LAYERNORM_SM_MARGIN",
)


@pytest.fixture
def no_launch_vars(monkeypatch):
    """Start the test with none of :data:`LAUNCH_VARS` set, whatever the shell exported."""
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def importable_module(tmp_path, monkeypatch):
    """A function ``(name, source) -> name`` that makes ``source`` importable as module ``name``.

    The module is dropped from ``sys.modules`` after the test, and its folder from ``sys.path``.
    """
    written: list[str] = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def one_rank_group():
    """A 1-rank gloo world with megatron-core's model-parallel state (all sizes 1)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    dist.init_process_group(
        "gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{_free_port()}"
    )
    parallel_state.initialize_model_parallel()
    try:
        yield
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def stub_transformer_engine(monkeypatch, initialize_ub: Callable[..., None]) -> None:
    """Make ``transformer_engine.pytorch.module.base.initialize_ub`` importable as ``initialize_ub``.

    TE cannot be built on a CPU machine; ``monkeypatch`` takes the stand-in modules out again.
    """
    base = types.ModuleType("transformer_engine.pytorch.module.base")
    base.initialize_ub = initialize_ub
    for name in (
        "transformer_engine",
        "transformer_engine.pytorch",
        "transformer_engine.pytorch.module",
    ):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, base.__name__, base)


@pytest.fixture
def te_available():
    """Pretend Transformer Engine imports (it cannot exist on a CPU-only machine)."""
    with mock.patch.object(comm_overlap, "HAVE_TE", True):
        yield


@pytest.fixture
def te_missing():
    """Pretend Transformer Engine is absent, whatever this machine has."""
    with mock.patch.object(comm_overlap, "HAVE_TE", False):
        yield


# Hypothesis profiles: "ci" keeps the property tests well under a minute on a 2-core machine;
# "dev" explores far more layouts (HYPOTHESIS_PROFILE=dev uv run python -m pytest ...).
try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is a dev dependency; only the property tests need it
    pass
else:
    settings.register_profile(
        "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.register_profile(
        "dev", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
