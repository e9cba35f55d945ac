"""A recipe's environment variables (``ConfigContainer.env_vars``): checked, planned, exported.

:func:`check_env_vars` is the check every source of ``env_vars`` meets (names, scalar values, no
secrets, integer variables in range). :func:`plan_env_vars` splits the checked variables against
a live environment into those to export and those the environment already sets (launcher and
shell values win); :func:`export_env_vars` exports the first and logs both.

The variables a user set are theirs (:func:`user_env_vars` tells them from what a recipe
derived): :func:`with_user_env` lays them over a launch plan, kept as written, and refuses only
a value that breaks what the layout requires. ``PerfEnvPlugin`` and ``bridge-overlap explain``
read that plan.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from megatron.bridge.training import launch_env
from megatron.bridge.training.launch_env import LaunchEnvEntry, LaunchEnvPlan
from megatron.bridge.training.validators import LIMITS
from megatron.bridge.training.value_types import ConfigValueError

__all__ = [
    "AppliedEnvVars",
    "DerivedEnv",
    "EnvValue",
    "check_env_var_name",
    "check_env_vars",
    "env_var_text",
    "export_env_vars",
    "forget_exports",
    "is_users_value",
    "launcher_environment",
    "plan_env_vars",
    "user_env_vars",
    "with_user_env",
]

logger = logging.getLogger(__name__)


EnvValue = str | int | float | bool
"""A value ``ConfigContainer.env_vars`` may hold: a scalar, exported as ``str(value)``."""

#: Names that look like credentials. Configs are serialized (``to_yaml``, ``write_run_config``)
#: and shared with the run's results, so a secret has no place in one: pass it on the launcher.
_SECRET_NAME = re.compile(r"(_API_KEY$|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


def env_var_text(value: EnvValue) -> str:
    """The string a scalar ``env_vars`` value is exported as.

    ``str(value)``, as upstream Megatron-Bridge's ``apply_environment_variables`` writes it: a
    bool is spelled ``"True"`` / ``"False"`` (Python's spelling, not ``"1"`` / ``"true"``), an int
    ``"8"``, a float its ``repr`` (``"0.5"``). A variable whose reader wants ``1``/``0`` gets an
    int in the recipe.
    """
    return str(value)


#: Variables read as integers, by name: (smallest, largest or None, who reads it). Their readers
#: parse the text as a number and ignore (CUDA) or misread anything else, so a value that is not
#: an integer in range is refused where it is set. Bounds as ``launch_env`` plans them (the
#: margins and the chunk size within ``LIMITS``, as the plugin's and the CLI's).
_MARGIN = (LIMITS["layernorm_sm_margin"].minimum, LIMITS["layernorm_sm_margin"].maximum)
_CHUNK = (LIMITS["nccl_pp_comm_chunksize"].minimum, LIMITS["nccl_pp_comm_chunksize"].maximum)
_INTEGER_ENV_VARS: dict[str, tuple[int, int | None, str]] = {
    launch_env.CUDA_DEVICE_MAX_CONNECTIONS: (1, 32, "CUDA (hardware work queues, 1 to 32)"),
    launch_env.NVTE_FWD_LAYERNORM_SM_MARGIN: (*_MARGIN, "Transformer Engine (SMs left free)"),
    launch_env.NVTE_BWD_LAYERNORM_SM_MARGIN: (*_MARGIN, "Transformer Engine (SMs left free)"),
    launch_env.NCCL_P2P_NET_CHUNKSIZE: (*_CHUNK, "NCCL (bytes per P2P network chunk)"),
}
_INTEGER_TEXT = re.compile(r"-?[0-9]+")


def _check_integer_env_var(owner: str, name: str, value: EnvValue, text: str) -> None:
    minimum, maximum, reader = _INTEGER_ENV_VARS[name]
    bounds = f">= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
    # A bool is exported as "True"/"False" and a float as "8.0": neither is an integer's text.
    if _INTEGER_TEXT.fullmatch(text) is None or isinstance(value, bool | float):
        raise ConfigValueError(
            f"{owner}.{name}",
            f"expected an integer {bounds}, got {type(value).__name__} {value!r}; {reader} "
            "reads it as an integer.",
        )
    number = int(text)
    if number < minimum or (maximum is not None and number > maximum):
        raise ConfigValueError(
            f"{owner}.{name}", f"expected an integer {bounds}, got {number}; {reader}."
        )


#: A portable environment variable name (POSIX.1-2017, 8.1: letters, digits and underscores,
#: not starting with a digit). The OS takes more, but shells, Slurm and container runtimes drop
#: or mangle other names (a newline, an accented letter), so the job would not see the variable.
_POSIX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_var_name(owner: str, name: str) -> str:
    """``ValueError`` unless ``name`` is a portable environment variable name
    (``[A-Za-z_][A-Za-z0-9_]*``, POSIX); ``owner`` names where it was set."""
    if _POSIX_NAME.fullmatch(name) is None:
        raise ValueError(
            f"{owner} key {name!r} is not a valid environment variable name: use ASCII "
            "letters, digits and underscores, not starting with a digit ([A-Za-z_][A-Za-z0-9_]*, "
            "POSIX); shells and launchers drop or mangle other names. Rename the variable."
        )
    return name


def check_env_vars(env_vars: object, *, owner: str = "ConfigContainer.env_vars") -> dict[str, str]:
    """Check a recipe's environment variables; return them as the strings that would be exported.

    ``TypeError`` for a non-mapping, a non-str name or a non-scalar value (naming the key);
    ``ValueError`` for a name that is not POSIX's ``[A-Za-z_][A-Za-z0-9_]*``
    (:func:`check_env_var_name`: empty, ``=``, NUL, a newline, ``é``), a value
    with a NUL, and a name that looks like a secret (``*_API_KEY``, ``*TOKEN*``, ``*SECRET*``,
    ``*PASSWORD*``, any case): configs are serialized and shared, so secrets go on the launcher.
    A variable read as an integer (``CUDA_DEVICE_MAX_CONNECTIONS`` 1-32, the
    ``NVTE_*_LAYERNORM_SM_MARGIN`` pair 0-1024, ``NCCL_P2P_NET_CHUNKSIZE`` 2-2**30) must be an int
    or the text of one in that range: ``value_types.ConfigValueError`` (a ``ValueError``) naming
    ``owner.NAME`` otherwise. Every source of ``env_vars`` (Python, ``from_yaml``,
    ``env_vars.NAME=VALUE`` overrides) meets it.
    """
    if not isinstance(env_vars, Mapping):
        raise TypeError(
            f"{owner} must be a dict of variable name to str/int/float/bool, got "
            f"{type(env_vars).__name__}."
        )
    out: dict[str, str] = {}
    for name, value in env_vars.items():
        if not isinstance(name, str):
            raise TypeError(
                f"{owner} key {name!r} is a {type(name).__name__}; variable names are str."
            )
        check_env_var_name(owner, name)
        if _SECRET_NAME.search(name):
            raise ValueError(
                f"{owner}[{name!r}] looks like a secret (*_API_KEY, *TOKEN*, *SECRET*, "
                "*PASSWORD*): configs are serialized and shared, so set it on the launcher "
                "(executor env, shell) instead of in the config."
            )
        if not isinstance(value, str | int | float | bool):
            raise TypeError(
                f"{owner}[{name!r}] must be a str, int, float or bool, got "
                f"{type(value).__name__} ({value!r})."
            )
        text = env_var_text(value)
        if "\0" in text:
            raise ValueError(f"{owner}[{name!r}] holds a NUL character; the OS refuses it.")
        if name in _INTEGER_ENV_VARS:
            _check_integer_env_var(owner, name, value, text)
        out[name] = text
    return out


@dataclass(frozen=True, kw_only=True)
class AppliedEnvVars:
    """What the last ``runtime_config_update`` did with ``cfg.env_vars``."""

    from_recipe: dict[str, str]
    """Variables this update exported, from ``cfg.env_vars`` (they were not set before)."""
    kept_from_environment: dict[str, str]
    """Variables ``cfg.env_vars`` names that were already set: the environment's value won
    (launcher and shell values beat recipe defaults). Name -> the value kept."""
    recipe_values: dict[str, str]
    """Every ``cfg.env_vars`` entry as the string the recipe asked for."""

    def overridden(self) -> dict[str, tuple[str, str]]:
        """Kept variables whose value differs from the recipe's: name -> (kept, recipe's)."""
        return {
            name: (live, self.recipe_values[name])
            for name, live in self.kept_from_environment.items()
            if live != self.recipe_values[name]
        }


@dataclass(frozen=True, kw_only=True)
class DerivedEnv:
    """What a recipe derived into ``cfg.env_vars`` when it built the container, and from what.

    A variable whose value is still the derived one follows the job it is resolved for (another
    GPU, precision or layout derives it again); one the user changed is the user's.
    """

    gpu: str | None
    """The GPU the recipe derived for."""
    precision: str
    """The training precision the recipe derived for (bf16, fp16, fp8)."""
    env: dict[str, str]
    """The variables derived, as exported strings."""


#: Variables this process exported itself (``export_env_vars``), name -> value.
_EXPORTED: dict[str, str] = {}


def _cuda_started() -> bool:
    # A variable CUDA reads is fixed once CUDA started in this process; without torch imported
    # nothing started it.
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def launcher_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the values this process exported itself and may still replace.

    A launcher's or shell's value wins over a recipe's; a value an earlier
    ``runtime_config_update`` of this process exported (still unchanged, and CUDA not started
    since) is not the launcher's: planning a second job in one session replaces it.
    """
    if _cuda_started():
        return dict(environ)
    return {n: v for n, v in environ.items() if _EXPORTED.get(n) != v}


