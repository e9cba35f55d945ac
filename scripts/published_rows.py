"""Write ``tests/unit_tests/recipes/data/published_rows.yaml`` from Megatron-Bridge's release tables.

    uv run python scripts/published_rows.py --upstream DIR [--rev REV] [--check]

``DIR`` is a Megatron-Bridge git repository (a clone or a bare mirror); ``REV`` (default HEAD)
the commit whose ``docs/performance-summary.md`` and ``docs/performance-summary-archive.md`` are
read. Every pre-training table of every release becomes rows of the data file: one row per
published figure, so a cell written "FP8-CS (FP8-MX)" with "37556 (36108)" tokens/s is two rows,
each taking the bracketed value of every bracketed cell. SFT and LoRA tables are skipped.

Beside the published columns each row holds layout facts the tables leave out, from upstream's
recipes (each rule below names its source): ``etp`` for MoE models, the pipeline layout of the
models that set one, ``mtp: false`` for a run published without MTP and ``reason`` for a run
whose setting the tables do not say; and for each MoE row ``fused_grouped_mlp``, whether its run
had Transformer Engine's fused grouped MLP, and ``ep_overlap``, whether it overlapped its EP
all-to-alls, read from the perf configuration of the Megatron-Bridge version its release ships
(``docs/versions1.json`` at ``REV`` names it; ``DIR`` holds its tag ``v<version>``, and a
version without a tag leaves ``ep_overlap`` out). ``--check`` changes nothing and exits 1 when
the file differs from what the tables give.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROWS_FILE = (
    Path(__file__).resolve().parents[1] / "tests/unit_tests/recipes/data/published_rows.yaml"
)

CURRENT = "docs/performance-summary.md"
ARCHIVE = "docs/performance-summary-archive.md"
VERSIONS = "docs/versions1.json"

#: The tables' model names -> the recipe names here (or the name a recipe would have).
MODELS = {
    "LLAMA3_8B": "llama3_8b",
    "LLAMA3_70B": "llama3_70b",
    "LLAMA3.1_405B": "llama31_405b",
    "DeepSeekV3": "deepseek_v3",
    "DeepSeekV4 Flash": "deepseek_v4_flash",
    "GPT OSS 120B": "gpt_oss_120b",
    "Qwen3_30B_a3B": "qwen3_30b_a3b",
    "Qwen3_235B_a22B": "qwen3_235b_a22b",
    "Kimi_K2": "kimi_k2",
    "Nemotron_3_Nano": "nemotron_3_nano",
    "Nemotron_3_5_Lightning": "nemotron_3_5_lightning",
    "Nemotron_3_Super": "nemotron_3_super",
    "Nemotron_3_Ultra": "nemotron_3_ultra",
}

#: MoE models: upstream's perf recipes of these models, or the base recipes they start from, set
#: ``cfg.model.expert_tensor_parallel_size = 1`` (Megatron-Bridge src/megatron/bridge/
#: perf_recipes/deepseek/common.py, deepseek/*/deepseek_v4.py, gpt_oss/{gb200,gb300,b300}/gpt_oss.py,
#: qwen/*/qwen3_moe.py, nemotronh/{b200,b300,gb200,gb300}/nemotronh.py; recipes/kimi/h100/kimi_k2.py,
#: recipes/gpt_oss/h100/gpt_oss.py, recipes/nemotronh/h100/nemotron_3_nano.py), so their rows
#: carry ``etp: 1``.
MOE_MODELS = frozenset(
    {
        "deepseek_v3",
        "deepseek_v4_flash",
        "gpt_oss_120b",
        "qwen3_30b_a3b",
        "qwen3_235b_a22b",
        "kimi_k2",
        "nemotron_3_nano",
        "nemotron_3_5_lightning",
        "nemotron_3_super",
        "nemotron_3_ultra",
    }
)

#: Models whose upstream perf recipes run Megatron-FSDP (``cfg.ddp.use_megatron_fsdp = True``) in
#: every published layout: a table without an FSDP column leaves it out, so their rows carry
#: ``fsdp: true`` there. Nemotron 3 Ultra: Megatron-Bridge perf_recipes/nemotronh/common.py
#: _apply_nemotron_3_ultra_fsdp_hsdp, applied by nemotronh/{gb300,gb200}/nemotronh.py
#: nemotron_3_ultra_pretrain_256gpu_{gb300,gb200}_fp8mx_config.
FSDP_MODELS = frozenset({"nemotron_3_ultra"})

#: Models whose upstream perf recipes shard Megatron-FSDP within groups of this many GPUs (HSDP,
#: ``num_distributed_optimizer_instances`` = GPUs // size, ``outer_dp_sharding_strategy``
#: "optim" with more than one group). Nemotron 3 Ultra: Megatron-Bridge
#: perf_recipes/nemotronh/common.py _apply_nemotron_3_ultra_fsdp_hsdp and its
#: _GB300_NVLINK_DOMAIN_GPUS = 64.
HSDP_GROUP_GPUS = {"nemotron_3_ultra": 64}

#: Pipeline layouts by (PP, VP) in megatron-core's string form (E embedding, t decoder layer, m
#: MTP layer, L loss, | a stage boundary). DeepSeek-V3 (61 layers, one MTP layer): Megatron-Bridge
#: recipes/deepseek/h100/deepseek_v3.py _get_deepseek_v3_pipeline_layout, and PP2 x VP8 as
#: perf_recipes/deepseek/gb300/deepseek_v3.py sets it; Kimi-K2 (61 layers, no MTP):
#: recipes/kimi/h100/kimi_k2.py _get_kimi_k2_pipeline_layout. "{m}" is the MTP layer, left out
#: for a run published without MTP. A (PP, VP) absent here has no published layout: the row
#: keeps none, and megatron-core's even split judges it.
_LAYOUT_16 = "Et*4|(t*4|)*14t{m}L"
_LAYOUT_8 = "Et*8|(t*8|)*6t*5{m}L"
_LAYOUT_4 = "Et*16|t*16|t*16|t*13{m}L"
_DEEPSEEK_LAYOUTS = {
    (4, 1): _LAYOUT_4,
    (8, 1): _LAYOUT_8,
    (4, 2): _LAYOUT_8,
    (16, 1): _LAYOUT_16,
    (8, 2): _LAYOUT_16,
    (4, 4): _LAYOUT_16,
    (2, 8): _LAYOUT_16,
}
PIPELINE_LAYOUTS = {
    "deepseek_v3": _DEEPSEEK_LAYOUTS,
    "kimi_k2": {stages: layout.replace("{m}", "") for stages, layout in _DEEPSEEK_LAYOUTS.items()},
}

#: The 25.09 tables have no precision column: their footnote says a bracketed figure is the
#: other quantization granularity (32x32 blocks on GB200 and B200: MXFP8), the plain one FP8
#: current scaling, as the 25.11 tables label the same layouts.
UNLABELLED_PRECISIONS = ("FP8-CS", "FP8-MX")

#: Model-name annotations of the tables, and what each says about the run.
VARIANTS = {
    "w/ MTP": {},
    "w/o MTP": {"mtp": False},
    "dropless": {},
    "tokendrop": {"reason": "token-drop run: the tables do not publish its expert capacity factor"},
}

_COLUMNS = {
    "System": "system",
    "Model": "model",
    "#-GPUs": "gpus",
    "Precision": "precision",
    "GBS": "gbs",
    "MBS": "mbs",
    "Sequence Length": "seq_length",
    "FSDP": "fsdp",
    "TP": "tp",
    "PP": "pp",
    "CP": "cp",
    "VP": "vp",
    "EP": "ep",
    "GA": "ga",
    "Tokens / sec / GPU": "tokens_per_s_per_gpu",
    "Model TFLOP / sec / GPU": "model_tflops_per_gpu",
}

_FOOTNOTE = re.compile(r"\[\^[^\]]*\]")
_BRACKETED = re.compile(r"^(?P<first>[^()]+?)\s*\((?P<second>[^()]+)\)$")


def _values(cell: str) -> list[str]:
    """A cell's figures: ``["37556", "36108"]`` for "37556 (36108)", else the one figure."""
    cell = _FOOTNOTE.sub("", cell).strip()
    match = _BRACKETED.match(cell)
    if match:
        return [match["first"].strip(), match["second"].strip()]
    return [cell]


