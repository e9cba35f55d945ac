"""One plan, whoever asks: the CLI's flags, ``explain --recipe``, the build-time update and the plugin.

``bridge-overlap explain`` (flags or a recipe), ``runtime_config_update`` at model-build time and
``PerfEnvPlugin.from_config`` at launch all resolve a layout through the same rules; these tests
check that they reach the same plan and that the environment the plugin exports is the one the
build-time check expects. Real megatron-core configs throughout: only Transformer Engine's
availability (it cannot be imported on a CPU-only machine) and the visible GPU (there is none
here) are patched, each where a test says so.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from typing import get_args
from unittest import mock

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.cli import EXIT_OK, main
from megatron.bridge.models import GPTModelProvider
from megatron.bridge.recipes import RECIPES, get_recipe, recipe_spec
from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
from megatron.bridge.training import comm_overlap, hardware, resolve
from megatron.bridge.training.comm_overlap import (
    CommOverlapConfig,
    OverlapRefusedError,
    userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048,
)
from megatron.bridge.training.config import ConfigContainer
from megatron.bridge.training.launch_env import MoeFlexDispatcherBackend
from megatron.bridge.training.parallel_layout import check_parallel_layout
from megatron.bridge.training.resolve import (
    check_launch_environment,
    resolve_config,
    runtime_config_update,
)
from megatron.bridge.training.userbuffers import preset_names_of, published_name_for
from tests.unit_tests.conftest import BUILDABLE_RECIPES, bf16_container

RESOLVE_LOGGER = "megatron.bridge.training.resolve"
H100_PRESET = "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"


@pytest.fixture
def te_available():
    # Transformer Engine cannot be imported on a CPU-only machine; the job's cluster has it.
    with mock.patch.object(comm_overlap, "HAVE_TE", True):
        yield


def _explain(capsys, *argv: str) -> dict:
    code = main(["explain", "--json", *argv])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    return json.loads(captured.out)


def _round_trip(value):
    return json.loads(json.dumps(value))


def _published(name: str):
    """The recipe module's SPEC: its published run (num_gpus, gpu)."""
    return importlib.import_module(RECIPES[name].partition(":")[0]).SPEC


def _container(
    *,
    tp: int = 1,
    pp: int = 1,
    vpp: int | None = None,
    cp: int = 1,
    request: CommOverlapConfig | None = None,
    gpu: str | None = "h100",
    num_layers: int = 8,
    **model_fields,
) -> ConfigContainer:
    """A real ConfigContainer for a small GPT model in the given layout (bf16, dist. optimizer)."""
    model = GPTModelProvider(
        num_layers=num_layers,
        hidden_size=128,
        num_attention_heads=8,
        seq_length=512,
        vocab_size=1000,
    )
    # Parallel sizes after construction, as recipes write them.
    model.tensor_model_parallel_size = tp
    model.pipeline_model_parallel_size = pp
    model.virtual_pipeline_model_parallel_size = vpp
    model.context_parallel_size = cp
    model.sequence_parallel = tp > 1
    return bf16_container(model, comm_overlap=request, gpu=gpu, **model_fields)


def _moe_fields(*, ep: int, dispatcher: str = "alltoall", **extra) -> dict:
    return {
        "num_moe_experts": 8,
        "expert_model_parallel_size": ep,
        "expert_tensor_parallel_size": 1,
        "moe_token_dispatcher_type": dispatcher,
        "add_bias_linear": False,
        **extra,
    }


# ----------------------------------------------------------------- 1. flags = recipe = build time


