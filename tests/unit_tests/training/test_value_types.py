"""megatron/bridge/training/value_types.py: one type check for every way a value comes in.

A bad value given through a YAML file (``serialization.from_yaml``), a ``key=value`` override
(``apply_overrides``) or Python (set, then ``runtime_config_update``) meets the same check and
raises the same kind of error, naming the file (for YAML) and the key.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import pytest
import torch
import yaml
from megatron.core import ModelParallelConfig
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer import TransformerConfig

from megatron.bridge.recipes import get_recipe, recipe_spec
from megatron.bridge.training.config import ConfigContainer, check_env_vars
from megatron.bridge.training.overrides import OverrideError, apply_overrides
from megatron.bridge.training.resolve import runtime_config_update
from megatron.bridge.training.serialization import from_yaml, to_dict, to_yaml
from megatron.bridge.training.value_types import (
    ConfigValueError,
    check_field,
    check_value,
    field_types,
    type_hints,
)
from tests.unit_tests.repo_scripts import package_modules

if TYPE_CHECKING:
    from _not_a_module import NotImported

RECIPE = "gpt3_175b"
pytestmark = pytest.mark.usefixtures("no_launch_vars")


@pytest.fixture
def cfg():
    return get_recipe(RECIPE)


# --------------------------------------------------------------------------- every source

SOURCES = ("yaml", "override", "python")

#: What a bool field adds when it gets a YAML 1.1 boolean word.
_WORDS = (
    ": write true or false (booleans are true/false only; YAML 1.1's yes/no/on/off are not "
    "read as booleans)"
)

#: (key, the bad value as a YAML scalar, the key the error names, what it says about the value)
BAD_VALUES = [
    ("model.sequence_parallel", "'yes'", None, "expected bool, got str 'yes'" + _WORDS),
    ("model.num_layers", "2.5", None, "expected int, got float 2.5"),
    ("model.num_layers", "true", None, "expected int, got bool True"),
    (
        "model.recompute_modules",
        "[core_attn, 3]",
        "model.recompute_modules[1]",
        "expected str, got int 3",
    ),
    ("optimizer.lr", "fast", None, "expected float or None, got str 'fast'"),
    ("ddp.overlap_grad_reduce", "1", None, "expected bool, got int 1"),
    ("train.micro_batch_size", "'2'", None, "expected int, got str '2'"),
    ("mixed_precision.grad_reduce_in_fp32", "'no'", None, "expected bool, got str 'no'" + _WORDS),
    (
        "comm_overlap.tp_comm_bootstrap_backend",
        "tcp",
        None,
        "expected one of ['nccl', 'mpi', 'gloo'], got str 'tcp'",
    ),
    ("comm_overlap.bucket_size", "true", None, "expected int or None, got bool True"),
]


def _give(source: str, cfg: ConfigContainer, key: str, text: str, tmp_path) -> tuple[Any, str]:
    """Give ``cfg``'s ``key`` the YAML scalar ``text`` through ``source``: (the call that must
    refuse it, the prefix its error starts with)."""
    section, name = key.split(".")
    value = yaml.safe_load(text)
    if source == "yaml":
        doc = to_dict(cfg)
        doc[section][name] = value
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return (lambda: from_yaml(path)), f"{path}: "
    if source == "override":
        return (lambda: apply_overrides(cfg, [f"{key}={text}"])), f"{key}={text!r}: "
    setattr(getattr(cfg, section), name, value)
    world = recipe_spec(RECIPE).num_gpus
    return (lambda: runtime_config_update(cfg, world, te="assume")), "cfg."


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize(("key", "text", "named", "problem"), BAD_VALUES)
def test_a_bad_value_is_refused_alike_from_every_source(
    source, cfg, tmp_path, key, text, named, problem
):
    call, prefix = _give(source, cfg, key, text, tmp_path)
    with pytest.raises(ConfigValueError) as info:
        call()
    named = named or key
    if source == "override":
        # The override as typed, then the item when the error is about one.
        expected = prefix + (problem if named == key else f"{named}: {problem}")
        assert isinstance(info.value, OverrideError)
    else:
        expected = f"{prefix}{named}: {problem}"
    assert str(info.value) == expected
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


def test_a_failed_override_leaves_the_container_as_it_was(cfg):
    before = cfg.model.sequence_parallel
    with pytest.raises(ConfigValueError):
        apply_overrides(cfg, ["model.sequence_parallel=false", "model.num_layers=2.5"])
    assert cfg.model.sequence_parallel is before


def test_to_yaml_refuses_what_from_yaml_would(cfg):
    cfg.model.sequence_parallel = "yes"
    with pytest.raises(ConfigValueError, match=r"^cfg\.model\.sequence_parallel: expected bool"):
        to_yaml(cfg)


def test_yaml_values_are_widened_like_overrides(cfg, tmp_path):
    doc = to_dict(cfg)
    doc["optimizer"]["lr"] = 1
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    lr = from_yaml(path).optimizer.lr
    assert lr == 1.0 and type(lr) is float
    apply_overrides(cfg, ["optimizer.lr=1"])
    assert type(cfg.optimizer.lr) is float


def test_a_key_given_twice_in_a_yaml_file_is_refused(cfg, tmp_path):
    text = to_yaml(cfg).replace(
        "\nenv_vars:\n", "\nenv_vars:\n  NCCL_DEBUG: INFO\n  NCCL_DEBUG: WARN\n"
    )
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(
        ValueError, match=r"twice\.yaml is not valid YAML: key 'NCCL_DEBUG' appears"
    ):
        from_yaml(path)


# --------------------------------------------------------------------------- paths


@pytest.mark.parametrize(
    "given",
    [
        lambda tmp: tmp / "missing.yaml",  # a path object
        lambda tmp: str(tmp / "missing.yaml"),
        lambda tmp: str(tmp / "runs" / "config"),  # a separator, no suffix
        lambda tmp: "missing.yml",  # a suffix, no separator
    ],
)
def test_a_missing_file_says_so_and_names_it(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = given(tmp_path)
    with pytest.raises(FileNotFoundError, match=f"{os.fspath(source)!r} does not exist"):
        from_yaml(source)


def test_a_str_path_is_read_and_one_line_without_a_separator_is_yaml_text(cfg, tmp_path):
    path = tmp_path / "run.cfg"
    path.write_text(to_yaml(cfg))
    assert from_yaml(str(path)).model.num_layers == cfg.model.num_layers
    with pytest.raises(ConfigValueError, match=r"^model: expected a mapping of GPTModelProvider"):
        from_yaml("model: 3")


# --------------------------------------------------------------------------- env_vars


@pytest.mark.parametrize("source", [*SOURCES, "constructor"])
def test_a_non_integer_cuda_device_max_connections_is_refused_from_every_source(
    source, cfg, tmp_path
):
    problem = (
        "env_vars.CUDA_DEVICE_MAX_CONNECTIONS: expected an integer >= 1 and <= 32, got str 'abc'"
    )
    if source == "yaml":
        doc = to_dict(cfg)
        doc["env_vars"]["CUDA_DEVICE_MAX_CONNECTIONS"] = "abc"
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        call, prefix = (lambda: from_yaml(path)), f"{path}: "
    elif source == "override":
        call = lambda: apply_overrides(cfg, ["env_vars.CUDA_DEVICE_MAX_CONNECTIONS=abc"])  # noqa: E731
        prefix = ""
    elif source == "python":
        cfg.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] = "abc"
        world = recipe_spec(RECIPE).num_gpus
        call, prefix = (lambda: runtime_config_update(cfg, world, te="assume")), "ConfigContainer."
    else:
        env = {"CUDA_DEVICE_MAX_CONNECTIONS": "abc"}
        call, prefix = (lambda: ConfigContainer(model=cfg.model, env_vars=env)), "ConfigContainer."
    with pytest.raises(ConfigValueError) as info:
        call()
    assert str(info.value).startswith(prefix + problem)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in os.environ


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CUDA_DEVICE_MAX_CONNECTIONS", "abc"),
        ("CUDA_DEVICE_MAX_CONNECTIONS", "0"),
        ("CUDA_DEVICE_MAX_CONNECTIONS", 33),
        ("CUDA_DEVICE_MAX_CONNECTIONS", True),  # exported as "True"
        ("CUDA_DEVICE_MAX_CONNECTIONS", 8.0),  # exported as "8.0"
        ("CUDA_DEVICE_MAX_CONNECTIONS", " 8"),
        ("NVTE_FWD_LAYERNORM_SM_MARGIN", "-1"),
        ("NVTE_BWD_LAYERNORM_SM_MARGIN", "16 SMs"),
        ("NCCL_P2P_NET_CHUNKSIZE", "1"),
        ("NCCL_P2P_NET_CHUNKSIZE", "512K"),
    ],
)
def test_integer_env_vars_refuse_anything_but_an_integer_in_range(name, value):
    with pytest.raises(ConfigValueError, match=rf"^env_vars\.{name}: expected an integer >= "):
        check_env_vars({name: value}, owner="env_vars")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CUDA_DEVICE_MAX_CONNECTIONS", 1),
        ("CUDA_DEVICE_MAX_CONNECTIONS", "32"),
        ("NVTE_FWD_LAYERNORM_SM_MARGIN", 0),
        ("NVTE_BWD_LAYERNORM_SM_MARGIN", "20"),
        ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
        ("NCCL_DEBUG", "abc"),  # not read as an integer
    ],
)
def test_integer_env_vars_take_an_int_or_its_text(name, value):
    assert check_env_vars({name: value}) == {name: str(value)}


# --------------------------------------------------------------------------- the check itself


class Color(enum.Enum):
    """An enum for the table below."""

    RED = 1
    BLUE = 2


_ANYTHING = object()


@pytest.mark.parametrize(
    ("annotation", "value", "expected"),
    [
        (bool, True, True),
        (int, 3, 3),
        (float, 2, 2.0),  # an int is a float; it becomes one
        (float, 0.5, 0.5),
        (str, "x", "x"),
        (int | None, None, None),
        (Literal["a", "b"], "b", "b"),
        (Literal[1, 2], 1, 1),
        (Color, Color.RED, Color.RED),
        (torch.dtype, torch.bfloat16, torch.bfloat16),
        (list[int], [1, 2], [1, 2]),
        (tuple[int, ...], [1, 2], (1, 2)),  # YAML has no tuple
        (tuple[int, str], (1, "a"), (1, "a")),
        (dict[str, int], {"a": 1}, {"a": 1}),
        (int | list[int], [1], [1]),
        (Callable[[int], int], abs, abs),
        (Any, _ANYTHING, _ANYTHING),
    ],
)
def test_what_an_annotation_admits(annotation, value, expected):
    out = check_value(value, annotation, "k")
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize(
    ("annotation", "value", "message"),
    [
        (bool, 1, "k: expected bool, got int 1"),
        (bool, "true", "k: expected bool, got str 'true'"),
        (int, True, "k: expected int, got bool True"),
        (int, 2.0, "k: expected int, got float 2.0"),
        (float, False, "k: expected float, got bool False"),
        (str, 3, "k: expected str, got int 3"),
        (int, None, "k: expected int, not null"),
        (int | None, "3", "k: expected int or None, got str '3'"),
        (Literal[1, 2], True, "k: expected one of [1, 2], got bool True"),
        (Color, "RED", "k: expected one of ['RED', 'BLUE'] (Color), got str 'RED'"),
        (torch.dtype, "bfloat16", "k: expected dtype, got str 'bfloat16'"),
        (list[int], [1, "2"], "k[1]: expected int, got str '2'"),
        (list[int] | None, [1, "2"], "k[1]: expected int, got str '2'"),
        (list[int], "12", "k: expected list[int], got str '12'"),
        (
            tuple[int, int],
            [1, 2, 3],
            "k: expected tuple[int, int] (2 items), got 3 items [1, 2, 3]",
        ),
        (dict[str, int], {"a": "1"}, "k.a: expected int, got str '1'"),
        (Callable, 3, "k: expected a function, got int 3"),
    ],
)
def test_what_an_annotation_refuses(annotation, value, message):
    with pytest.raises(ConfigValueError) as info:
        check_value(value, annotation, "k")
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("annotation", "text", "expected"),
    [
        (float, "1e-5", 1e-5),  # YAML 1.1 reads it as a str
        (torch.dtype, "bfloat16", torch.bfloat16),
        (torch.dtype | None, "bfloat16", torch.bfloat16),
        (Color, "BLUE", Color.BLUE),
        (str, "123", "123"),  # the text as written, not the int YAML reads
        (str | None, "null", None),
        (str | list[str], "[a, b]", ["a", "b"]),  # an exact match beats a reading of the text
        (Callable, "torch.nn.functional:gelu", torch.nn.functional.gelu),
    ],
)
def test_a_command_line_text_has_a_few_more_readings(annotation, text, expected):
    value = yaml.safe_load(text)
    assert check_value(value, annotation, "k", text=text) == expected
    if value is not None and not isinstance(expected, list):
        with pytest.raises(ConfigValueError):
            check_value(value, annotation, "k")  # a typed source gets no such reading


@dataclasses.dataclass
class _MegatronStyle:
    """Fields annotated the way megatron-core annotates some of its own."""

    count: int = None  # type: ignore[assignment]
    flag: bool = False
    hook: NotImported | None = None


def test_a_field_defaulting_to_none_takes_none_and_an_unresolved_annotation_is_not_checked():
    assert check_field(_MegatronStyle, "count", None, "s.count") is None
    with pytest.raises(ConfigValueError, match=r"^s\.count: expected int, got str 'x'$"):
        check_field(_MegatronStyle, "count", "x", "s.count")
    with pytest.raises(ConfigValueError, match=r"^s\.flag: expected bool, not null$"):
        check_field(_MegatronStyle, "flag", None, "s.flag")
    assert field_types(_MegatronStyle)["flag"] is bool
    assert field_types(_MegatronStyle)["hook"] is Any
    assert check_field(_MegatronStyle, "hook", _ANYTHING, "s.hook") is _ANYTHING


def _dataclasses_to_resolve():
    found = [ModelParallelConfig, DistributedDataParallelConfig, OptimizerConfig, TransformerConfig]
    for module in package_modules():
        found += [
            v
            for v in vars(module).values()
            if isinstance(v, type)
            and dataclasses.is_dataclass(v)
            and v.__module__ == module.__name__
        ]
    return found


def test_type_hints_equal_typing_get_type_hints_on_every_config_and_description():
    resolved = 0
    for cls in _dataclasses_to_resolve():
        try:
            expected = typing.get_type_hints(cls)
        except Exception as exc:
            with pytest.raises(type(exc)):
                type_hints(cls)
            continue
        got = type_hints(cls)
        assert got == expected, cls
        assert list(got) == list(expected), cls
        resolved += 1
    assert resolved >= 60


class _Shadowing:
    """A class attribute named like a type: get_type_hints looks in the module first."""

    Any: int = 0
    x: Any = 1
    y: list[Any] = dataclasses.field(default_factory=list)
    z: Any = 2


def test_type_hints_look_in_the_module_before_the_class_body():
    assert type_hints(_Shadowing) == typing.get_type_hints(_Shadowing)
    assert type_hints(_Shadowing)["x"] is Any
