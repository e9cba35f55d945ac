"""A size below its bound in ``validators.LIMITS`` is refused on every route to a plan, as the
``--hidden-size`` flag refuses it: ``KEY=VALUE`` overrides (exit 2), ``RecipeSpec.changed``, a
``ConfigContainer`` edited in Python then ``runtime_config_update``, and a YAML file. Every route
meets the one check, ``job.check_limits`` (through ``validators.check_limit``); a negative width
was planned as "-0.0 GiB" of parameters and negative FLOPs before.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from megatron.bridge.cli import EXIT_INVALID, REFERENCE, main
from megatron.bridge.recipes import get_recipe, recipe_spec
from megatron.bridge.training.config import ConfigContainer, runtime_config_update
from megatron.bridge.training.job import JobDescription, check_limits
from megatron.bridge.training.resolve import resolve_config
from megatron.bridge.training.validators import LIMITS, LimitError

RECIPE = "llama3_8b"

#: (model field, a value below its bound) the routes below are tried with.
BELOW = [("hidden_size", -5), ("hidden_size", 0), ("num_layers", 0), ("ffn_hidden_size", -1)]

_JOB_FIELDS = {f.name for f in dataclasses.fields(JobDescription)}
#: Every bound of LIMITS a job description field has (what check_limits reads).
JOB_BOUNDS = [name for name in LIMITS if name.startswith("model.") or name in _JOB_FIELDS]


def _refusal(field: str, value: int) -> str:
    minimum = LIMITS[f"model.{field}"].minimum
    return rf"model\.{field} must be >= {minimum}, got {value}: below its bound {minimum}"


@pytest.mark.parametrize(("field", "value"), BELOW)
def test_key_value_override_below_its_bound_exits_2_naming_field_value_and_bound(
    field, value, capsys
):
    code = main(["explain", "--recipe", RECIPE, f"model.{field}={value}"])
    err = capsys.readouterr().err
    assert code == EXIT_INVALID
    assert "Traceback" not in err and "GiB" not in err
    assert re.search(_refusal(field, value), err), err


def test_the_flag_and_the_override_refuse_the_same_width(capsys):
    assert main(["explain", "--recipe", RECIPE, "--hidden-size", "-5"]) == EXIT_INVALID
    assert main(["explain", "--recipe", RECIPE, "model.hidden_size=-5"]) == EXIT_INVALID
    capsys.readouterr()


@pytest.mark.parametrize(("field", "value"), BELOW)
def test_recipe_spec_changed_below_its_bound_is_refused_before_planning(field, value):
    spec = recipe_spec(RECIPE).changed(**{f"model.{field}": value})
    with pytest.raises(LimitError, match=_refusal(field, value)):
        spec.plan()


@pytest.mark.parametrize(("field", "value"), BELOW)
def test_a_container_edited_in_python_is_refused_by_runtime_config_update(field, value):
    cfg = get_recipe(RECIPE)
    setattr(cfg.model, field, value)
    with pytest.raises(LimitError, match=_refusal(field, value)):
        runtime_config_update(cfg)


@pytest.mark.parametrize(("field", "value"), [("hidden_size", -5), ("num_layers", 0)])
def test_a_yaml_file_below_its_bound_is_refused_when_planned(field, value, tmp_path):
    get_recipe(RECIPE).to_yaml(tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    # The model section is the first to hold the field at the second indent.
    edited, count = re.subn(rf"(\n  {field}: )\d+", rf"\g<1>{value}", text, count=1)
    assert count == 1
    (tmp_path / "bad.yaml").write_text(edited)
    cfg = ConfigContainer.from_yaml(tmp_path / "bad.yaml")
    assert getattr(cfg.model, field) == value
    with pytest.raises(LimitError, match=_refusal(field, value)):
        resolve_config(cfg, world_size=recipe_spec(RECIPE).num_gpus, te="assume")


@pytest.mark.parametrize("name", JOB_BOUNDS)
def test_every_job_bound_refuses_one_below_its_minimum_and_takes_the_minimum(name):
    limit = LIMITS[name]
    # A window is a (before, after) pair; its entries are bounded.
    below = (limit.minimum - 1, 0) if name == "model.window_size" else limit.minimum - 1
    with pytest.raises(LimitError) as refused:
        check_limits(REFERENCE.job.replace(**{name: below}))
    message = str(refused.value)
    assert message.startswith(f"{name} must be >= {limit.minimum}, got ")
    assert str(limit.minimum - 1) in message and limit.why in message
    check_limits(REFERENCE.job.replace(**{name: limit.minimum}))
