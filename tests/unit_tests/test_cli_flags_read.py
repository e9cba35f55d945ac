"""Flags whose megatron-core field is read only under another setting (``cli.flags``'s one table of
them): given where the job lacks that setting, each is refused (exit 2) naming the flag as given,
what is off and the fix; given with the setting, it is planned and lands in the job description.
"""

from __future__ import annotations

import json

import pytest

from megatron.bridge.cli import EXIT_INVALID, EXIT_OK, EXIT_REFUSED, main

MLA = ("--multi-latent-attention",)
# DSA on the reference: megatron-core's DSAttention needs add_bias_linear=False, and without
# biases the reference's fused bias-GELU has no bias to fuse.
DSA = ("--experimental-attention-variant", "dsa", "--disable-bias-linear", "--no-bias-gelu-fusion")
DSV4 = ("--experimental-attention-variant", "dsv4_hybrid")
# A four-layer hybrid model without pipelining: its pattern has no stage separators.
HYBRID = ("--num-layers", "4", "--pp", "1", "--vpp", "1", "--hybrid-layer-pattern")
WINDOW = ("--window-size", "128,0")
OFFLOAD = ("--fine-grained-activation-offloading", "--offload-modules", "core_attn")
HSDP = ("--use-megatron-fsdp", "--num-distributed-optimizer-instances", "2")
# Experts without expert tensor parallelism (megatron-core's expert biases need ETP 1), eight
# layers so the job fits.
MOE = ("--num-moe-experts", "8", "--ep", "8", "--etp", "1", "--num-layers", "8")

# (the flag and its value, the setting that reads it, the words of the fix the refusal names,
# the field it sets: (a job-description path, the value there)).
FLAGS = [
    pytest.param(("--q-lora-rank", "64"), MLA, MLA, ("model", "q_lora_rank", 64)),
    pytest.param(("--kv-lora-rank", "64"), MLA, MLA, ("model", "kv_lora_rank", 64)),
    pytest.param(("--qk-head-dim", "64"), MLA, MLA, ("model", "qk_head_dim", 64)),
    pytest.param(("--qk-pos-emb-head-dim", "32"), MLA, MLA, ("model", "qk_pos_emb_head_dim", 32)),
    pytest.param(("--v-head-dim", "64"), MLA, MLA, ("model", "v_head_dim", 64)),
    pytest.param(("--dsa-indexer-n-heads", "8"), DSA, DSA[:2], ("model", "dsa_indexer_n_heads", 8)),
    pytest.param(
        ("--dsa-indexer-head-dim", "64"), DSA, DSA[:2], ("model", "dsa_indexer_head_dim", 64)
    ),
    pytest.param(("--dsa-indexer-topk", "64"), DSA, DSA[:2], ("model", "dsa_indexer_topk", 64)),
    pytest.param(("--o-lora-rank", "64"), DSV4, DSV4, ("model", "o_lora_rank", 64)),
    pytest.param(("--o-groups", "2"), DSV4, DSV4, ("model", "o_groups", 2)),
    pytest.param(("--csa-window-size", "64"), DSV4, DSV4, ("model", "csa_window_size", 64)),
    pytest.param(
        ("--csa-compress-ratios", "([0]*96)"),
        DSV4,
        DSV4,
        ("model", "csa_compress_ratios", [0] * 96),
    ),
    pytest.param(
        ("--mamba-state-dim", "64"),
        (*HYBRID, "M*M-"),
        HYBRID[-1:],
        ("model", "mamba_state_dim", 64),
    ),
    pytest.param(
        ("--mamba-head-dim", "32"), (*HYBRID, "M*M-"), HYBRID[-1:], ("model", "mamba_head_dim", 32)
    ),
    pytest.param(
        ("--mamba-num-groups", "4"),
        (*HYBRID, "M*M-"),
        HYBRID[-1:],
        ("model", "mamba_num_groups", 4),
    ),
    pytest.param(
        ("--mamba-num-heads", "16"),
        (*HYBRID, "M*M-"),
        HYBRID[-1:],
        ("model", "mamba_num_heads", 16),
    ),
    pytest.param(
        ("--window-attn-skip-freq", "2"), WINDOW, WINDOW[:1], ("model", "window_attn_skip_freq", 2)
    ),
    pytest.param(
        ("--offload-modules", "core_attn"),
        OFFLOAD[:1],
        OFFLOAD[:1],
        ("model", "offload_modules", ["core_attn"]),
    ),
    pytest.param(
        ("--min-offloaded-tensor-size", "10"),
        OFFLOAD,
        OFFLOAD[:1],
        ("model", "min_offloaded_tensor_size", 10),
    ),
    pytest.param(
        ("--activation-offload-fraction", "0.5"),
        OFFLOAD,
        OFFLOAD[:1],
        ("model", "activation_offload_fraction", 0.5),
    ),
    pytest.param(
        ("--fine-grained-offloading-max-inflight-offloads", "2"),
        OFFLOAD,
        OFFLOAD[:1],
        ("model", "fine_grained_offloading_max_inflight_offloads", 2),
    ),
    pytest.param(
        ("--outer-dp-sharding-strategy", "optim"),
        HSDP,
        HSDP[:2],
        ("outer_dp_sharding_strategy", "optim"),
    ),
    pytest.param(
        ("--use-fused-weighted-squared-relu",),
        (*MOE, "--squared-relu"),
        ("--num-moe-experts",),
        ("model", "use_fused_weighted_squared_relu", True),
    ),
]

