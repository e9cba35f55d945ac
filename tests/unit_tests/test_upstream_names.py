"""The import paths and methods upstream Megatron-Bridge's docs and the seed skill use exist here.

Each name is imported by its upstream path and compared with the object this project defines
(one object, re-exported, never a copy). The snippets that call them run in
``test_upstream_snippets.py``.
"""

from __future__ import annotations

import importlib

import pytest
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.training import container, flex_dispatcher_backend, resolve
from megatron.bridge.training.comm_overlap.request import CommOverlapConfig
from megatron.bridge.training.mixed_precision import MixedPrecisionConfig
from megatron.bridge.training.userbuffers import PUBLISHED_PRESETS

#: (upstream module, name) -> the object it must be here.
NAMES = {
    ("megatron.bridge.training.config", "runtime_config_update"): resolve.runtime_config_update,
    ("megatron.bridge.training.config", "ConfigContainer"): container.ConfigContainer,
    ("megatron.bridge.training.config", "TrainingConfig"): container.TrainingConfig,
    ("megatron.bridge.training.config", "OptimizerConfig"): OptimizerConfig,
    (
        "megatron.bridge.training.config",
        "DistributedDataParallelConfig",
    ): DistributedDataParallelConfig,
    ("megatron.bridge.training.comm_overlap", "CommOverlapConfig"): CommOverlapConfig,
    (
        "megatron.bridge.training.comm_overlap",
        "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048",
    ): PUBLISHED_PRESETS["userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"],
    ("megatron.bridge.training.mixed_precision", "MixedPrecisionConfig"): MixedPrecisionConfig,
    ("megatron.bridge.models", "GPTModelProvider"): GPTModelProvider,
    (
        "megatron.bridge.training.flex_dispatcher_backend",
        "apply_flex_dispatcher_backend",
    ): flex_dispatcher_backend.apply_flex_dispatcher_backend,
}


@pytest.mark.parametrize(("module", "name"), list(NAMES), ids=lambda x: x)
def test_upstream_import_path(module, name):
    assert getattr(importlib.import_module(module), name) is NAMES[module, name]


def test_the_nemo_run_plugins():
    plugins = importlib.import_module("megatron.bridge.recipes.run_plugins")
    import nemo_run as run

    for name in ("PerfEnvPlugin", "NsysPlugin"):
        assert issubclass(getattr(plugins, name), run.Plugin)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("to_yaml", "method"),
        ("print_yaml", "method"),
        ("to_dict", "method"),
        ("from_yaml", "classmethod"),
        ("from_dict", "classmethod"),
    ],
)
def test_config_container_methods(name, kind):
    attribute = vars(container.ConfigContainer)[name]
    assert isinstance(attribute, classmethod) is (kind == "classmethod")
