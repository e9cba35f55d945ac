"""``bridge-overlap explain``: an activation flag alone plans (issue 41 item 14), a job that does
not fit in memory is refused whether or not ``--strict`` is given, with a warning when the
headroom is under the allocator's usual fragmentation (item 16), and the reference job is the
seed's, fitting an H100, with its batch sizes on the layout line (item 15)."""

from __future__ import annotations

import json

import pytest

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, EXIT_REFUSED, REFERENCE, main
from megatron.bridge.training.estimate.memory import MemoryEstimate
from megatron.bridge.training.estimate.memory.report import FRAGMENTATION_FRACTION


def _explain_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["explain", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


# --- item 14: an activation flag alone -------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "activation"),
    [
        (["--squared-relu"], "squared_relu"),
        (["--recipe", "llama3_8b", "--squared-relu"], "squared_relu"),
    ],
)
def test_an_unfusable_activation_flag_alone_takes_megatron_cores_fusion_default(
    capsys, argv, activation
):
    code, doc = _explain_json(capsys, *argv)
    assert code == EXIT_OK, doc
    assert doc["overlap"]["job"]["model"]["activation_func"] == activation
    # megatron-core's TransformerConfig.bias_activation_fusion default, said, not done silently.
    assert doc["overlap"]["job"]["model"]["bias_activation_fusion"] is False
    assert any(
        w.startswith("--squared-relu: bias_activation_fusion=False") for w in doc["warnings"]
    )


@pytest.mark.parametrize("flag", ["--swiglu", "--quick-geglu"])
def test_a_fusable_activation_flag_keeps_the_jobs_fusion(capsys, flag):
    # PP 8: a gated MLP's weights do not fit the reference's PP 4 on an H100.
    code, doc = _explain_json(capsys, flag, "--pp", "8")
    assert code == EXIT_OK, doc
    assert doc["overlap"]["job"]["model"]["bias_activation_fusion"] is True
    assert not any("bias_activation_fusion" in w for w in doc["warnings"])


def test_asking_for_the_fusion_with_an_unfusable_activation_is_still_refused():
    # In Python the fusion and the activation are both written: megatron-core's refusal stands.
    spec = REFERENCE.changed(
        **{"model.activation_func": "squared_relu", "model.bias_activation_fusion": True}
    )
    with pytest.raises(ValueError, match="bias_activation_fusion=True fuses gelu"):
        spec.plan()


# --- item 15: the reference job is the seed's and says its batch sizes ------------------------


def test_reference_job_has_the_seeds_precision_knobs_and_fits_an_h100(capsys):
    code, doc = _explain_json(capsys)
    assert code == EXIT_OK
    job = doc["overlap"]["job"]
    assert job["grad_reduce_in_fp32"] is False
    assert job["fp8_param_gather"] is False
    assert doc["memory"]["fits"] is True
    assert doc["memory"]["error"] is None


def test_layout_line_prints_micro_and_global_batch(capsys):
    assert main(["explain"]) == EXIT_OK
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith("Layout: 128 x H100")
    # GBS defaults to micro-batch x DP x PP: 1 x 8 x 4.
    assert head.endswith("mbs 1 gbs 32")
    assert main(["explain", "--global-batch-size", "256", "--pp", "8"]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[0].endswith("mbs 1 gbs 256")


# --- item 16: not fitting is refused; thin headroom warns -------------------------------------


@pytest.mark.parametrize("strict", [False, True])
def test_a_job_that_does_not_fit_exits_one_with_or_without_strict(capsys, strict):
    argv = ["explain", "--grad-reduce-in-fp32", *(["--strict"] if strict else [])]
    assert main(argv) == EXIT_REFUSED
    captured = capsys.readouterr()
    assert "the job does not fit in H100 memory" in captured.err
    assert "refused" in captured.err
    if not strict:
        # The plan, with the ERROR line and its fixes, is printed before the refusal.
        assert "ERROR: the job does not fit in H100 memory" in captured.out


def test_a_job_that_does_not_fit_exits_one_with_its_json_document(capsys):
    code, doc = _explain_json(capsys, "--grad-reduce-in-fp32")
    assert code == EXIT_REFUSED
    assert doc["memory"]["fits"] is False
    assert doc["memory"]["error"].startswith("the job does not fit")


def test_thin_headroom_warns_about_fragmentation(capsys):
    # The reference fits with 2.8 GiB of 79.6 GiB: under the allocator's usual fragmentation.
    code, doc = _explain_json(capsys)
    assert code == EXIT_OK
    memory = doc["memory"]
    assert 0 <= memory["headroom_bytes"] < FRAGMENTATION_FRACTION * memory["capacity_bytes"]
    assert any("fragmentation" in w for w in doc["warnings"])


def test_ample_headroom_does_not_warn(capsys):
    code, doc = _explain_json(capsys, "--pp", "8")
    assert code == EXIT_OK
    memory = doc["memory"]
    assert memory["headroom_bytes"] >= FRAGMENTATION_FRACTION * memory["capacity_bytes"]
    assert not any("fragmentation" in w for w in doc["warnings"])


@pytest.mark.parametrize(
    ("headroom_fraction", "warns"),
    [(-0.05, False), (0.0, True), (FRAGMENTATION_FRACTION / 2, True), (0.2, False)],
)
def test_memory_estimate_warning_is_for_a_fitting_job_with_thin_headroom(headroom_fraction, warns):
    capacity = 80 * 2**30
    headroom = int(capacity * headroom_fraction)
    estimate = MemoryEstimate(
        parts=(("parameters", capacity - headroom),),
        total_bytes=capacity - headroom,
        capacity_bytes=capacity,
        headroom_bytes=headroom,
        fits=headroom >= 0,
        gpu="h100",
    )
    assert (estimate.warning is not None) is warns
    # A job that does not fit has an error instead, never both.
    assert (estimate.error is not None) is (headroom < 0)


def test_invalid_input_still_exits_two(capsys):
    # The refusal for memory comes after planning: an invalid flag keeps exit 2.
    assert main(["explain", "--pp", "0"]) == EXIT_INVALID
    capsys.readouterr()