FLAGS = [pytest.param(*case.values, id=case.values[0][0]) for case in FLAGS]


def _explain(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["explain", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


@pytest.mark.parametrize(("flag", "setting", "fix", "field"), FLAGS)
def test_a_flag_alone_is_refused_naming_it_and_the_fix(capsys, flag, setting, fix, field):
    code, _, err = _explain(capsys, *flag)
    assert code == EXIT_INVALID, err
    assert f"{flag[0]} would have no effect" in err
    assert all(word in err for word in fix) and f"otherwise drop {flag[0]}." in err


@pytest.mark.parametrize(("flag", "setting", "fix", "field"), FLAGS)
def test_a_flag_with_its_setting_is_planned_and_lands(capsys, flag, setting, fix, field):
    code, out, err = _explain(capsys, *setting, *flag, "--json")
    # Planned, not refused as input: a job that does not fit in memory is exit 1 for that alone.
    assert code == EXIT_OK or (code == EXIT_REFUSED and "does not fit" in out), out + err
    *path, value = field
    where = json.loads(out)["overlap"]["job"]
    for key in path[:-1]:
        where = where[key]
    assert where[path[-1]] == value


# Part of the setting: the flag is still not read, and the refusal names what is missing.
@pytest.mark.parametrize(
    ("argv", "off", "fix"),
    [
        pytest.param(
            ("--num-moe-experts", "8", "--ep", "8", "--use-fused-weighted-squared-relu"),
            "squared-ReLU",
            "--squared-relu",
            id="experts-without-squared-relu",
        ),
        pytest.param(
            ("--squared-relu", "--use-fused-weighted-squared-relu"),
            "no routed experts",
            "--num-moe-experts",
            id="squared-relu-without-experts",
        ),
        pytest.param(
            (*HYBRID, "*-*-", "--mamba-state-dim", "64"),
            "no Mamba layers",
            "--hybrid-layer-pattern",
            id="hybrid-pattern-without-mamba",
        ),
        pytest.param(
            (*DSA, *HYBRID, "M*M-", "--dsa-indexer-topk", "64"),
            "no DSA indexer",
            "'D' layers",
            id="dsa-variant-on-a-hybrid-pattern-without-dsa-layers",
        ),
        pytest.param(
            ("--use-megatron-fsdp", "--outer-dp-sharding-strategy", "optim"),
            "not HSDP",
            "--num-distributed-optimizer-instances",
            id="fsdp-with-one-instance",
        ),
        pytest.param(
            ("--num-distributed-optimizer-instances", "2", "--outer-dp-sharding-strategy", "optim"),
            "not HSDP",
            "--use-megatron-fsdp",
            id="instances-without-fsdp",
        ),
    ],
)
def test_a_flag_with_part_of_its_setting_is_refused(capsys, argv, off, fix):
    code, _, err = _explain(capsys, *argv)
    assert code == EXIT_INVALID, err
    assert "would have no effect" in err and off in err and fix in err


def test_a_hybrid_pattern_with_dsa_layers_reads_the_indexer(capsys):
    code, out, err = _explain(capsys, *HYBRID, "MDMD", "--dsa-indexer-topk", "64", "--json")
    assert code == EXIT_OK or (code == EXIT_REFUSED and "does not fit" in out), out + err
    assert json.loads(out)["overlap"]["job"]["model"]["dsa_indexer_topk"] == 64


@pytest.mark.parametrize("flag", ["--no-moe-grouped-gemm", "--no-mtp-use-repeated-layer"])
def test_a_switch_turned_off_is_named_as_given(capsys, flag):
    code, _, err = _explain(capsys, flag)
    assert code == EXIT_INVALID
    assert f"{flag} would have no effect" in err and f"otherwise drop {flag}." in err


def test_search_refuses_an_unread_flag_too(capsys):
    code = main(["search", "--mamba-state-dim", "64"])
    err = capsys.readouterr().err
    assert code == EXIT_INVALID
    assert "--mamba-state-dim would have no effect" in err and "--hybrid-layer-pattern" in err
