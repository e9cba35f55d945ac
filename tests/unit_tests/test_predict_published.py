"""``benchmarks/predict_published.py`` and its data: every published row, predicted or with a reason.

Accuracy is reported by the script, not held here (the step model's accuracy tests hold their
own bounds): these tests check that the data file is what ``scripts/published_rows.py`` writes,
that its parser reads the release tables' forms as worked by hand, that every row is predicted or
says why not, that a recipe's own rows are planned exactly as the recipe plans them, and that the
report's medians and groups are right on a tiny input worked by hand.
"""

from __future__ import annotations

import json
import re

import pytest

from megatron.bridge.recipes import RECIPES, plan_recipe
from megatron.bridge.training.job import OUTER_DP_SHARDING_STRATEGIES
from megatron.bridge.training.precisions import published_precision
from tests.unit_tests.repo_scripts import load_script

predict_published = load_script("benchmarks/predict_published.py")
published_rows = load_script("scripts/published_rows.py")

ROWS = predict_published.load_rows()


@pytest.fixture(scope="module")
def predictions():
    return [predict_published.predict(row) for row in ROWS]


def _id(row: dict) -> str:
    return f"{row['model']}-{row['system']}-{row['precision']}-{row['release']}-{row['gbs']}"


# --- the data -----------------------------------------------------------------------------------

_COLUMNS = {
    "model": str,
    "release": str,
    "published_model": str,
    "system": str,
    "gpus": int,
    "precision": str,
    "gbs": int,
    "mbs": int,
    "seq_length": int,
    "fsdp": bool,
    "tp": int,
    "pp": int,
    "cp": int,
    "vp": (int, type(None)),
    "ep": int,
    "tokens_per_s_per_gpu": float,
    "model_tflops_per_gpu": float,
    "source": str,
}


