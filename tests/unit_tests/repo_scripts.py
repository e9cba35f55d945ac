"""The repository's scripts and examples, loaded as modules by the tests that exercise them."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""


@functools.cache
def load_script(relative: str) -> ModuleType:
    """The Python file at ``relative`` (to the repository's root) as a module named after the
    file, loaded once per test process."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