def _flags_for_recipe(name: str) -> list[str]:
    """The CLI flags that describe recipe ``name``'s published layout, read from the recipe."""
    cfg = get_recipe(name)
    m = cfg.model
    precision = _published(name).precision
    argv = [
        "--tp",
        str(m.tensor_model_parallel_size),
        "--pp",
        str(m.pipeline_model_parallel_size),
        "--vpp",
        str(m.virtual_pipeline_model_parallel_size or 1),
        "--cp",
        str(m.context_parallel_size),
        "--world-size",
        str(_published(name).num_gpus),
        "--gpu",
        cfg.gpu,
        "--precision",
        precision,
        "--seq-length",
        str(m.seq_length),
        "--micro-batch-size",
        str(cfg.train.micro_batch_size),
        "--global-batch-size",
        str(cfg.train.global_batch_size),
        "--hidden-size",
        str(m.hidden_size),
        "--num-layers",
        str(m.num_layers),
        "--num-attention-heads",
        str(m.num_attention_heads),
        "--ffn-hidden-size",
        str(m.ffn_hidden_size),
        "--vocab-size",
        str(m.vocab_size),
        "--swiglu" if m.gated_linear_unit else "--no-swiglu",
        "--normalization",
        m.normalization,
        "--position-embedding-type",
        m.position_embedding_type,
    ]
    if not m.add_bias_linear:
        argv.append("--disable-bias-linear")
    if not m.share_embeddings_and_output_weights:
        argv.append("--untie-embeddings-and-output-weights")
    if m.num_query_groups is not None:
        argv += ["--num-query-groups", str(m.num_query_groups)]
    if m.account_for_embedding_in_pipeline_split:
        argv.append("--embedding-in-pipeline-split")
    if m.account_for_loss_in_pipeline_split:
        argv.append("--loss-in-pipeline-split")
    fp32 = cfg.mixed_precision.grad_reduce_in_fp32
    argv.append("--grad-reduce-in-fp32" if fp32 else "--no-grad-reduce-in-fp32")
    if m.cpu_offloading:
        argv += [
            "--cpu-offloading",
            "--cpu-offloading-num-layers",
            str(m.cpu_offloading_num_layers),
        ]
    preset = cfg.comm_overlap.tp_comm_overlap_cfg
    preset_name = None
    if preset is not None:
        preset_name = published_name_for(
            preset_names_of(preset),
            gpu=cfg.gpu,
            precision=precision,
            hidden_size=m.hidden_size,
            tp_size=m.tensor_model_parallel_size,
        )
        assert preset_name is not None, f"recipe {name} carries an unpublished preset"
    # A preset the recipe chose automatically is the flags' automatic choice too (the plan
    # labels it so); a named one is named.
    automatic = cfg.comm_overlap.preset_chosen_by is not None
    argv += ["--preset", "auto" if automatic else (preset_name or "none")]
    return argv


# The dense recipes. The MoE and hybrid ones: tests/unit_tests/recipes/test_published_rows.py
# holds their flags route and test_recipe_specs.py their build-time route (in BF16: megatron-core
# builds an MoE model in FP8 only with Transformer Engine >= 1.7).
@pytest.mark.parametrize("name", sorted(n for n in RECIPES if not recipe_spec(n).job.model.moe))
def test_flags_recipe_and_build_time_reach_the_same_plan(name, capsys):
    # (a) the published layout as plain flags: flags that cannot express a recipe setting
    # make this fail (or differ) rather than being papered over here.
    code = main(["explain", "--json", *_flags_for_recipe(name)])
    flags_out = capsys.readouterr()
    # (b) the recipe by name.
    from_recipe = _explain(capsys, "--recipe", name)["overlap"]
    # (c) the recipe resolved at model-build time, on the published GPU count, with TE assumed
    # present as the CLI assumes it (the public switch, not a patch: a machine with TE
    # installed would otherwise add its version to the job description).
    cfg = get_recipe(name)
    plan = runtime_config_update(cfg, world_size=_published(name).num_gpus, te="assume")
    at_build = _round_trip(plan.to_dict())

    assert from_recipe == at_build
    assert code == EXIT_OK, f"the flags for {name} were refused: {flags_out.err}"
    assert json.loads(flags_out.out)["overlap"] == at_build


# ----------------------------------------------------------------- 2. plugin env = build-time check

SIZES = st.sampled_from([1, 2, 4])