def test_the_data_file_parses_with_every_column_typed_and_each_row_once():
    assert len(ROWS) > 200
    for row in ROWS:
        for column, kind in _COLUMNS.items():
            assert isinstance(row[column], kind), (_id(row), column)
        added = {"etp", "pipeline_layout", "mtp", "reason", "hsdp_groups", "fused_grouped_mlp"}
        added |= {"ep_overlap", "outer_dp_sharding_strategy"}
        assert set(row) - set(_COLUMNS) <= added, _id(row)
        # Every MoE row says whether its run had the fused grouped MLP and, but for a release
        # whose version has no tag (25.09), whether it overlapped its EP all-to-alls; only MoE
        # rows do.
        moe = row["model"] in published_rows.MOE_MODELS and not row.get("reason")
        assert ("fused_grouped_mlp" in row) == moe, _id(row)
        assert ("ep_overlap" in row) == (moe and row["release"] != "25.09"), _id(row)
        for setting in ("fused_grouped_mlp", "ep_overlap"):
            assert isinstance(row.get(setting, False), bool), _id(row)
        if "hsdp_groups" in row:
            assert row["fsdp"] and row["gpus"] % row["hsdp_groups"] == 0, _id(row)
            assert row["outer_dp_sharding_strategy"] in OUTER_DP_SHARDING_STRATEGIES, _id(row)
        assert row["gbs"] % (row["mbs"] * row["gpus"] // (row["tp"] * row["pp"] * row["cp"])) == 0
    ids = [_id(row) for row in ROWS]
    assert len(ids) == len(set(ids))
    assert {row["source"] for row in ROWS} == {published_rows.CURRENT, published_rows.ARCHIVE}


def test_the_data_file_is_the_generators_output():
    # Rendering the parsed rows gives the file byte for byte: it is in the form the generator
    # writes, with its header (sources) and nothing edited by hand.
    text = predict_published.ROWS_FILE.read_text()
    commit = re.search(r"Megatron-Bridge\n# commit (\w+)\.", text)[1]
    assert published_rows.render(ROWS, commit) == text


_CURRENT = """\
## 26.08 NeMo Container

### Pre-Training Performance

#### Model: LLAMA3_8B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|----|----|----|----|----|-----|-----|
| DGX-H100 | 8 | FP8 | 128 | 1 | 8192 | 1 | 1 | 1 | n/a | n/a | 14000 | 700[^note] |

### SFT Performance

#### Model: LLAMA3_70B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|----|----|----|----|----|-----|-----|
| DGX-H100 | 8 | FP8 | 32 | 1 | 4096 | 1 | 1 | 1 | n/a | n/a | 3000 | 600 |
"""

_ARCHIVE = """\
## 25.11 NeMo Container

### Pre-Training Performance

#### System: DGX-GB200

| Model | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|-------|--------|-----------|-----|-----|-----------------|------|----|----|----|----|----|----|-----|-----|
| LLAMA3_8B | 8 | FP8-CS (FP8-MX) | 128 | 2 | 8192 | 0 | 1 | 1 | 1 | n/a | 1 | 8 | 31508 (29789) | 1622 (1533) |
| DeepSeekV3 (w/o MTP) | 256 | BF16 | 4096 | 1 | 4096 | 0 | 1 | 4 | 1 | 4 | 64 | 64 | 3139 | 782 |

## 25.09 NeMo Container

### Pre-Training Performance

#### System: DGX-GB200

| Model | #-GPUs | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|-------|--------|-----|-----|-----------------|------|----|----|----|----|----|----|-----|-----|
| LLAMA3_70B | 64 | 128 | 2 | 8192 | 64 (0) | 1 (2) | 1 (4) | 1 | 1 (5) | 1 | 1 (16) | 3986 (3546) | 1791 (1593) |
| Qwen3_30B_a3B (tokendrop) | 8 | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | 1 | 8 | 16 | 22775 (23723) | 524 (546) |
"""


def test_the_parser_reads_each_table_form_as_worked_by_hand():
    rows = published_rows.collect(_CURRENT, _ARCHIVE)
    brief = [
        (r["model"], r["release"], r["system"], r["precision"], r["tokens_per_s_per_gpu"])
        for r in rows
    ]
    # The SFT table is skipped; a bracketed figure is a second row; 25.09 has no precision
    # column (plain FP8-CS, bracketed FP8-MX).
    assert brief == [
        ("llama3_8b", "26.08", "DGX-H100", "FP8", 14000.0),
        ("llama3_8b", "25.11", "DGX-GB200", "FP8-CS", 31508.0),
        ("llama3_8b", "25.11", "DGX-GB200", "FP8-MX", 29789.0),
        ("deepseek_v3", "25.11", "DGX-GB200", "BF16", 3139.0),
        ("llama3_70b", "25.09", "DGX-GB200", "FP8-CS", 3986.0),
        ("llama3_70b", "25.09", "DGX-GB200", "FP8-MX", 3546.0),
        ("qwen3_30b_a3b", "25.09", "DGX-GB200", "FP8-CS", 22775.0),
        ("qwen3_30b_a3b", "25.09", "DGX-GB200", "FP8-MX", 23723.0),
    ]
    first = rows[0]
    assert (first["vp"], first["ep"], first["fsdp"], first["model_tflops_per_gpu"]) == (
        None,
        1,
        False,
        700.0,
    )
    assert "etp" not in first and first["source"] == published_rows.CURRENT
    # Unbracketed cells are shared; bracketed ones split; VP 1 is no interleaving.
    fsdp_row, pp_row = rows[4], rows[5]
    assert (fsdp_row["fsdp"], fsdp_row["tp"], fsdp_row["pp"], fsdp_row["vp"]) == (True, 1, 1, None)
    assert (pp_row["fsdp"], pp_row["tp"], pp_row["pp"], pp_row["vp"]) == (False, 2, 4, 5)
    assert pp_row["model_tflops_per_gpu"] == 1593.0 and pp_row["gbs"] == 128
    # Annotations: no MTP (the layout without the MTP layer), token drop (a reason).
    deepseek = rows[3]
    assert deepseek["published_model"] == "DeepSeekV3 (w/o MTP)"
    assert deepseek["mtp"] is False and deepseek["etp"] == 1
    assert deepseek["pipeline_layout"] == "Et*4|(t*4|)*14tL"
    assert all("capacity factor" in r["reason"] for r in rows[6:])
    assert all("reason" not in r for r in rows[:6])


def test_the_parser_refuses_a_model_it_cannot_name():
    text = _CURRENT.replace("LLAMA3_8B", "LLAMA9_1T")
    with pytest.raises(ValueError, match="'LLAMA9_1T' has no entry in MODELS"):
        published_rows.collect(text, "")


# --- which runs had the fused grouped MLP, read from upstream's perf configurations -------------

_UTILS = """
from dataclasses import dataclass


@dataclass
class WorkloadBaseConfig:
    num_gpus: int = 1
    global_batch_size: int = 1
    micro_batch_size: int = 1
    cutedsl_fused_grouped_mlp: Optional[bool] = False
    moe_a2a_overlap: Optional[bool] = False
"""

_WORKLOADS = """
from dataclasses import replace
from utils.utils import WorkloadBaseConfig

BASE_QWEN3_30B_A3B_CONFIG = WorkloadBaseConfig(global_batch_size=512)
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_BF16_V1 = replace(
    BASE_QWEN3_30B_A3B_CONFIG, num_gpus=8, micro_batch_size=4
)
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 = replace(
    QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_BF16_V1, cutedsl_fused_grouped_mlp=True
)
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_NVFP4_V1 = QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_BF16_V1
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_BF16_V2 = replace(
    QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_BF16_V1, global_batch_size=1024, moe_a2a_overlap=True
)
"""

#: 0.2.0's names: <MODEL>_<GPU>_<PRECISION>_BASE_CONFIG, one per GPU and precision.
_WORKLOADS_020 = """
from dataclasses import replace
from utils.utils import WorkloadBaseConfig

QWEN3_30B_A3B_GB200_BF16_BASE_CONFIG = WorkloadBaseConfig(num_gpus=8, global_batch_size=512)
QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG = replace(
    QWEN3_30B_A3B_GB200_BF16_BASE_CONFIG, micro_batch_size=4, moe_a2a_overlap=True
)
"""

_FUNCTIONS = """
def qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config():
    cfg = qwen3_30b_a3b_pretrain_config()
    cfg.env_vars = {"CUDA_DEVICE_MAX_CONNECTIONS": 32, "NVTE_CUTEDSL_FUSED_GROUPED_MLP": 1}
    return cfg


def qwen3_30b_a3b_pretrain_8gpu_gb200_bf16_config():
    cfg = qwen3_30b_a3b_pretrain_config()
    cfg.env_vars = {"CUDA_DEVICE_MAX_CONNECTIONS": 32}
    return cfg


def qwen3_30b_a3b_pretrain_8gpu_gb200_fp8cs_config():
    cfg = qwen3_30b_a3b_pretrain_config()
    _enable_full_iteration(cfg)
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
    return cfg


def qwen3_30b_a3b_pretrain_16gpu_gb200_bf16_config():
    cfg = qwen3_30b_a3b_pretrain_config()
    if cfg.model.expert_model_parallel_size > 1:
        cfg.comm_overlap.overlap_moe_expert_parallel_comm = True
    return cfg
"""

#: The helpers the functions above call, imported through a re-export as upstream's perf recipes
#: do (perf_recipes/<model>/common.py re-exports the recipe functions).
_COMMON = """
from megatron.bridge.recipes.qwen.qwen3_moe import qwen3_30b_a3b_pretrain_config
from megatron.bridge.training.comm_overlap import CommOverlapConfig


def _enable_full_iteration(cfg):
    cfg.model.cuda_graph_impl = "full_iteration"
    cfg.comm_overlap = CommOverlapConfig(
        tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True
    )
"""

_RECIPE = """
def qwen3_30b_a3b_pretrain_config():
    cfg = _base()
    cfg.comm_overlap.overlap_moe_expert_parallel_comm = True
    return cfg
"""


class _Tag(published_rows.Upstream):
    """An upstream of files given as text: ``files`` by tag."""

    def __init__(self, files: dict[str, dict[str, str]]) -> None:
        super().__init__("unused")
        self._files = files

    def show(self, tag: str, path: str) -> str:
        return self._files[tag][path]

    def has(self, tag: str) -> bool:
        return tag in self._files

    def files(self, tag: str, under: str) -> tuple[str, ...]:
        return tuple(p for p in self._files[tag] if p.startswith(under))


_UPSTREAM = _Tag(
    {
        "v0.5.1": {
            "scripts/performance/utils/utils.py": _UTILS,
            "scripts/performance/configs/qwen/qwen3_workload_base_configs.py": _WORKLOADS,
        },
        "v0.6.0": {
            "src/megatron/bridge/perf_recipes/qwen/gb200/qwen3_moe.py": (
                "from megatron.bridge.perf_recipes.qwen.common import (\n"
                "    CommOverlapConfig, _enable_full_iteration, qwen3_30b_a3b_pretrain_config\n"
                ")\n" + _FUNCTIONS
            ),
            "src/megatron/bridge/perf_recipes/qwen/common.py": _COMMON,
            "src/megatron/bridge/recipes/qwen/qwen3_moe.py": _RECIPE,
        },
        "v0.2.0": {
            "scripts/performance/utils/utils.py": _UTILS,
            "scripts/performance/configs/qwen3/workload_base_configs.py": _WORKLOADS_020,
        },
    }
)


def _row(precision: str, **fields) -> dict:
    base = {"model": "qwen3_30b_a3b", "release": "26.06.01", "system": "DGX-GB200"}
    return {**base, "gpus": 8, "gbs": 512, "mbs": 4, "precision": precision, **fields}


def test_the_release_versions_are_read_from_upstreams_version_list():
    text = json.dumps(
        [
            {"version": "nightly", "url": "x"},
            {"name": "0.6.0 (latest) · 26.08", "version": "0.6.0"},
            {"name": "0.4.2 · 26.04.01", "version": "0.4.2"},
        ]
    )
    assert published_rows.release_versions(text) == {"26.08": "0.6.0", "26.04.01": "0.4.2"}


def test_workload_configs_are_evaluated_through_replace_and_aliases():
    defaults = published_rows.class_defaults(_UTILS, "WorkloadBaseConfig")
    assert defaults == {
        "num_gpus": 1,
        "global_batch_size": 1,
        "micro_batch_size": 1,
        "cutedsl_fused_grouped_mlp": False,
        "moe_a2a_overlap": False,
    }
    configs = published_rows.workload_configs(_WORKLOADS, defaults)
    fp8 = configs["QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1"]
    assert (fp8["num_gpus"], fp8["global_batch_size"], fp8["micro_batch_size"]) == (8, 512, 4)
    assert fp8["cutedsl_fused_grouped_mlp"] is True
    assert (
        configs["QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_NVFP4_V1"]["cutedsl_fused_grouped_mlp"]
        is False
    )


@pytest.mark.parametrize(
    ("tag", "precision", "fused"),
    [
        ("v0.5.1", "MXFP8", True),
        ("v0.5.1", "BF16", False),
        ("v0.5.1", "NVFP4", False),
        ("v0.6.0", "MXFP8", True),
        ("v0.6.0", "BF16", False),
    ],
)
def test_a_rows_fused_mlp_is_its_releases_configuration(tag, precision, fused):
    assert published_rows.fused_grouped_mlp(_UPSTREAM, tag, _row(precision)) is fused


def test_a_row_without_its_configuration_is_refused():
    with pytest.raises(ValueError, match="no perf function"):
        published_rows.fused_grouped_mlp(_UPSTREAM, "v0.6.0", _row("NVFP4"))
    with pytest.raises(ValueError, match="_PRECISION_NAMES"):
        published_rows.fused_grouped_mlp(_UPSTREAM, "v0.5.1", _row("FP4-X"))


def test_rows_of_versions_before_the_field_are_without_the_fused_mlp():
    rows = [_row("MXFP8", release="26.04.01", tokens_per_s_per_gpu=1.0)]
    # No tag is read for a version before the field, and a version without a tag keeps no
    # ep_overlap: this upstream has no v0.4.2.
    published_rows.add_run_settings(rows, _UPSTREAM, {"26.04.01": "0.4.2"})
    assert rows[0]["fused_grouped_mlp"] is False
    assert "ep_overlap" not in rows[0]
    assert list(rows[0])[-2:] == ["fused_grouped_mlp", "tokens_per_s_per_gpu"]
    with pytest.raises(ValueError, match="no version"):
        published_rows.add_run_settings(rows, _UPSTREAM, {})


def test_a_tagged_rows_settings_sit_before_its_throughput():
    rows = [_row("MXFP8", release="26.06.01", tokens_per_s_per_gpu=1.0, source="x")]
    published_rows.add_run_settings(rows, _UPSTREAM, {"26.06.01": "0.5.1"})
    assert list(rows[0])[-4:] == [
        "fused_grouped_mlp",
        "ep_overlap",
        "tokens_per_s_per_gpu",
        "source",
    ]
    assert (rows[0]["fused_grouped_mlp"], rows[0]["ep_overlap"]) == (True, False)


# --- which runs overlapped their EP all-to-alls -------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "row", "overlap"),
    [
        # Workload configs: the variant whose GPU count and batches are the row's.
        ("v0.5.1", _row("BF16"), False),
        ("v0.5.1", _row("BF16", gbs=1024), True),
        # 0.2.0's config names.
        ("v0.2.0", _row("MXFP8"), True),
        ("v0.2.0", _row("BF16"), False),
        # Perf functions: the recipe the function starts from sets it (through a re-export).
        ("v0.6.0", _row("BF16"), True),
        # ... and a helper's CommOverlapConfig with the keyword, then the function's own
        # CommOverlapConfig without it, which resets it to the field's default: the last wins.
        ("v0.6.0", _row("FP8-CS"), False),
    ],
)
def test_a_rows_ep_overlap_is_its_releases_configuration(tag, row, overlap):
    assert published_rows.ep_overlap(_UPSTREAM, tag, row) is overlap


