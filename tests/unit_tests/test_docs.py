"""Every ```python block under docs/ runs: docs that drift from the code fail here.

Blocks of one page run in order in one shared namespace, as a reader would paste them, with
nothing patched. Blocks that are not Python use another fence (```text; ```bash blocks run
command by command in test_docs_generated.py).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def code_blocks(page: Path) -> list[tuple[str, int, str]]:
    """(fence info, first line number, code) of every fenced block of ``page``."""
    text = page.read_text()
    return [
        (m["info"].strip(), text.count("\n", 0, m.start()) + 2, m["body"])
        for m in FENCE.finditer(text)
    ]


PAGES = sorted(DOCS.rglob("*.md"))


def test_docs_exist_and_have_python_blocks():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert {"training/README.md", "training/communication-overlap.md"} <= names
    assert sum(info == "python" for p in PAGES for info, _, _ in code_blocks(p)) >= 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_python_fences_are_spelled_python(page):
    # A ```py or ```python3 block would silently escape the run below.
    odd = [(line, info) for info, line, _ in code_blocks(page) if info.startswith("py")]
    assert all(info == "python" for _, info in odd), odd


def test_enablement_runs_on_a_real_recipe():
    page = (DOCS / "training" / "communication-overlap.md").read_text()
    blocks = [
        body
        for info, _, body in code_blocks(DOCS / "training" / "communication-overlap.md")
        if info == "python"
    ]
    enablement = next(
        b for b in blocks if "cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)" in b
    )
    for line in (
        "cfg.model.virtual_pipeline_model_parallel_size = 2",
        "cfg.ddp.overlap_param_gather = True",
        "cfg.comm_overlap.tp_comm_overlap_cfg = userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048",
        "cfg.mixed_precision.fp8_param_gather = False",
    ):
        assert line in enablement
    assert page.index('get_recipe("gpt3_175b")') < page.index(enablement)


@pytest.fixture
def devnull_stdin(monkeypatch):
    # NeMo-Run's local tunnel forwards stdin to the shell commands it runs; pytest's captured
    # stdin refuses reads, so give the blocks what a batch job has: nothing.
    with open(os.devnull) as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        yield


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if any(info == "python" for info, _, _ in code_blocks(p))],
    ids=lambda p: p.relative_to(DOCS).as_posix(),
)
def test_python_blocks_run(page, devnull_stdin):
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    ran = 0
    # As a user pastes them: no patches (a block that needs "TE installed" says te="assume").
    for info, line, body in code_blocks(page):
        if info != "python":
            continue
        code = compile(body, f"{page.relative_to(DOCS)}:{line}", "exec")
        exec(code, namespace)
        ran += 1
    assert ran > 0