@st.composite
def jobs(draw):
    """A valid layout, a GPU, an optional MoE part and a TP / EP overlap request."""
    tp, pp, cp, dp = draw(SIZES), draw(SIZES), draw(st.sampled_from([1, 2])), draw(SIZES)
    world = tp * pp * cp * dp
    moe = {}
    ep_overlap = None
    if draw(st.booleans()):
        ep_overlap = draw(st.sampled_from([None, False, True]))
        etp = draw(st.sampled_from([None, 1]))
        grid = (tp if etp is None else etp) * pp
        # EP all-to-all overlap as megatron-core allows it: EP > 1, alltoall or flex dispatch,
        # an interleaved pipeline when PP > 1 (a request outside that is a ValueError, tested
        # elsewhere).
        eps = [e for e in (1, 2, 4, 8) if world % (grid * e) == 0 and (e > 1 or not ep_overlap)]
        assume(eps)
        ep = draw(st.sampled_from(eps))
        dispatchers = ["alltoall", "flex"] if ep_overlap else ["allgather", "alltoall", "flex"]
        dispatcher = draw(st.sampled_from(dispatchers))
        moe = {
            "num_moe_experts": 8,
            "expert_model_parallel_size": ep,
            "expert_tensor_parallel_size": etp,
            "moe_token_dispatcher_type": dispatcher,
            "add_bias_linear": False,
        }
        if dispatcher == "flex":
            moe["moe_flex_dispatcher_backend"] = draw(
                st.sampled_from(get_args(MoeFlexDispatcherBackend))
            )
    if pp == 1:
        vpp = None
    elif ep_overlap:
        vpp = 2
    else:
        vpp = draw(st.sampled_from([None, 2]))
    num_layers = pp * (vpp or 1) * draw(st.sampled_from([1, 2]))
    try:
        check_parallel_layout(
            world_size=world,
            tp_size=tp,
            pp_size=pp,
            vpp_size=vpp,
            cp_size=cp,
            ep_size=moe.get("expert_model_parallel_size", 1),
            etp_size=moe.get("expert_tensor_parallel_size"),
            sequence_parallel=tp > 1,
            num_layers=num_layers,
            num_attention_heads=8,
            num_moe_experts=moe.get("num_moe_experts"),
            seq_length=512,
        )
    except ValueError:
        assume(False)
    return {
        "gpu": draw(st.sampled_from(sorted(hardware.GPUS))),
        "world": world,
        "layout": {"tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "num_layers": num_layers},
        "moe": moe,
        "request": CommOverlapConfig(
            tp_comm_overlap=draw(st.booleans()), overlap_moe_expert_parallel_comm=ep_overlap
        ),
    }


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@settings(max_examples=60)
@given(job=jobs())
def test_plugin_environment_passes_the_build_time_check(job):
    cfg = _container(**job["layout"], request=job["request"], gpu=job["gpu"], **job["moe"])
    world = job["world"]
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=world)
    env = plugin.launch_env_plan().env
    records = _Records()
    logger = logging.getLogger(RESOLVE_LOGGER)
    logger.addHandler(records)
    sm100 = hardware.gpu_spec(job["gpu"]).sm100_or_newer
    try:
        # TE: absent on this CPU machine, present on the cluster. The visible GPU: none here;
        # the job runs on cfg.gpu, so the build-time check sees that generation.
        with (
            mock.patch.object(comm_overlap, "HAVE_TE", True),
            mock.patch.object(resolve, "gpu_sm100_or_newer", return_value=sm100),
            mock.patch.dict(os.environ, env),
        ):
            runtime_config_update(cfg, world_size=world)
            problems = check_launch_environment(cfg, resolve_config(cfg, world_size=world))
    finally:
        logger.removeHandler(records)
    assert problems == []
    assert not [m for m in records.messages if "launch environment" in m], records.messages
    # The plugin and the build agree on what they read from the plan.
    assert plugin.a2a_overlap is bool(cfg.overlap_plan.value("overlap_moe_expert_parallel_comm"))