def test_an_ep_overlap_set_under_a_condition_is_refused():
    with pytest.raises(ValueError, match="under a condition"):
        published_rows.ep_overlap(_UPSTREAM, "v0.6.0", _row("BF16", gpus=16))


def test_a_perf_function_that_calls_itself_is_refused():
    looping = "def qwen3_30b_a3b_pretrain_8gpu_gb200_bf16_config():\n" + (
        "    return qwen3_30b_a3b_pretrain_8gpu_gb200_bf16_config()\n"
    )
    upstream = _Tag({"v0.6.0": {"src/megatron/bridge/perf_recipes/qwen/x.py": looping}})
    with pytest.raises(ValueError, match="calls itself"):
        published_rows.ep_overlap(upstream, "v0.6.0", _row("BF16"))


def test_the_data_file_reads_ep_overlap_where_upstream_turns_it_on():
    # Spot checks against upstream as read by hand: 26.08 (0.6.0) GB300 MXFP8 Qwen3-30B-A3B runs
    # perf_recipes/qwen/common.py _enable_hybridep_full_iteration_mxfp8 (on); 26.04 (0.4.0)
    # GPT-OSS GB200 BF16 at GBS 1280 is the V2 workload config with moe_a2a_overlap=True, GB300
    # BF16 the V2 without it.
    def overlap(model, system, precision, release):
        (row,) = [
            r
            for r in ROWS
            if (r["model"], r["system"], r["precision"], r["release"])
            == (model, system, precision, release)
        ]
        return row["ep_overlap"]

    assert overlap("qwen3_30b_a3b", "DGX-GB300", "MXFP8", "26.08") is True
    assert overlap("gpt_oss_120b", "DGX-GB200", "BF16", "26.04") is True
    assert overlap("gpt_oss_120b", "DGX-GB300", "BF16", "26.04") is False


