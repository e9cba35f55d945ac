"""megatron_core_rejection (megatron/bridge/utils/megatron_core_errors.py) on megatron-core's own errors."""

from __future__ import annotations

import pytest
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.cli import main
from megatron.bridge.utils.megatron_core_errors import megatron_core_rejection

SMALL = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4}


def _raised(function, **kwargs) -> BaseException:
    with pytest.raises(Exception) as info:
        function(**kwargs)
    return info.value


def test_a_validation_error_of_megatron_core_is_quoted_with_its_type_and_module():
    exc = _raised(TransformerConfig, **SMALL, fp4_param=True)
    assert megatron_core_rejection(exc) == (
        "fp4_param must be used together with fp4 mode. "
        "(ValueError in megatron.core.transformer.transformer_config)"
    )


def test_a_bare_assert_of_megatron_core_is_quoted_by_its_source_line():
    # megatron-core asserts a non-empty offload_modules without a message.
    exc = _raised(TransformerConfig, **SMALL, fine_grained_activation_offloading=True)
    assert isinstance(exc, AssertionError) and str(exc) == ""
    assert megatron_core_rejection(exc) == (
        "failed check `assert self.offload_modules is not None and len(self.offload_modules) > 0` "
        "(AssertionError in megatron.core.transformer.transformer_config)"
    )


def test_a_zero_size_dividing_in_megatron_core_is_a_rejection():
    # megatron-core's post-init scales the output init by the layer count.
    exc = _raised(TransformerConfig, **{**SMALL, "num_layers": 0})
    assert isinstance(exc, ZeroDivisionError)
    assert megatron_core_rejection(exc) == (
        "float division by zero (ZeroDivisionError in megatron.core.utils)"
    )


def test_the_cli_refuses_a_size_megatron_core_would_divide_by_before_megatron_core_runs(capsys):
    # megatron-core raised ZeroDivisionError in megatron.core.utils on this override; the size's
    # lower bound now refuses it first, naming the field (how megatron-core's own errors are
    # reported is what the cases below hold).
    assert main(["explain", "--recipe", "gpt3_175b", "model.num_layers=0"]) == 2
    err = capsys.readouterr().err
    assert "model.num_layers must be >= 1, got 0" in err
    assert "ZeroDivisionError" not in err and "Traceback" not in err


def _ours() -> None:
    raise ValueError("raised by our own code")


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(_raised(_ours), id="our-valueerror"),
        pytest.param(ValueError("never raised"), id="no-traceback"),
        pytest.param(_raised(TransformerConfig, **SMALL, no_such_field=1), id="our-call-typeerror"),
    ],
)
def test_errors_not_raised_by_megatron_core_are_not_rejections(exc):
    assert megatron_core_rejection(exc) is None
