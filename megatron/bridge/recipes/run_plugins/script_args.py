"""What the NeMo-Run plugins pass to a ``run.Script`` task: the ``*ScriptArgs`` dataclasses a
``script_args_converter_fn`` receives, the default hydra-style converters, and how the
converted arguments are appended to the task (a knob already there wins).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import nemo_run as run

__all__ = [
    "NsysPluginScriptArgs",
    "PerfEnvPluginScriptArgs",
    "ScriptArgsConverter",
    "add_script_overrides",
    "check_converter",
    "no_script_args",
    "nsys_hydra_overrides",
    "nsys_overrides",
    "perf_env_hydra_overrides",
    "to_hydra_overrides",
]

# Each part logs under the plugins' import path, megatron.bridge.recipes.run_plugins: the
# logger name a user's logging configuration names.
logger = logging.getLogger(__package__)


@dataclasses.dataclass
class PerfEnvPluginScriptArgs:
    """What PerfEnvPlugin passes to a ``run.Script`` task, given to ``script_args_converter_fn``.

    Same fields as upstream Megatron-Bridge's, so a converter written for it works here.
    """

    enable_manual_gc: bool
    """Whether the training loop runs Python's garbage collector manually."""
    manual_gc_interval: int
    """Training steps between manual GC runs (0: none between steps)."""


@dataclasses.dataclass
class NsysPluginScriptArgs:
    """What NsysPlugin passes to a ``run.Script`` task, given to ``script_args_converter_fn``.

    The first four fields are upstream Megatron-Bridge's, with its types, so a converter written
    for it works here; the last two are this plugin's and have defaults.
    """

    profile_step_start: int
    """First profiled training step."""
    profile_step_end: int
    """Step at which profiling stops (exclusive)."""
    profile_ranks: list[int]
    """Global ranks that start the capture."""
    record_shapes: bool
    """Record operator input shapes (False when the plugin's record_shapes is None)."""
    record_memory_history: bool | None = None
    """Record the PyTorch CUDA memory history in the window; None: not passed."""
    record_shapes_set: bool = True
    """Whether the plugin's record_shapes was set (not None); the default converter passes
    ``profiling.record_shapes`` only then."""


ScriptArgs = PerfEnvPluginScriptArgs | NsysPluginScriptArgs
ScriptArgsConverter = Callable[[Any], list[str]]
"""Takes the plugin's ``*ScriptArgs`` dataclass, returns the script arguments to append."""


def _format_override_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_format_override_value(v) for v in value) + "]"
    return str(value)


def no_script_args(_script_args: Any) -> list[str]:
    """A ``script_args_converter_fn`` for tasks that take no overrides: passes nothing.

    For entry points such as ``python -m megatron.bridge.check``, which run no training loop.
    """
    return []


def to_hydra_overrides(overrides: dict[str, Any]) -> list[str]:
    """Default script-args converter: ``{"train.manual_gc": True}`` -> ``["train.manual_gc=true"]``."""
    return [f"{key}={_format_override_value(value)}" for key, value in overrides.items()]


def perf_env_hydra_overrides(args: PerfEnvPluginScriptArgs) -> list[str]:
    """Default PerfEnvPlugin converter: ``train.manual_gc=true train.manual_gc_interval=N``."""
    return to_hydra_overrides(
        {
            "train.manual_gc": args.enable_manual_gc,
            "train.manual_gc_interval": args.manual_gc_interval,
        }
    )


def nsys_overrides(args: NsysPluginScriptArgs) -> dict[str, Any]:
    """The profile window as ``profiling.*`` overrides, leaving out the optional settings the
    plugin did not set."""
    overrides: dict[str, Any] = {
        "profiling.use_nsys_profiler": True,
        "profiling.profile_step_start": args.profile_step_start,
        "profiling.profile_step_end": args.profile_step_end,
        "profiling.profile_ranks": list(args.profile_ranks),
    }
    if args.record_memory_history is not None:
        overrides["profiling.record_memory_history"] = args.record_memory_history
    if args.record_shapes_set:
        overrides["profiling.record_shapes"] = args.record_shapes
    return overrides


def nsys_hydra_overrides(args: NsysPluginScriptArgs) -> list[str]:
    """Default NsysPlugin converter: :func:`nsys_overrides` in hydra style."""
    return to_hydra_overrides(nsys_overrides(args))


def _arg_name(token: str) -> str:
    # "key=value", "--flag=value" and "--flag" (followed by its value) all name the same knob.
    return token.split("=", 1)[0]


def _starts_arg(token: str) -> bool:
    # A hydra "key=value" or an argparse "--flag"/"-f" starts an argument; anything else (a
    # number, a negative number, a bare word) is the value of the flag before it.
    if token.startswith("-"):
        return not token[1:2].isdigit() and token[1:2] != "."
    return "=" in token


def _group_args(tokens: list[str]) -> list[list[str]]:
    groups: list[list[str]] = []
    for token in tokens:
        if groups and not _starts_arg(token):
            groups[-1].append(token)
        else:
            groups.append([token])
    return groups


def add_script_overrides(
    task: run.Script,
    args: ScriptArgs,
    converter: ScriptArgsConverter | None,
    default: Callable[[Any], list[str]],
    *,
    owner: str,
) -> None:
    """Convert ``args`` once and append the result to ``task.args``; a knob already there wins."""
    if task.inline:
        logger.warning(
            "%s: run.Script(inline=...) takes no args, so %s were not passed; put them in the "
            "inline script yourself.",
            owner,
            args,
        )
        return
    tokens = (converter or default)(args)
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(
            f"{owner}.script_args_converter_fn must return a list of str, got {tokens!r} for "
            f"{args!r}."
        )
    existing = {_arg_name(arg) for arg in task.args}
    for group in _group_args(tokens):
        name = _arg_name(group[0])
        if name in existing:
            current = next(arg for arg in task.args if _arg_name(arg) == name)
            logger.info(
                "%s: script already has %r; not adding %s.", owner, current, " ".join(group)
            )
            continue
        task.args.extend(group)
        existing.add(name)
        logger.info("%s: script arg %s added.", owner, " ".join(group))


def check_converter(owner: str, value: object) -> None:
    """``TypeError`` unless ``owner``'s ``script_args_converter_fn`` is None or a callable."""
    if value is not None and not callable(value):
        raise TypeError(
            f"{owner}.script_args_converter_fn must be None or a callable taking the plugin's "
            f"*ScriptArgs dataclass and returning a list of str, got {value!r}."
        )