def test_a_rows_ep_overlap_reaches_its_plan():
    def plan(row):
        return plan_recipe(
            row["model"],
            gpu=predict_published.gpu_of(row),
            precision=published_precision(row["precision"]),
            changes=predict_published.row_changes(row),
        )

    row = next(r for r in ROWS if r.get("ep_overlap"))
    assert plan(row).a2a_overlap is True
    assert plan({**row, "ep_overlap": False}).a2a_overlap is False


# --- the predictions ----------------------------------------------------------------------------


def test_every_row_is_predicted_or_says_why_not(predictions):
    assert len(predictions) == len(ROWS)
    for p in predictions:
        if p.predicted is None:
            assert p.reason, p.label
            if p.row["model"] not in RECIPES:
                assert p.reason == f"no recipe for {p.row['model']}"
        else:
            assert p.reason is None and p.predicted > 0, p.label
            assert p.error == pytest.approx(p.predicted / p.row["tokens_per_s_per_gpu"] - 1.0)
            assert p.family is not None
    # Only the reasons the tables or the plan give: every row of a recipe's model without one
    # is predicted.
    for p in predictions:
        if p.row["model"] in RECIPES and not p.row.get("reason"):
            assert p.predicted is not None or p.reason.startswith("the plan refuses"), p.label
    assert sum(p.predicted is not None for p in predictions) > 200