def _model_name(text: str) -> tuple[str, str | None]:
    """(table model name, annotation) of "DeepSeekV3 (w/o MTP)"."""
    match = _BRACKETED.match(text.strip())
    if match and match["second"].strip() in VARIANTS:
        return match["first"].strip(), match["second"].strip()
    return text.strip(), None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _int(text: str, what: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{what}: expected a whole number, got {text!r}.")
    return int(text)


def _size(text: str, what: str) -> int:
    """A parallel size: "n/a" is 1."""
    return 1 if text.lower() == "n/a" else _int(text, what)


def tables(markdown: str, source: str) -> list[tuple[str, str, list[dict[str, str]]]]:
    """Every pre-training table of a release page: (release, heading, rows as column -> cell)."""
    found = []
    release = section = heading = None
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := re.match(r"^## (\S+) NeMo Container", line):
            release, section = m[1], None
        elif line.startswith("### "):
            section = line[4:].strip()
        elif line.startswith("#### "):
            heading = line[5:].strip()
        elif line.startswith("|") and section == "Pre-Training Performance":
            header = [_COLUMNS[c] for c in _cells(line)]
            i += 2  # the separator line
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = _cells(lines[i])
                if len(cells) != len(header):
                    raise ValueError(
                        f"{source} {release} {heading}: {lines[i]!r} has "
                        f"{len(cells)} cells, the header {len(header)}."
                    )
                rows.append(dict(zip(header, cells, strict=True)))
                i += 1
            found.append((release, heading, rows))
            continue
        i += 1
    return found


def rows_of(release: str, heading: str, cells: dict[str, str], source: str) -> list[dict]:
    """The data file's rows of one table line (two where its cells hold bracketed figures)."""
    kind, _, name = heading.partition(": ")
    system = cells["system"] if kind == "Model" else name
    published_model = cells["model"] if kind == "System" else name
    base, variant = _model_name(published_model)
    if base not in MODELS:
        raise ValueError(f"{source} {release}: model {base!r} has no entry in MODELS.")
    model = MODELS[base]
    tokens = _values(cells["tokens_per_s_per_gpu"])
    if "precision" in cells:
        labels = _values(cells["precision"])
    else:
        labels = list(UNLABELLED_PRECISIONS[: len(tokens)])
    if len(labels) != len(tokens):
        raise ValueError(
            f"{source} {release} {published_model} {system}: "
            f"{len(labels)} precisions for {len(tokens)} figures."
        )
    out = []
    for k, label in enumerate(labels):

        def pick(column: str, k: int = k) -> str:
            values = _values(cells[column])
            return values[k] if len(values) > 1 else values[0]

        what = f"{source} {release} {published_model} {system}"
        vp = _size(pick("vp"), what)
        pp = _size(pick("pp"), what)
        row: dict = {
            "model": model,
            "release": release,
            "published_model": published_model,
            "system": system,
            "gpus": _int(pick("gpus"), what),
            "precision": label,
            "gbs": _int(pick("gbs"), what),
            "mbs": _int(pick("mbs"), what),
            "seq_length": _int(pick("seq_length"), what),
            "fsdp": _int(pick("fsdp"), what) > 0 if "fsdp" in cells else model in FSDP_MODELS,
            "tp": _size(pick("tp"), what),
            "pp": pp,
            "cp": _size(pick("cp"), what),
            # VP 1 is no interleaving, as n/a is.
            "vp": vp if vp > 1 else None,
            "ep": _size(pick("ep"), what),
        }
        if model in MOE_MODELS:
            row["etp"] = 1
        groups = row["gpus"] // HSDP_GROUP_GPUS.get(model, row["gpus"])
        if row["fsdp"] and groups > 1:
            row["hsdp_groups"] = groups
            row["outer_dp_sharding_strategy"] = "optim"
        facts = VARIANTS[variant] if variant else {}
        layout = PIPELINE_LAYOUTS.get(model, {}).get((pp, vp))
        if layout is not None:
            row["pipeline_layout"] = layout.format(m="" if facts.get("mtp") is False else "m")
        row.update({k: v for k, v in facts.items() if k != "reason"})
        row["tokens_per_s_per_gpu"] = float(_int(tokens[k], what))
        row["model_tflops_per_gpu"] = float(_int(pick("model_tflops_per_gpu"), what))
        row["source"] = source
        if "reason" in facts:
            row["reason"] = facts["reason"]
        out.append(row)
    return out


def collect(current: str, archive: str) -> list[dict]:
    """Every pre-training row of the two pages, the current release first."""
    rows = []
    for text, source in ((current, CURRENT), (archive, ARCHIVE)):
        for release, heading, lines in tables(text, source):
            for cells in lines:
                rows.extend(rows_of(release, heading, cells, source))
    return rows


# --- which runs had the experts' fused grouped MLP ----------------------------------------------
#
# A MoE row's ``fused_grouped_mlp`` says whether its run computed the routed experts in
# Transformer Engine's fused grouped MLP (megatron-core's TEGroupedMLP under
# use_transformer_engine_op_fuser, with the cuteDSL kernel NVTE_CUTEDSL_FUSED_GROUPED_MLP=1
# selects), read from the perf configuration of the Megatron-Bridge version the row's release
# ships: upstream's docs/versions1.json names it ("0.4.2 · 26.04.01"), its tag v0.4.2 holds it.
# - versions whose perf functions live in src/megatron/bridge/perf_recipes (0.6.0 on): the row's
#   function ``<model>_pretrain_<gpus>gpu_<gpu>_<precision>_config``; the run has the fused MLP
#   when the function's own environment sets NVTE_CUTEDSL_FUSED_GROUPED_MLP to 1, which upstream
#   writes beside every use_transformer_engine_op_fuser it turns on for the experts;
# - earlier versions: scripts/performance/configs/<family>/*workload_base_configs.py, the
#   WorkloadBaseConfig named ``<MODEL>_PRETRAIN_CONFIG_<GPU>_<PRECISION>_V<n>`` whose GPU count,
#   global and micro batch are the row's; its cutedsl_fused_grouped_mlp field (PR 3983, first in
#   0.5.0) turns the op fuser on (scripts/performance/utils/overrides.py). Before that field no
#   perf configuration or recipe turned the op fuser on (neither the field, the op fuser nor the
#   variable appear in scripts/ or src/megatron/bridge/recipes at tags v0.2.0 to v0.4.2; 0.1.0,
#   of 25.09, has no tag), so rows of older versions are read as without it.

#: The first Megatron-Bridge version whose perf configurations can turn the fused MLP on.
FIRST_FUSED_VERSION = (0, 5, 0)

#: A row's precision label -> the spelling of upstream's config names and of its perf functions.
_PRECISION_NAMES = {
    "MXFP8": ("FP8_MX", "fp8mx"),
    "FP8-MX": ("FP8_MX", "fp8mx"),
    "FP8-CS": ("FP8_CS", "fp8cs"),
    "FP8": ("FP8_CS", "fp8cs"),
    "BF16": ("BF16", "bf16"),
    "NVFP4": ("NVFP4", "nvfp4"),
}
_FUSED_FIELD = "cutedsl_fused_grouped_mlp"
_FUSED_ENV = re.compile(r"[\"']NVTE_CUTEDSL_FUSED_GROUPED_MLP[\"']\s*:\s*[\"']?1\b")
_PERF_RECIPES = "src/megatron/bridge/perf_recipes/"
_WORKLOAD_CONFIGS = "scripts/performance/configs/"


def release_versions(versions_json: str) -> dict[str, str]:
    """Each NeMo container release -> the Megatron-Bridge version it ships, from upstream's
    docs/versions1.json entries named "<version> · <release>" (or "<version> (latest) · ...")."""
    found = {}
    for entry in json.loads(versions_json):
        name = entry.get("name", "")
        if "·" in name:
            found[name.split("·")[1].strip()] = entry["version"]
    return found


class Upstream:
    """Reads files of the upstream repository at a tag, each file once, and parses each once."""

    def __init__(self, repository: str) -> None:
        self.repository = repository
        self._texts: dict[tuple[str, str], str] = {}
        self._trees: dict[tuple[str, str], ast.Module] = {}
        self._listings: dict[tuple[str, str], tuple[str, ...]] = {}
        self._tags: dict[str, bool] = {}
        self._configs: dict[str, dict[str, dict[str, object]]] = {}

    def show(self, tag: str, path: str) -> str:
        """The text of ``path`` at ``tag``."""
        if (tag, path) not in self._texts:
            self._texts[tag, path] = _git_show(self.repository, tag, path)
        return self._texts[tag, path]

    def tree(self, tag: str, path: str) -> ast.Module:
        """The Python module ``path`` at ``tag``, parsed."""
        if (tag, path) not in self._trees:
            self._trees[tag, path] = ast.parse(self.show(tag, path))
        return self._trees[tag, path]

    def has(self, tag: str) -> bool:
        """Whether the repository holds ``tag``."""
        if tag not in self._tags:
            found = subprocess.run(
                ["git", "-C", self.repository, "rev-parse", "--verify", "-q", f"{tag}^{{commit}}"],
                capture_output=True,
            )
            self._tags[tag] = found.returncode == 0
        return self._tags[tag]

    def workload_paths(self, tag: str) -> list[str]:
        """The workload_base_configs modules under scripts/performance/configs at ``tag``."""
        return [
            p for p in self.files(tag, _WORKLOAD_CONFIGS) if p.endswith("workload_base_configs.py")
        ]

    def configs(self, tag: str) -> dict[str, dict[str, object]]:
        """Every WorkloadBaseConfig of the workload modules at ``tag`` as its fields
        (:func:`workload_configs` over the class's defaults in scripts/performance/utils)."""
        if tag not in self._configs:
            defaults = class_defaults(
                self.show(tag, "scripts/performance/utils/utils.py"), "WorkloadBaseConfig"
            )
            self._configs[tag] = {
                name: fields
                for path in self.workload_paths(tag)
                for name, fields in workload_configs(self.show(tag, path), defaults).items()
            }
        return self._configs[tag]

    def files(self, tag: str, under: str) -> tuple[str, ...]:
        """The files under the folder ``under`` at ``tag``."""
        if (tag, under) not in self._listings:
            out = subprocess.run(
                ["git", "-C", self.repository, "ls-tree", "-r", "--name-only", tag, under],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            self._listings[tag, under] = tuple(out.split())
        return self._listings[tag, under]


def _literal(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None  # an expression the configs compute; no field read here is one


def workload_configs(text: str, defaults: dict[str, object]) -> dict[str, dict[str, object]]:
    """The WorkloadBaseConfig assignments of a workload_base_configs module, each as its fields:
    ``NAME = WorkloadBaseConfig(...)``, ``NAME = replace(OTHER, ...)`` and ``NAME = OTHER``
    evaluated in order over the class's ``defaults``."""
    configs: dict[str, dict[str, object]] = {}
    for node in ast.parse(text).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not isinstance(target, ast.Name):
            continue
        if isinstance(value, ast.Name) and value.id in configs:
            configs[target.id] = configs[value.id]
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            fields = {k.arg: _literal(k.value) for k in value.keywords if k.arg}
            if value.func.id == "WorkloadBaseConfig":
                configs[target.id] = {**defaults, **fields}
            elif (
                value.func.id == "replace"
                and value.args
                and isinstance(value.args[0], ast.Name)
                and value.args[0].id in configs
            ):
                configs[target.id] = {**configs[value.args[0].id], **fields}
    return configs


def class_defaults(text: str, name: str) -> dict[str, object]:
    """The literal defaults of the dataclass ``name``'s annotated fields in module ``text``."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {
                item.target.id: _literal(item.value)
                for item in node.body
                if isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and item.value is not None
            }
    raise ValueError(f"no class {name}")


def _perf_function(
    upstream: Upstream, tag: str, function: str
) -> tuple[str, ast.FunctionDef] | None:
    """(path, definition) of upstream's perf function ``function`` at ``tag``; None when no perf
    recipe defines it."""
    for path in upstream.files(tag, _PERF_RECIPES):
        if not path.endswith(".py"):
            continue
        if f"def {function}(" not in upstream.show(tag, path):
            continue
        for node in upstream.tree(tag, path).body:
            if isinstance(node, ast.FunctionDef) and node.name == function:
                return path, node
    return None


def _workload_flag(upstream: Upstream, tag: str, row: dict, precision: str, field: str) -> bool:
    """The row's boolean ``field`` among the workload configs of ``tag``: the config named for
    the row's model, GPU and precision whose GPU count, global and micro batch are the row's
    (all such configs when none is), which must agree. False when no workload config of ``tag``
    names the field, or none of the model's configs on this GPU sets it."""
    if not any(field in upstream.show(tag, p) for p in upstream.workload_paths(tag)):
        return False
    # The row's model and GPU in the configs' names: <MODEL>_PRETRAIN_CONFIG_<GPU>_<PRECISION>_V<n>
    # (0.3.0 on) and <MODEL>_<GPU>_<PRECISION>_BASE_CONFIG (0.2.0).
    model, gpu = re.escape(row["model"].upper()), re.escape(row["system"].removeprefix("DGX-"))
    pattern = re.compile(
        rf"^{model}_(?:PRETRAIN_CONFIG_)?{gpu}_(?P<precision>[A-Z0-9_]+?)(?:_V\d+|_BASE_CONFIG)$"
    )
    candidates = {}
    named = {}
    for name, fields in upstream.configs(tag).items():
        parts = pattern.match(name)
        if parts:
            candidates[name] = fields
            if parts["precision"] == precision:
                named[name] = fields
    matching = [
        f
        for f in named.values()
        if (f.get("num_gpus"), f.get("global_batch_size"), f.get("micro_batch_size"))
        == (row["gpus"], row["gbs"], row["mbs"])
    ]
    chosen = matching or list(named.values())
    flags = {bool(f.get(field)) for f in chosen}
    if len(flags) == 1:
        return flags.pop()
    if not chosen and not any(f.get(field) for f in candidates.values()):
        return False  # no config of the model on this GPU sets the field
    raise ValueError(
        f"{tag}: {row['model']} {row['system']} {row['precision']} GBS {row['gbs']}: the "
        f"workload configs {sorted(named) or sorted(candidates)} do not say one {field}."
    )


def _perf_names(row: dict) -> tuple[str, str]:
    """(the row's perf function name, its precision in workload config names)."""
    if row["precision"] not in _PRECISION_NAMES:
        raise ValueError(f"precision {row['precision']!r} has no entry in _PRECISION_NAMES.")
    config_precision, function_precision = _PRECISION_NAMES[row["precision"]]
    gpu = row["system"].removeprefix("DGX-").lower()
    function = f"{row['model']}_pretrain_{row['gpus']}gpu_{gpu}_{function_precision}_config"
    return function, config_precision


def fused_grouped_mlp(upstream: Upstream, tag: str, row: dict) -> bool:
    """Whether the run of ``row`` had the experts' fused grouped MLP, from version ``tag``."""
    function, config_precision = _perf_names(row)
    found = _perf_function(upstream, tag, function)
    if found is not None:
        path, node = found
        return bool(_FUSED_ENV.search(ast.get_source_segment(upstream.show(tag, path), node) or ""))
    if upstream.files(tag, _PERF_RECIPES) and not upstream.files(tag, _WORKLOAD_CONFIGS):
        raise ValueError(f"{tag}: no perf function {function} for {row['release']}.")
    return _workload_flag(upstream, tag, row, config_precision, _FUSED_FIELD)


# --- which runs overlapped the EP all-to-alls ---------------------------------------------------
#
# A MoE row's ``ep_overlap`` says whether its run set CommOverlapConfig's
# overlap_moe_expert_parallel_comm, read from the same version's perf configuration:
# - perf functions (0.6.0 on): the last value the function gives the knob, following the calls it
#   makes to functions of upstream's package (the recipe it starts from, the helpers that apply a
#   configuration) in the order they run: ``cfg.comm_overlap.overlap_moe_expert_parallel_comm = X``,
#   or ``cfg.comm_overlap = CommOverlapConfig(...)``, which sets the keyword's value or, without it,
#   the field's default (off). A value set under a condition or a loop is refused, not guessed;
# - earlier versions: the row's WorkloadBaseConfig's moe_a2a_overlap field, which
#   scripts/performance/utils/overrides.py ``_set_moe_a2a_overlap_overrides`` (helpers.py
#   ``set_moe_a2a_overlap_overrides`` in 0.2.0) turns into overlap_moe_expert_parallel_comm = True
#   and delay_wgrad_compute = True.
# A release whose version has no tag in the repository (25.09's 0.1.0) keeps no ``ep_overlap``:
# its rows are predicted with the recipe's own setting.

_EP_FIELD = "moe_a2a_overlap"
_EP_KNOB = "overlap_moe_expert_parallel_comm"
_PACKAGE = "src/megatron/bridge/"
_CONTROL_FLOW = (ast.If, ast.For, ast.While, ast.Try, ast.With, ast.Match)


def _module_path(upstream: Upstream, tag: str, module: str) -> str | None:
    """The file of upstream's module ``module`` (``megatron.bridge....``) at ``tag``."""
    if not module.startswith("megatron.bridge."):
        return None
    stem = "src/" + module.replace(".", "/")
    listed = set(upstream.files(tag, _PACKAGE))
    for path in (f"{stem}.py", f"{stem}/__init__.py"):
        if path in listed:
            return path
    return None


def _definition(
    upstream: Upstream, tag: str, path: str, name: str
) -> tuple[str, ast.FunctionDef] | None:
    """(path, definition) of the function ``name`` as module ``path`` sees it: defined there or
    imported from another module of upstream's package (followed through re-exports)."""
    for node in upstream.tree(tag, path).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return path, node
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = _module_path(upstream, tag, node.module)
                    return _definition(upstream, tag, source, alias.name) if source else None
    return None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _knob_value(
    upstream: Upstream,
    tag: str,
    path: str,
    function: ast.FunctionDef,
    knob: str,
    calling: tuple[tuple[str, str], ...] = (),
) -> bool | None:
    """The last value ``function`` (module ``path``) gives CommOverlapConfig's ``knob``, through
    the functions of upstream's package it calls, in the order they run; None when it sets none.
    ``calling``: the functions whose calls led here (a recursive call is refused)."""
    calling = (*calling, (path, function.name))
    value: bool | None = None

    def set_to(node: ast.expr, statement: ast.AST, under_condition: bool) -> None:
        nonlocal value
        if under_condition:
            raise ValueError(
                f"{tag} {path}: {function.name} sets {knob} under a condition "
                f"(line {statement.lineno}); the run's value cannot be read."
            )
        literal = _literal(node)
        if not isinstance(literal, bool):
            raise ValueError(f"{tag} {path}:{statement.lineno}: {knob} = {ast.unparse(node)}.")
        value = literal

    def visit(node: ast.AST, under_condition: bool) -> None:
        nonlocal value
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr == knob:
                    set_to(node.value, node, under_condition)
                elif (
                    isinstance(target, ast.Attribute)
                    and target.attr == "comm_overlap"
                    and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name)
                    and node.value.func.id == "CommOverlapConfig"
                ):
                    given = _keyword(node.value, knob)
                    set_to(
                        given if given is not None else ast.Constant(False), node, under_condition
                    )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            found = _definition(upstream, tag, path, node.func.id)
            if found is not None:
                if (found[0], found[1].name) in calling:
                    raise ValueError(f"{tag} {found[0]}: {found[1].name} calls itself.")
                inner = _knob_value(upstream, tag, *found, knob, calling)
                if inner is not None:
                    if under_condition:
                        raise ValueError(
                            f"{tag} {path}: {function.name} calls {node.func.id}, which sets "
                            f"{knob}, under a condition (line {node.lineno})."
                        )
                    value = inner
        nested = under_condition or isinstance(node, _CONTROL_FLOW)
        for child in ast.iter_child_nodes(node):
            visit(child, nested)

    for statement in function.body:
        visit(statement, False)
    return value


def ep_overlap(upstream: Upstream, tag: str, row: dict) -> bool:
    """Whether the run of ``row`` overlapped its EP all-to-alls, from version ``tag``."""
    function, config_precision = _perf_names(row)
    found = _perf_function(upstream, tag, function)
    if found is not None:
        return bool(_knob_value(upstream, tag, *found, _EP_KNOB))
    if upstream.files(tag, _PERF_RECIPES) and not upstream.files(tag, _WORKLOAD_CONFIGS):
        raise ValueError(f"{tag}: no perf function {function} for {row['release']}.")
    return _workload_flag(upstream, tag, row, config_precision, _EP_FIELD)


def add_run_settings(rows: list[dict], upstream: Upstream, versions: dict[str, str]) -> None:
    """Set ``fused_grouped_mlp`` and ``ep_overlap`` on every MoE row (before its throughput
    columns)."""
    for i, row in enumerate(rows):
        if row["model"] not in MOE_MODELS or row.get("reason"):
            continue
        if row["release"] not in versions:
            raise ValueError(f"release {row['release']} has no version in docs/versions1.json.")
        version = versions[row["release"]]
        tag = f"v{version}"
        numbers = tuple(int(part) for part in version.split("."))
        settings: dict[str, bool] = {
            "fused_grouped_mlp": numbers >= FIRST_FUSED_VERSION
            and fused_grouped_mlp(upstream, tag, row)
        }
        if upstream.has(tag):
            settings["ep_overlap"] = ep_overlap(upstream, tag, row)
        keys = list(row)
        at = keys.index("tokens_per_s_per_gpu")
        rows[i] = {**{k: row[k] for k in keys[:at]}, **settings, **{k: row[k] for k in keys[at:]}}


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if re.fullmatch(r"[A-Za-z][\w .\-]*", text) and text not in (
        "null",
        "true",
        "false",
        "yes",
        "no",
    ):
        return text
    return "'" + text.replace("'", "''") + "'"


HEADER = """\
# Every pre-training row NVIDIA publishes for Megatron-Bridge: docs/performance-summary.md (the
# current release) and docs/performance-summary-archive.md (every earlier release), Megatron-Bridge
# commit {commit}. Written by scripts/published_rows.py from those two pages; do not edit by hand.
# A cell holding a bracketed second figure ("FP8-CS (FP8-MX)", "37556 (36108)", "64 (0)") is two
# rows, the second taking every bracketed figure. The 25.09 tables have no precision column: their
# plain figures are FP8-CS, the bracketed ones FP8-MX (the tables' footnote: the other quantization
# granularity, 32x32 blocks). SFT and LoRA tables are not here.
#
# Columns as published: system, gpus, precision (the table's label), gbs, mbs, seq_length, fsdp
# (the FSDP column is non-zero: Megatron-FSDP; without the column, whether upstream's perf recipes
# of the model run it), tp, pp, cp, vp (null for "n/a" or 1), ep (1 for
# "n/a"), tokens_per_s_per_gpu and model_tflops_per_gpu; published_model is the table's model name
# with its annotation ("(w/o MTP)", "(tokendrop)"); release: the NeMo container release; source:
# the page. model: the recipe name here (deepseek_v4_flash, nemotron_3_super and nemotron_3_ultra
# name a recipe only where one exists).
# Added from upstream's recipes (see scripts/published_rows.py for each source): etp (upstream's
# recipes of the MoE models set expert_tensor_parallel_size = 1), pipeline_layout (megatron-core's
# string form; DeepSeek-V3 and Kimi-K2 recipes' layout for the row's PP and VP), hsdp_groups and
# outer_dp_sharding_strategy (Megatron-FSDP sharded within groups: num_distributed_optimizer_instances
# and the DDP config's field; Nemotron 3 Ultra's recipes), mtp: false (a
# run published without MTP), reason (a run whose setting the tables leave out),
# fused_grouped_mlp (MoE rows: the run computed the routed experts in Transformer Engine's fused
# grouped MLP) and ep_overlap (MoE rows: the run set overlap_moe_expert_parallel_comm), both read
# from the perf configuration of the Megatron-Bridge version of the row's release,
# docs/versions1.json and its tag (ep_overlap left out for a version without a tag).
"""


def render(rows: list[dict], commit: str) -> str:
    """The data file's text: the header, then one flow mapping per row."""
    lines = [HEADER.format(commit=commit).rstrip("\n")]
    for row in rows:
        lines.append("- {" + ", ".join(f"{k}: {_scalar(v)}" for k, v in row.items()) + "}")
    return "\n".join(lines) + "\n"


def _git_show(upstream: str, rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", upstream, "show", f"{rev}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="a Megatron-Bridge git repository")
    parser.add_argument("--rev", default="HEAD", help="the commit to read (default HEAD)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    try:
        commit = subprocess.run(
            ["git", "-C", args.upstream, "rev-parse", "--short", args.rev],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        current = _git_show(args.upstream, args.rev, CURRENT)
        archive = _git_show(args.upstream, args.rev, ARCHIVE)
        versions = release_versions(_git_show(args.upstream, args.rev, VERSIONS))
        rows = collect(current, archive)
        add_run_settings(rows, Upstream(args.upstream), versions)
        text = render(rows, commit)
    except subprocess.CalledProcessError as exc:
        print(
            f"error: --upstream {args.upstream} --rev {args.rev}: {exc.stderr.strip()}",
            file=sys.stderr,
        )
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if ROWS_FILE.read_text() != text:
            print(f"{ROWS_FILE.name} is stale: run scripts/published_rows.py", file=sys.stderr)
            return 1
        return 0
    ROWS_FILE.write_text(text)
    print(f"{ROWS_FILE}: {text.count(chr(10) + '- ')} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