# ----------------------------------------------------------------- 3. TP overlap off: no preset


def test_no_tp_overlap_is_valid_under_strict_and_names_no_preset(capsys):
    # The reference layout at PP 8: --strict also refuses a layout that does not fit in memory,
    # and the reference's PP 4 does not fit in an H100's.
    fits = ["--pp", "8"]
    assert main(["explain", "--no-tp-comm-overlap", "--strict", *fits]) == EXIT_OK
    assert "Userbuffers preset: none" in capsys.readouterr().out
    assert main(["explain", "--no-tp-comm-overlap", "--strict", "--json", *fits]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["preset"]["name"] is None
    values = {d["knob"]: d["value"] for d in doc["overlap"]["decisions"]}
    assert values["tp_comm_overlap"] is False and values["tp_comm_overlap_cfg"] is None


@pytest.mark.parametrize("name", BUILDABLE_RECIPES)
def test_recipe_without_tp_overlap_carries_no_preset(name, capsys):
    cfg = get_recipe(name, tp_comm_overlap=False)
    assert cfg.comm_overlap.tp_comm_overlap is False
    assert cfg.comm_overlap.tp_comm_overlap_cfg is None
    doc = _explain(capsys, "--recipe", name, "--no-tp-comm-overlap", "--strict")
    assert doc["preset"]["name"] is None
    assert doc["overlap"]["preset_names"] == []


# ----------------------------------------------------------------- 4. flags set on the model


@pytest.mark.parametrize(
    ("knob", "cfg_kwargs"),
    [
        ("overlap_p2p_comm", {"tp": 2}),
        (
            "overlap_moe_expert_parallel_comm",
            {"tp": 2, **_moe_fields(ep=2)},
        ),
    ],
)
def test_flag_on_the_model_that_the_plan_replaces_is_reported(knob, cfg_kwargs, te_available):
    cfg = _container(request=CommOverlapConfig(tp_comm_overlap=False), **cfg_kwargs)
    setattr(cfg.model, knob, True)
    plan = resolve_config(cfg, world_size=8).plan
    assert plan.value(knob) is False
    assert [w for w in plan.warnings if f"cfg.model.{knob}=True" in w], plan.warnings

    strict = _container(request=CommOverlapConfig(tp_comm_overlap=False, strict=True), **cfg_kwargs)
    setattr(strict.model, knob, True)
    with pytest.raises(OverlapRefusedError, match=f"cfg.model.{knob}"):
        resolve_config(strict, world_size=8)


# ----------------------------------------------------------------- 5. TP overlap vs EP overlap


@pytest.mark.parametrize(
    # Hopper with EP overlap: 32, upstream's tuned value (qwen_vl/h100/qwen3_vl.py
    # qwen3_vl_235b_a22b_pretrain_256gpu_h100_bf16_config, TP2 with EP overlap).
    ("gpu", "noted", "connections"),
    [("h100", True, "32"), ("b200", False, "32")],
)
def test_tp_overlap_beside_ep_overlap_on_hopper_is_noted(gpu, noted, connections, te_available):
    cfg = _container(
        tp=2,
        request=CommOverlapConfig(tp_comm_overlap=True, overlap_moe_expert_parallel_comm=True),
        gpu=gpu,
        **_moe_fields(ep=2),
    )
    resolved = resolve_config(cfg, world_size=8)
    plan = resolved.plan
    assert plan.value("tp_comm_overlap") is True
    assert plan.value("overlap_moe_expert_parallel_comm") is True
    said = [n for n in plan.notes if "TP overlap keeps its order" in n]
    assert bool(said) is noted, plan.notes
    assert not [w for w in plan.warnings if "CUDA_DEVICE_MAX_CONNECTIONS" in w]
    if noted:
        assert "CUDA_DEVICE_MAX_CONNECTIONS is 32" in said[0] and "EP overlap" in said[0]
    assert resolved.launch_env().env["CUDA_DEVICE_MAX_CONNECTIONS"] == connections
    plugin = PerfEnvPlugin.from_config(cfg, num_gpus=8)
    assert plugin.launch_env_plan().env["CUDA_DEVICE_MAX_CONNECTIONS"] == connections


# ----------------------------------------------------------------- 6. a YAML userbuffers file


def _gpt3_shape(request: CommOverlapConfig) -> ConfigContainer:
    # GPT-3 175B's TP4 shape (hidden 12288, seq 2048) on 8 layers: what the preset was tuned for.
    cfg = _container(tp=4, request=request, num_layers=8)
    cfg.model.hidden_size = 12288
    cfg.model.num_attention_heads = 96
    cfg.model.seq_length = 2048
    return cfg


@pytest.fixture
def preset_file(tmp_path):
    path = tmp_path / "ub.yaml"
    path.write_text(yaml.safe_dump(userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048.to_ub_cfgs()))
    return path


def test_yaml_preset_file_is_recognised_by_value(preset_file, te_available):
    request = CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg=str(preset_file))
    plan = resolve_config(_gpt3_shape(request), world_size=8).plan
    assert H100_PRESET in plan.preset_names
    decision = plan.decision("tp_comm_overlap_cfg")
    assert decision.source == "user"
    assert decision.value == userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048.to_ub_cfgs()
    assert not [w for w in plan.warnings if "tuned for" in w], plan.warnings