def _newest(row: dict) -> bool:
    releases = [r["release"] for r in ROWS if r["model"] == row["model"]]
    return row["release"] == max(releases, key=predict_published.release_key)


@pytest.mark.parametrize("row", [r for r in ROWS if r["model"] in RECIPES and _newest(r)], ids=_id)
def test_a_recipes_own_row_as_changes_is_the_recipes_plan(row):
    # The rows a recipe publishes (each model's newest release): the row's layout given as
    # changes changes nothing, so the benchmark and the recipe predict the same job.
    picks = {
        "gpu": predict_published.gpu_of(row),
        "precision": published_precision(row["precision"]),
    }
    recipe = plan_recipe(row["model"], **picks).job
    changed = plan_recipe(row["model"], **picks, changes=predict_published.row_changes(row)).job
    # The fused grouped MLP too: the recipe's run records what the row's release ran.
    assert changed.model.use_transformer_engine_op_fuser is row.get("fused_grouped_mlp", False)
    assert changed == recipe


def test_a_row_unlike_its_recipe_runs_in_its_own_layout():
    (row,) = [
        r
        for r in ROWS
        if (r["model"], r["system"], r["release"], r["precision"])
        == ("llama3_70b", "DGX-H100", "25.11", "FP8-CS")
    ]
    job = plan_recipe(
        "llama3_70b", gpu="h100", precision="fp8_cs", changes=predict_published.row_changes(row)
    ).job
    assert (job.world_size, job.global_batch_size, job.micro_batch_size) == (64, 128, 1)
    assert (job.tp_size, job.pp_size, job.vpp_size, job.cp_size) == (4, 8, 5, 1)
    # The recipe's own H100 FP8 run (26.04.01) has GBS 256.
    recipe = plan_recipe("llama3_70b", gpu="h100", precision="fp8_cs").job
    assert recipe.global_batch_size == 256


