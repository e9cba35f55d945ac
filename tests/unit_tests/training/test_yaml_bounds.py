"""The YAML loaders' bounds (megatron/bridge/training/yaml_loader.py): aliases, nesting depth and
text size are refused with a ValueError naming the line and the fix, on every route that reads
a config document or a ``KEY=VALUE`` value."""

from __future__ import annotations

import pytest
import yaml

from megatron.bridge.training import yaml_loader
from megatron.bridge.training.config_codec import read_document
from megatron.bridge.training.override_syntax import parse_value
from megatron.bridge.training.userbuffers_file import load_preset

# Nine times nine times ... "lol": a 250-byte text that PyYAML alone expands to 9**6 strings.
_LAUGHS = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 6)
)


def test_an_expanding_alias_document_is_refused_at_its_first_alias():
    with pytest.raises(ValueError, match=r"alias \*a0 refused.*write the value out") as error:
        read_document(_LAUGHS)
    assert "line 2" in str(error.value)


def test_a_self_referring_alias_is_refused():
    with pytest.raises(ValueError, match=r"alias \*x refused"):
        read_document("model: &x\n  inner: *x\n")


def test_a_merge_key_alias_is_refused_too():
    with pytest.raises(ValueError, match=r"alias \*base refused"):
        read_document("base: &base {hidden_size: 4}\nmodel:\n  <<: *base\n")


@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")])
def test_nesting_deeper_than_the_bound_is_refused(opening, closing):
    depth = yaml_loader.MAX_DEPTH + 1
    text = "model: " + opening * depth + "1" + closing * depth + "\n"
    with pytest.raises(ValueError, match=f"nested deeper than {yaml_loader.MAX_DEPTH} levels"):
        read_document(text)


def test_nesting_at_the_bound_is_read():
    depth = yaml_loader.MAX_DEPTH - 1  # the top-level mapping is one level
    doc, _ = read_document("model: " + "[" * depth + "1" + "]" * depth + "\n")
    inner = doc["model"]
    for _ in range(depth - 1):
        inner = inner[0]
    assert inner == [1]


def test_a_text_over_the_size_bound_is_refused_unread(monkeypatch):
    monkeypatch.setattr(yaml_loader, "MAX_CHARACTERS", 100)
    with pytest.raises(ValueError, match="over the 100 a config may hold"):
        read_document("model:\n  hidden_size: 4\n" + "# padding\n" * 20)


def test_an_override_value_with_an_alias_is_read_as_text_not_expanded():
    # A KEY=VALUE value that is not plain YAML stays the text typed; the field's type check
    # then refuses it by name.
    value = "[&a [1, 1], [*a, *a]]"
    assert parse_value(value) == value


def test_the_bounded_loaders_read_what_safe_load_reads():
    text = "model:\n  hidden_size: 4096\n  layers: [1, 2, {a: b}]\nddp:\n  bucket_size: null\n"
    assert yaml_loader.load(text, yaml_loader.BoundedSafeLoader) == yaml.safe_load(text)
    assert read_document(text)[0] == yaml.safe_load(text)


def test_a_userbuffers_file_with_an_alias_is_refused(tmp_path):
    preset = tmp_path / "ub.yaml"
    preset.write_text("base: &b {method: ring_exchange}\nqkv_fprop: *b\n")
    with pytest.raises(ValueError, match=r"line 2 column 12: invalid YAML \(alias \*b refused"):
        load_preset(str(preset))
