"""The migration section of the overlap docs, held to the rules it names.

"Where the plan resolves differently from upstream" has one bullet per difference, each naming
the rule that implements it (``Rule: `name```, a name under ``megatron.bridge.training``). The
rules that differ carry ``upstream_divergence.differs_from_upstream``. A bullet naming a rule that
is gone or unmarked fails here, and so does a marked rule no bullet names.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

import megatron.bridge.training.comm_overlap  # noqa: F401  (imports every marked rule)
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.upstream_divergence import (
    DIVERGENT_RULES,
    differs_from_upstream,
    rule_name,
)
from tests.unit_tests.jobs import OPTIONAL_BOOL_KNOBS

DOC = Path(__file__).resolve().parents[3] / "docs" / "training" / "communication-overlap.md"
DIFFERENCES = "### Where the plan resolves differently from upstream"
REFUSALS = "### Refusals megatron-core's config checks do not make"
RULE = re.compile(r"Rules?: (`[\w.]+`(?:,\s+`[\w.]+`)*)")

# Upstream Megatron-Bridge's CommOverlapConfig fields (src/megatron/bridge/training/
# comm_overlap.py:384-398 at 067f987): its optional boolean knobs and these.
UPSTREAM_FIELDS = {
    "tp_comm_overlap",
    "tp_comm_overlap_cfg",
    "tp_comm_bootstrap_backend",
    "bucket_size",
    "wgrad_deferral_limit",
    "data_parallel_size",
    *OPTIONAL_BOOL_KNOBS,
}


def section(heading: str) -> str:
    text = DOC.read_text()
    start = text.index(heading) + len(heading)
    end = text.index("\n### ", start)
    return text[start:end]


def bullets(heading: str) -> list[str]:
    """The top-level bullets under ``heading``, each as one line of text."""
    found: list[str] = []
    for line in section(heading).splitlines():
        if line.startswith("- "):
            found.append(line[2:])
        elif found and line.startswith("  "):
            found[-1] += " " + line.strip()
        elif line.strip() and found:
            break
    return found


def named_rules(bullet: str) -> list[str]:
    return [n.strip("` ") for m in RULE.findall(bullet) for n in m.split(",")]


def resolve(name: str) -> object:
    """The object a rule name points at, importing the longest module prefix."""
    parts = ("megatron.bridge.training." + name).split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


@pytest.mark.parametrize("bullet", bullets(DIFFERENCES), ids=lambda b: b[:40])
def test_each_difference_names_marked_rules_and_upstreams_line(bullet: str) -> None:
    names = named_rules(bullet)
    assert names, f"no 'Rule: `...`' in: {bullet}"
    for name in names:
        resolve(name)  # AttributeError / ModuleNotFoundError: the rule is gone
        assert name in DIVERGENT_RULES, f"{name} is not marked differs_from_upstream"
    assert re.search(r"\blines? \d+|\.(py|md):\d+", bullet), f"no upstream line in: {bullet}"
    assert "Upstream's result" in bullet or "no upstream result" in bullet, bullet


def test_every_marked_rule_has_a_bullet() -> None:
    named = {n for b in bullets(DIFFERENCES) for n in named_rules(b)}
    assert set(DIVERGENT_RULES) - named == set()


@pytest.mark.parametrize("bullet", bullets(REFUSALS), ids=lambda b: b[:40])
def test_each_listed_refusal_names_an_existing_rule(bullet: str) -> None:
    names = named_rules(bullet)
    assert names, f"no 'Rule: `...`' in: {bullet}"
    for name in names:
        assert callable(resolve(name)), name


def test_the_project_only_fields_are_listed() -> None:
    ours = {f.name for f in dataclasses.fields(CommOverlapConfig)}
    assert ours >= UPSTREAM_FIELDS
    project_only = ours - UPSTREAM_FIELDS
    (listing,) = [
        b for b in bullets(DIFFERENCES) if b.startswith("**Fields upstream does not have")
    ]
    for field in project_only:
        assert f"`{field}`" in listing, field


def test_a_rule_name_is_its_path_under_the_training_package() -> None:
    from megatron.bridge.training.comm_overlap.rules import dp

    assert rule_name(dp.derive_overlap_param_gather) == (
        "comm_overlap.rules.dp.derive_overlap_param_gather"
    )
    assert resolve(rule_name(dp.derive_overlap_param_gather)) is dp.derive_overlap_param_gather


def test_a_mark_needs_a_summary() -> None:
    with pytest.raises(ValueError, match="needs a summary"):
        differs_from_upstream("  ")
