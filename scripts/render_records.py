"""Write ``megatron/bridge/utils/record_code.py``: the ``__init__`` of every record class of the
package, compiled once with the module instead of at each import.

    uv run python scripts/render_records.py           # rewrite the module
    uv run python scripts/render_records.py --check   # change nothing; exit 1 when it is stale

Every module of the package is imported, so that :func:`megatron.bridge.utils.records.record`
has generated the ``__init__`` source text of each of its classes
(:data:`~megatron.bridge.utils.records.INIT_SOURCES`); the module holds each distinct text as a
function definition, keyed by the text itself, so a class uses it only when its text is exactly
the one compiled.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import warnings
from pathlib import Path
from types import ModuleType

import megatron.bridge
from megatron.bridge.utils.records import INIT_SOURCES

TARGET = Path(__file__).resolve().parent.parent / "megatron" / "bridge" / "utils" / "record_code.py"

_HEADER = '''"""Ready-made ``__init__`` factories of the package's record classes, keyed by their source text.

Written by ``python scripts/render_records.py`` from the text
:func:`megatron.bridge.utils.records.record` generates for each class of the package;
``tests/unit_tests/utils/test_records.py`` fails when this module differs from it. A class whose
text is not here compiles its own ``__init__``.
"""

# ruff: noqa
# fmt: off

from collections.abc import Callable
from typing import Any

FACTORIES: dict[str, Callable[..., Any]] = {}
'''


def package_modules() -> list[ModuleType]:
    """Every module of the package, imported (but ``__main__`` modules, which run a command line,
    and a module of an optional extra that is not installed)."""
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


def package_sources() -> dict[str, str]:
    """``module:QualName`` -> ``__init__`` source text, for every record class a module of the
    package defines (:func:`package_modules` imports them)."""
    package_modules()
    # A class defined inside a function exists only once the function runs: it compiles its own.
    return {
        name: text
        for name, text in INIT_SOURCES.items()
        if name.startswith("megatron.") and "<locals>" not in name
    }


def render(sources: dict[str, str]) -> str:
    """The module's text: each distinct source once, after the names of the classes using it."""
    users: dict[str, list[str]] = {}
    for name in sorted(sources):
        users.setdefault(sources[name], []).append(name)
    parts = [_HEADER]
    for text, names in users.items():
        comment = "".join(f"# {name}\n" for name in names)
        parts.append(f"\n{comment}{text}FACTORIES[{text!r}] = __create_fn__\n")
    return "".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the module is stale")
    args = parser.parse_args()
    text = render(package_sources())
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET.name} is stale: run python scripts/render_records.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET} ({text.count('FACTORIES[')} functions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