def forget_exports() -> None:
    """Forget which variables this process exported: from now on every value is the launcher's.

    For a caller that put ``os.environ`` back as it was before the exports.
    """
    _EXPORTED.clear()


def plan_env_vars(env_vars: object, environ: Mapping[str, str]) -> AppliedEnvVars:
    """Check ``env_vars`` (:func:`check_env_vars`) and split it against ``environ``.

    Variables ``environ`` does not set are to be exported; those it sets keep its value.
    """
    wanted = check_env_vars(env_vars)
    return AppliedEnvVars(
        from_recipe={n: v for n, v in wanted.items() if n not in environ},
        kept_from_environment={n: environ[n] for n in wanted if n in environ},
        recipe_values=wanted,
    )


def export_env_vars(applied: AppliedEnvVars) -> None:
    """Export ``applied.from_recipe`` where ``os.environ`` lacks it (or holds this process's own
    earlier export, see :func:`launcher_environment`); log set and kept at INFO."""
    for name, value in applied.from_recipe.items():
        if name not in os.environ or _EXPORTED.get(name) == os.environ[name]:
            os.environ[name] = value
            _EXPORTED[name] = value
    if not applied.recipe_values:
        return
    kept = ", ".join(
        f"{n}={v}"
        + (f" (recipe: {applied.recipe_values[n]})" if v != applied.recipe_values[n] else "")
        for n, v in applied.kept_from_environment.items()
    )
    logger.info(
        "cfg.env_vars: set from the recipe: %s; kept from the environment: %s.",
        ", ".join(f"{n}={v}" for n, v in applied.from_recipe.items()) or "none",
        kept or "none",
    )


