"""The model flags of ``bridge-overlap explain``, spelled as Megatron-LM's ``arguments.py``.

Each flag changes one field of the job description; Megatron-LM's list form of
``--moe-layer-freq`` is read without ``eval``; a bad value exits 2 naming the flag.
"""

from __future__ import annotations

import json

import pytest

from megatron.bridge.cli import EXIT_REFUSED, build_parser, main
from megatron.bridge.cli.flags import flags_spec

MOE = ("--num-experts", "8", "--ep", "8")
"""Routed experts on the reference model: the MoE flags are read only with experts."""
MLA = ("--multi-latent-attention",)
"""The MLA ranks and head dims are read only with multi-latent attention."""
MAMBA = ("--hybrid-layer-pattern", "M*M-")
"""The Mamba flags are read only by a hybrid pattern's Mamba layers."""


def _spec(*argv: str):
    return flags_spec(build_parser().parse_args(["explain", *argv]))


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--kv-channels", "128"], "kv_channels", 128),
        (["--multi-latent-attention"], "multi_latent_attention", True),
        ([*MLA, "--q-lora-rank", "1536"], "q_lora_rank", 1536),
        ([*MLA, "--kv-lora-rank", "256"], "kv_lora_rank", 256),
        ([*MLA, "--qk-head-dim", "192"], "qk_head_dim", 192),
        ([*MLA, "--qk-pos-emb-head-dim", "32"], "qk_pos_emb_head_dim", 32),
        ([*MLA, "--v-head-dim", "96"], "v_head_dim", 96),
        (["--window-size", "128,0"], "window_size", (128, 0)),
        (["--window-size", "(4096,0)"], "window_size", (4096, 0)),
        (["--window-size", "128,0", "--window-attn-skip-freq", "2"], "window_attn_skip_freq", 2),
        (
            ["--window-size", "128,0", "--window-attn-skip-freq", "[1,0]*48"],
            "window_attn_skip_freq",
            (1, 0) * 48,
        ),
        ([*MOE, "--moe-router-topk", "8"], "moe_router_topk", 8),
        ([*MOE, "--moe-ffn-hidden-size", "2048"], "moe_ffn_hidden_size", 2048),
        (
            [*MOE, "--moe-shared-expert-intermediate-size", "2048"],
            "moe_shared_expert_intermediate_size",
            2048,
        ),
        ([*MOE, "--moe-latent-size", "1024"], "moe_latent_size", 1024),
        (["--mtp-num-layers", "1"], "mtp_num_layers", 1),
        (["--mtp-num-layers", "0"], "mtp_num_layers", 0),
        (["--hybrid-layer-pattern", "M*M-"], "hybrid_layer_pattern", "M*M-"),
        (["--hybrid-override-pattern", "M-M*"], "hybrid_layer_pattern", "M-M*"),
        ([*MAMBA, "--mamba-state-dim", "64"], "mamba_state_dim", 64),
        ([*MAMBA, "--mamba-head-dim", "32"], "mamba_head_dim", 32),
        ([*MAMBA, "--mamba-num-groups", "4"], "mamba_num_groups", 4),
        ([*MAMBA, "--mamba-num-heads", "96"], "mamba_num_heads", 96),
        (["--num-experts", "8", "--ep", "8"], "num_moe_experts", 8),
    ],
)
def test_each_flag_changes_its_field(argv, field, value):
    assert getattr(_spec(*argv).job.model, field) == value


@pytest.mark.parametrize(
    ("expression", "pattern"),
    [
        ("4", 4),
        ("([0]*3+[1]*93)", (0,) * 3 + (1,) * 93),
        ("([1]*3+[0]*5)*12", ((1,) * 3 + (0,) * 5) * 12),
        ("[0, 1] * 48", (0, 1) * 48),
        ("2*[0]+[1]*94", (0, 0) + (1,) * 94),
    ],
)
def test_moe_layer_freq_takes_megatron_lm_forms(expression, pattern):
    model = _spec("--num-experts", "8", "--ep", "8", "--moe-layer-freq", expression).job.model
    assert model.moe_layer_freq == pattern


def test_deepseek_v3_as_flags_gives_the_published_flops(capsys):
    # docs/performance-summary.md 26.08, DGX-GB300 DeepSeekV3: 1635 TFLOP/s/GPU, 6288 tok/s/GPU.
    argv = ["explain", "--tp", "1", "--pp", "1", "--vpp", "1", "--ep", "8", "--world-size", "64"]
    argv += ["--num-layers", "61", "--hidden-size", "7168", "--num-attention-heads", "128"]
    argv += ["--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank", "512"]
    argv += ["--num-experts", "256", "--moe-router-topk", "8", "--moe-ffn-hidden-size", "2048"]
    argv += ["--moe-shared-expert-intermediate-size", "2048", "--ffn-hidden-size", "18432"]
    argv += ["--moe-layer-freq", "([0]*3+[1]*58)", "--mtp-num-layers", "1", "--swiglu"]
    argv += ["--vocab-size", "129280", "--seq-length", "4096", "--json"]
    # 671B parameters at TP1 PP1 on H100s: planned and estimated, then refused as not fitting.
    assert main(argv) == EXIT_REFUSED
    flops = json.loads(capsys.readouterr().out)["estimate"]["model_flops_per_token"]
    assert flops == pytest.approx(1635e12 / 6288, rel=0.01)