def test_the_fitted_rows_are_marked(predictions):
    marked = {
        (p.row["model"], p.row["release"], p.row["tokens_per_s_per_gpu"])
        for p in predictions
        if p.fitted
    }
    assert marked == {
        (f.model, f.release, f.tokens_per_s_per_gpu) for f in predict_published.fit_rows()
    }
    # One row each: the fractions', the scan's (1), the unfused experts' (2) and DeepSeek-V4's
    # attention's (1) constants.
    assert sum(p.fitted for p in predictions) == len(predict_published.fit_rows())
    assert len(predict_published.fit_rows()) == len(predict_published.FIT_ROWS) + 1 + 2 + 1


def test_the_table_lists_every_row_once_and_its_summaries(predictions):
    text = predict_published.table(predictions)
    body = [line for line in text.splitlines() if line.startswith("| ") and "|---" not in line]
    assert sum(1 for line in body if re.match(r"\| \w+ DGX-", line)) == len(ROWS)
    for p in predictions:
        if p.predicted is None:
            assert p.reason in text
    assert "median abs error" in text and "Worst 10:" in text and "newest releases" in text


# --- the report, worked by hand -----------------------------------------------------------------


def _p(model, release, published, predicted, *, family="dense", fitted=False, system="DGX-H100"):
    row = {
        "model": model,
        "release": release,
        "system": system,
        "precision": "FP8",
        "gbs": 128,
        "tokens_per_s_per_gpu": published,
    }
    reason = None if predicted is not None else "no recipe"
    return predict_published.Prediction(row, predicted, reason, family, fitted)