def user_env_vars(env_vars: Mapping[str, EnvValue], derived: DerivedEnv | None) -> dict[str, str]:
    """The user's variables of ``env_vars``, as exported strings (:func:`check_env_vars`).

    Every variable whose value is not the one the recipe derived (``derived``, the container's
    or a resolution's ``derived_env``); with ``derived`` None, every variable is the user's.
    """
    checked = check_env_vars(env_vars)
    return {name: text for name, text in checked.items() if is_users_value(name, text, derived)}


def is_users_value(name: str, value: EnvValue, derived: DerivedEnv | None) -> bool:
    """Whether ``value`` of variable ``name`` is the user's: its exported text is not the one the
    recipe derived for it (``derived``; None: the recipe derived nothing, so every value is)."""
    return derived is None or derived.env.get(name) != env_var_text(value)


def with_user_env(
    plan: LaunchEnvPlan,
    user: Mapping[str, EnvValue],
    *,
    layout: Mapping[str, Any],
    a2a_overlap: bool,
    owner: str = "cfg.env_vars",
) -> LaunchEnvPlan:
    """``plan`` with the user's variables (``user``, e.g. :func:`user_env_vars`) laid over it.

    Each user variable is kept as written, in an entry of source ``user``: one the plan decides
    takes the place of the plan's entry, with a note saying what the plan would have set where
    the values differ (the plan's values are tuned, not required); one the plan does not decide
    passes through unchanged, after the plan's entries. A value that breaks what the layout
    requires (``launch_env.check_live_environment``: one CUDA queue under EP all-to-all overlap
    or Megatron-FSDP, HybridEP ranks that do not divide the EP size,
    ``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` below 1 under the op fuser) is a ``ValueError`` naming
    ``owner[NAME]``, the value, the reason and the fix. ``layout`` is
    ``launch_env.launch_layout``'s keywords; ``user`` meets :func:`check_env_vars`.
    """
    wanted = check_env_vars(user, owner=owner)
    planned = {entry.name: entry for entry in plan.entries}
    baseline = launch_env.check_live_environment(**layout, a2a_overlap=a2a_overlap, env=plan.env)
    for name, text in wanted.items():
        problems = launch_env.check_live_environment(
            **layout, a2a_overlap=a2a_overlap, env={**plan.env, name: text}
        )
        added = [problem for problem in problems if problem not in baseline]
        if added:
            raise ValueError(_refusal(owner, name, text, added[0], planned.get(name)))
    entries = [
        _user_entry(owner, entry, wanted[entry.name]) if entry.name in wanted else entry
        for entry in plan.entries
    ]
    entries += [
        LaunchEnvEntry(
            name=name,
            value=text,
            source="user",
            reason=f"set in {owner}; the launch plan does not decide it: passed through unchanged",
        )
        for name, text in wanted.items()
        if name not in planned
    ]
    return LaunchEnvPlan(entries=tuple(entries))


