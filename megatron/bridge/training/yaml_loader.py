"""The YAML loaders of configs, userbuffers files and ``KEY=VALUE`` overrides, with bounds.

Its own module so that only the routes that read YAML import PyYAML: the plan, the estimate and
``bridge-overlap explain`` without overrides never do.

Every loader here reads a document of plain data with three bounds, each refused with a
``yaml.YAMLError`` that names the line and the fix (callers turn it into a ``ValueError``):

- no aliases (``*name``): a config is data written out, and an alias is the way a small text
  expands without bound (the "billion laughs" document) or refers to itself;
- at most :data:`MAX_DEPTH` levels of nested mappings and sequences;
- at most :data:`MAX_CHARACTERS` characters of text.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent

__all__ = ["MAX_CHARACTERS", "MAX_DEPTH", "BoundedSafeLoader", "YamlLoader", "load"]

MAX_DEPTH = 64
"""Levels of nested mappings and sequences a document may hold (a ConfigContainer needs 4)."""

MAX_CHARACTERS = 4 * 1024 * 1024
"""Characters a YAML text may hold (a full ConfigContainer document is some 20 thousand)."""

_BOOL_TAG = "tag:yaml.org,2002:bool"


class BoundedSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases and nesting deeper than :data:`MAX_DEPTH`."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            event = self.get_event()
            raise ComposerError(
                None,
                None,
                f"alias *{event.anchor} refused: configs are read without anchors and aliases "
                "(they let a short text expand without bound); write the value out",
                event.start_mark,
            )
        if not self.check_event(MappingStartEvent, SequenceStartEvent):
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            raise ComposerError(
                None,
                None,
                f"nested deeper than {MAX_DEPTH} levels of mappings and sequences; a config "
                "is a few levels deep",
                self.peek_event().start_mark,
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class YamlLoader(BoundedSafeLoader):
    """:class:`BoundedSafeLoader` whose booleans are ``true``/``false`` only (YAML 1.2's core
    schema): ``yes``/``no``/``on``/``off`` stay strings, so a bool field refuses them by name
    instead of reading a typo or a word meant as text as a bool. The loader of YAML files and of
    ``KEY=VALUE`` overrides."""


YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
YamlLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load(text: str, loader: type[BoundedSafeLoader] = YamlLoader) -> Any:
    """``text`` read by ``loader``; a text over :data:`MAX_CHARACTERS` is refused unread, and
    every bound is a ``yaml.YAMLError``."""
    if len(text) > MAX_CHARACTERS:
        raise yaml.YAMLError(
            f"the text holds {len(text):,} characters, over the {MAX_CHARACTERS:,} a config may "
            "hold; is this the right file?"
        )
    return yaml.load(text, Loader=loader)  # a SafeLoader: no arbitrary objects
