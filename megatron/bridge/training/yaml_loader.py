"""The YAML loader of config files and of ``KEY=VALUE`` overrides (:class:`YamlLoader`).

Its own module so that only the routes that read YAML import PyYAML: the plan, the estimate and
``bridge-overlap explain`` without overrides never do.
"""

from __future__ import annotations

import re

import yaml

__all__ = ["YamlLoader"]

_BOOL_TAG = "tag:yaml.org,2002:bool"


class YamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose booleans are ``true``/``false`` only (YAML 1.2's core schema):
    ``yes``/``no``/``on``/``off`` stay strings, so a bool field refuses them by name instead of
    reading a typo or a word meant as text as a bool. The loader of YAML files and of
    ``KEY=VALUE`` overrides."""


YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
YamlLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