TINY = [
    _p("a", "26.02", 100.0, 110.0),  # +10 %
    _p("a", "26.02", 100.0, 80.0),  # -20 %
    _p("b", "25.11", 100.0, 130.0, family="moe"),  # +30 %
    _p("b", "26.04.01", 100.0, 200.0, family="moe", fitted=True),  # +100 %, fitted: left out
    _p("c", "26.04", 100.0, None, family=None),  # not predicted
    _p("b", "26.04", 200.0, 150.0, family="moe", system="DGX-GB200"),  # -25 %
]


def test_release_key_orders_releases_as_they_shipped():
    releases = ["26.04", "25.11", "26.04.01", "26.02", "25.09"]
    assert sorted(releases, key=predict_published.release_key) == [
        "25.09",
        "25.11",
        "26.02",
        "26.04",
        "26.04.01",
    ]


def test_summarize_leaves_out_fitted_and_unpredicted_rows():
    s = predict_published.summarize(TINY)
    # |errors| 0.10, 0.20, 0.30, 0.25 -> median (0.20 + 0.25) / 2; signed 0.1, -0.2, 0.3, -0.25
    # -> median (-0.2 + 0.1) / 2.
    assert s.rows == 4
    assert s.median_abs_error == pytest.approx(0.225)
    assert s.median_signed_error == pytest.approx(-0.05)
    assert predict_published.summarize(TINY[3:5]) == predict_published.Summary(0, None, None)


def test_grouped_medians_by_family_release_and_group():
    families = predict_published.grouped(TINY, lambda p: p.family)
    assert list(families) == ["dense", "moe"]
    assert families["dense"].median_abs_error == pytest.approx(0.15)
    assert families["dense"].median_signed_error == pytest.approx(-0.05)
    assert families["moe"].rows == 2
    assert families["moe"].median_signed_error == pytest.approx(0.025)
    releases = predict_published.grouped(TINY, lambda p: p.row["release"])
    assert set(releases) == {"26.02", "25.11", "26.04"}  # 26.04.01 only has a fitted row
    assert releases["26.04"].median_signed_error == pytest.approx(-0.25)
    groups = predict_published.grouped(TINY, predict_published.group_key)
    assert list(groups) == [
        ("a", "h100", "FP8", "26.02"),
        ("b", "h100", "FP8", "25.11"),
        ("b", "gb200", "FP8", "26.04"),
    ]


def test_newest_releases_and_worst():
    assert predict_published.newest_releases(TINY) == ["26.04", "26.04.01"]
    worst = predict_published.worst(TINY, n=3)
    assert [round(p.error, 2) for p in worst] == [0.3, -0.25, -0.2]
    report = predict_published.report(TINY)
    assert report["newest_releases"]["rows"] == 1  # 26.04's one measured row; 26.04.01 is fitted
    assert report["overall"]["rows"] == 4 and report["predicted"] == 5 and report["fitted"] == 1
    assert list(report["releases"]) == ["26.04", "26.02", "25.11"]