def test_missing_yaml_preset_fails_at_finalize_naming_the_path(tmp_path):
    missing = tmp_path / "nope" / "ub.yaml"
    request = CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg=str(missing))
    with pytest.raises(FileNotFoundError, match=str(missing)):
        request.finalize()


def test_typo_knob_in_yaml_preset_fails_at_finalize_with_a_suggestion(tmp_path):
    ub = userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048.to_ub_cfgs()
    gemm = next(g for g, knobs in ub.items() if "num_sm" in knobs)
    ub[gemm]["num_sms"] = ub[gemm].pop("num_sm")
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(ub))
    request = CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg=str(path))
    with pytest.raises(ValueError, match=r"(?i)num_sms.*did you mean .num_sm."):
        request.finalize()


def test_yaml_preset_path_set_on_the_model_is_the_users(preset_file, te_available):
    cfg = _gpt3_shape(CommOverlapConfig(tp_comm_overlap=True))
    cfg.model.tp_comm_overlap_cfg = str(preset_file)
    plan = resolve_config(cfg, world_size=8).plan
    assert H100_PRESET in plan.preset_names
    decision = plan.decision("tp_comm_overlap_cfg")
    assert decision.value == userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048.to_ub_cfgs()
    assert decision.source == "user"
    assert "cfg.model" in decision.reason, decision.reason


# ----------------------------------------------------------------- 7. comm_overlap = None undoes


def test_comm_overlap_none_puts_megatron_core_defaults_back(te_available):
    cfg = _container(tp=2, pp=2, vpp=2, request=CommOverlapConfig(tp_comm_overlap=True))
    runtime_config_update(cfg, world_size=8)
    assert cfg.overlap_plan is not None
    assert (cfg.model.tp_comm_overlap, cfg.model.overlap_p2p_comm) == (True, True)
    assert (cfg.ddp.overlap_grad_reduce, cfg.optimizer.overlap_param_gather) == (True, True)

    cfg.comm_overlap = None
    runtime_config_update(cfg, world_size=8)
    assert cfg.overlap_plan is None
    for section, cls, knobs in (
        ("model", TransformerConfig, ("tp_comm_overlap", "overlap_p2p_comm", "batch_p2p_comm")),
        ("ddp", DistributedDataParallelConfig, ("overlap_grad_reduce", "overlap_param_gather")),
        ("optimizer", OptimizerConfig, ("overlap_param_gather",)),
    ):
        for knob in knobs:
            default = cls.__dataclass_fields__[knob].default
            assert getattr(getattr(cfg, section), knob) == default, f"cfg.{section}.{knob}"
    assert cfg.model.tp_comm_overlap_cfg is None
