"""The repository's scripts and examples, loaded as modules by the tests that exercise them, and
the package's own modules, imported for the tests that walk every class."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import sys
import warnings
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


def package_modules() -> list[ModuleType]:
    """Every module of the package, imported (but ``__main__`` modules, which run a command line,
    and a module of an optional extra that is not installed)."""
    import megatron.bridge

    modules = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # megatron-core's import-time notes about TE and Apex
        for info in pkgutil.walk_packages(megatron.bridge.__path__, "megatron.bridge."):
            if info.name.endswith(".__main__"):
                continue
            try:
                modules.append(importlib.import_module(info.name))
            except ImportError:
                continue
    return modules