def test_the_accuracy_document_rounds_each_medians():
    doc = predict_published.accuracy_document(TINY)
    assert doc["families"] == {
        "dense": {"rows": 2, "median_abs_error": 0.15, "median_signed_error": -0.05},
        "moe": {"rows": 2, "median_abs_error": 0.275, "median_signed_error": 0.025},
    }
    assert doc["overall"] == {"rows": 4, "median_abs_error": 0.225, "median_signed_error": -0.05}
    assert doc["newest_releases"] == {
        "releases": ["26.04", "26.04.01"],
        "rows": 1,
        "median_abs_error": 0.25,
        "median_signed_error": -0.25,
    }
    assert list(doc["releases"]) == ["26.04", "26.02", "25.11"]
    assert doc["releases"]["25.11"] == {
        "rows": 1,
        "median_abs_error": 0.3,
        "median_signed_error": 0.3,
    }


def test_the_shipped_accuracy_file_is_what_the_current_code_measures(predictions):
    """``estimate/accuracy.json`` (the figure every estimate prints) equals what this script
    measures on the current code and data.

    Recomputed rather than checked by a hash of its inputs: every published row is planned and
    estimated without torch in a few seconds, and a hash would have to cover the whole step
    model (any cost formula changes the figures), the recipes and the data alike. After a change
    to any of them, ``uv run python benchmarks/predict_published.py --write-accuracy`` rewrites
    the file.
    """
    shipped = json.loads(predict_published.ACCURACY_FILE.read_text(encoding="utf-8"))
    held_out, _refits = predict_published.predict_out_of_group(ROWS)
    assert shipped == predict_published.accuracy_document(predictions, held_out)


# --- leave one group out -------------------------------------------------------------------------


def test_a_group_without_a_fit_row_keeps_its_in_sample_prediction(predictions):
    """Leaving out a group that no constant was fitted on refits nothing."""
    row = next(r for r in ROWS if r["model"] == "deepseek_v3" and not r.get("reason"))
    group = predict_published.leave_out_key(row)
    refit = predict_published.out_of_group(group, ROWS)
    assert refit.keywords == {} and refit.note == ""
    (held,), _ = predict_published.predict_out_of_group([row])
    assert held.predicted == predict_published.predict(row).predicted


def test_a_fit_rows_group_is_refit_on_another_groups_row():
    """The Llama-3 70B H100 FP8 group holds the H100 FP8 fraction's fit row: left out, the
    fraction is refit on a dense H100 FP8 row of another model, and the group's rows move."""
    fit_row = predict_published.FIT_ROWS[("h100", "fp8_cs")]
    group = (fit_row.model, fit_row.gpu, fit_row.precision)
    constant = next(c for c in predict_published.fit_constants() if c.row == fit_row)
    replacement = predict_published.replacement_row(
        constant, predict_published.plannable(ROWS), group
    )
    assert replacement is not None
    assert (replacement.model, replacement.gpu, replacement.precision) != group
    assert (replacement.gpu, replacement.precision) == ("h100", "fp8_cs")
    refit = predict_published.out_of_group(group, ROWS)
    achievable = refit.keywords["achievable"]
    assert achievable.fraction != predict_published.ACHIEVABLE[("h100", "fp8_cs")].fraction
    assert replacement.model in refit.note
    row = predict_published.data_row(fit_row, ROWS)
    held = predict_published.predict_out_of_group([row, *[r for r in ROWS if r is not row]])[0][0]
    assert held.predicted != pytest.approx(fit_row.tokens_per_s_per_gpu, rel=1e-3)
    assert not held.fitted


def test_the_report_carries_the_out_of_group_figures_beside_the_in_sample_ones(predictions):
    held_out = predict_published.predict_out_of_group(ROWS)
    doc = predict_published.report(predictions, held_out)
    assert doc["out_of_group"]["overall"]["rows"] >= doc["overall"]["rows"]
    assert set(doc["out_of_group"]["families"]) <= set(doc["families"]) | {None}
    assert any("refit on" in r["refit"] for r in doc["out_of_group"]["refits"])
    text = predict_published.table(predictions, held_out)
    assert "Leave one group out" in text and "model, out of group" in text