def _user_entry(owner: str, entry: LaunchEnvEntry, text: str) -> LaunchEnvEntry:
    """The user's value in place of the plan's ``entry``, with a note where the two differ."""
    if text == entry.value:
        reason, note = f"set in {owner}, the plan's value too ({entry.reason})", None
    else:
        reason = f"set in {owner}, kept as written"
        would = "leave it unset" if entry.value is None else f"set {entry.value}"
        note = f"the plan would {would} ({entry.reason}); that value is tuned, not required"
    return LaunchEnvEntry(name=entry.name, value=text, reason=reason, source="user", note=note)


def _refusal(owner: str, name: str, text: str, problem: str, planned: LaunchEnvEntry | None) -> str:
    """Why the user's ``name=text`` is refused, and the fix."""
    if planned is not None and planned.value is not None:
        fix = (
            f"Set {owner}[{name!r}] = {planned.value!r} (the plan's value: {planned.reason}), or "
            f"remove it from {owner} so the plan sets it."
        )
    elif planned is not None:
        fix = f"Remove it from {owner}: the plan leaves it unset ({planned.reason})."
    else:
        fix = f"Remove it from {owner}, or set a value the layout allows."
    return f"{owner}[{name!r}]={text!r} breaks what this job needs: {problem} {fix}"
