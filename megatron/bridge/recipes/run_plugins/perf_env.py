"""``PerfEnvPlugin``: writes the launch-time environment a layout needs onto a NeMo-Run
executor (``CUDA_DEVICE_MAX_CONNECTIONS``, LayerNorm SM margins, NCCL P2P chunk size, HybridEP's
NVLink topology) with the variables the user set in ``cfg.env_vars`` as written, raises the GPU
boost slider on Slurm, and passes manual-GC overrides to ``run.Script`` tasks. The plan comes
from ``megatron.bridge.training.launch_env`` with the user's variables laid over it
(``env_vars.with_user_env``); the plugin only applies it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

import nemo_run as run
from nemo_run.core.execution.base import Executor

from megatron.bridge.recipes import recipe_spec
from megatron.bridge.recipes.run_plugins.script_args import (
    PerfEnvPluginScriptArgs,
    add_script_overrides,
    check_converter,
    perf_env_hydra_overrides,
)
from megatron.bridge.recipes.spec import RecipeSpec
from megatron.bridge.training import launch_env
from megatron.bridge.training.comm_overlap import te_status
from megatron.bridge.training.env_vars import (
    EnvValue,
    check_env_var_name,
    check_env_vars,
    user_env_vars,
    with_user_env,
)
from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.job import CLUSTER_FIELDS, JobDescription, check_cluster_field
from megatron.bridge.training.parallel_layout import check_expert_grid, data_parallel_size
from megatron.bridge.training.validators import check_bool, check_limit, check_optional_bool

__all__ = ["VBOOST_SETUP_LINE", "PerfEnvPlugin"]

# Each part logs under the plugins' import path, megatron.bridge.recipes.run_plugins: the
# logger name a user's logging configuration names.
logger = logging.getLogger(__package__)


VBOOST_SETUP_LINE = (
    'srun --ntasks-per-node=1 --nodes="${SLURM_JOB_NUM_NODES}" '
    "sudo nvidia-smi boost-slider --vboost 1"
)
"""Slurm setup line raising the GPU clock boost slider once on every node of the job."""


def _warn_other_gpu(cfg: Any, resolved: Any) -> None:
    # A plugin planned for another GPU than cfg.gpu exports that GPU's environment, while the job
    # resolves cfg.gpu at model build (its preset, its launch check): said, with the fix.
    if cfg.gpu is None or resolved.job.gpu is None or gpu_spec(cfg.gpu).name == resolved.job.gpu:
        return
    moved = {
        name: (cfg.env_vars[name], value)
        for name, value in resolved.env_vars.items()
        if name in cfg.env_vars and str(cfg.env_vars[name]) != str(value)
    }
    logger.warning(
        "PerfEnvPlugin: planned for gpu %r, but cfg.gpu is %r%s. The job resolves cfg.gpu at "
        "model build: set cfg.gpu = %r (or build the recipe with gpu=%r) so both agree.",
        resolved.job.gpu,
        cfg.gpu,
        "; the recipe's derived environment follows the plugin's GPU: "
        + ", ".join(f"{n} {old} -> {new}" for n, (old, new) in moved.items())
        if moved
        else "",
        resolved.job.gpu,
        resolved.job.gpu,
    )


#: The plugin fields that hold the job's layout: what :meth:`PerfEnvPlugin.from_config` and
#: :meth:`PerfEnvPlugin.from_recipe` take from ``launch_env.launch_layout`` of the resolved job
#: (its ``dp_size`` aside: the plugin derives it from ``num_gpus``).
_LAYOUT_FIELDS = (
    "tp_size",
    "cp_size",
    "pp_size",
    "ep_size",
    "etp_size",
    "moe_flex_dispatcher_backend",
    "megatron_fsdp",
    "cutedsl_fused_grouped_mlp",
)

#: The plugin's sizes and the entry of ``validators.LIMITS`` each meets: the bounds the CLI's
#: ``--world-size``, ``--tp``, ... flags and every job description meet.
_SIZE_LIMITS = (
    ("num_gpus", "world_size"),
    ("tp_size", "model.tensor_model_parallel_size"),
    ("cp_size", "model.context_parallel_size"),
    ("pp_size", "model.pipeline_model_parallel_size"),
    ("ep_size", "model.expert_model_parallel_size"),
    ("etp_size", "model.expert_tensor_parallel_size"),
)


@dataclasses.dataclass(kw_only=True)
class PerfEnvPlugin(run.Plugin):
    """Set the launch-time performance environment on a NeMo-Run executor.

    Precedence, per variable: ``executor.env_vars`` (the launcher's, as at
    ``runtime_config_update``), then ``user_env_vars`` (what the user set in ``cfg.env_vars``),
    then the plan. A tuned value other than the plan's is kept (a user's with a logged note); a
    user's value that breaks what the layout requires is refused when the plugin is built; an
    executor's is kept with a warning, unless the job fails when it starts with it
    (``launch_env.failing_environment``), which ``setup`` refuses before writing anything; an
    executor's value that differs from the user's is kept with a warning. Build it from a
    ``ConfigContainer`` with :meth:`from_config` so the parallel sizes and the user's variables
    are written once.
    """

    enable_layernorm_sm_margin: bool = True
    """Export NVTE_FWD/BWD_LAYERNORM_SM_MARGIN so LayerNorm leaves SMs for DP collectives."""
    layernorm_sm_margin: int = launch_env.DEFAULT_LAYERNORM_SM_MARGIN
    """Number of SMs LayerNorm kernels leave free."""
    enable_vboost: bool = False
    """Raise the GPU boost slider on every node (SlurmExecutor only; needs sudo on nodes)."""
    nccl_pp_comm_chunksize: int | None = None
    """NCCL_P2P_NET_CHUNKSIZE in bytes, exported when PP > 1; None keeps NCCL's default."""
    gpu: str | None = None
    """GPU catalogue name (``"h100"``, ``"gb200"``, ...): the generation and the NVLink domain.
    Without it HybridEP's topology is left to HybridEP's own detection."""
    gpus_per_node: int | None = None
    """GPUs per node of the cluster (None: the GPU catalogue's for ``gpu``)."""
    nvlink_domain: int | None = None
    """Consecutive ranks one NVLink domain connects (None: the GPU catalogue's, e.g. 72 on
    GB200 NVL72, else a node): HybridEP's ``NVLINK_DOMAIN_SIZE`` and ``USE_MNNVL``."""
    gpu_sm100_or_newer: bool | None = None
    """True for Blackwell (SM100+) GPUs, False for Hopper and older; None: from ``gpu``, else
    Hopper."""
    enable_manual_gc: bool = True
    """Pass manual garbage-collection overrides to run.Script tasks."""
    manual_gc_interval: int = 100
    """Training steps between manual GC runs (0: none between steps)."""
    tp_size: int = 1
    """Tensor-parallel size."""
    cp_size: int = 1
    """Context-parallel size."""
    pp_size: int = 1
    """Pipeline-parallel size."""
    ep_size: int = 1
    """Expert-parallel size (HybridEP's ranks per NVLink domain)."""
    etp_size: int = 1
    """Expert tensor-parallel size (EP ranks are this many ranks apart)."""
    num_gpus: int = 8
    """Total GPUs of the job; DP size is num_gpus // (tp_size * cp_size * pp_size)."""
    moe_flex_dispatcher_backend: str | None = None
    """MoE flex dispatcher backend in use ("deepep", "hybridep", "ncclep"), or None."""
    megatron_fsdp: bool = False
    """Whether the job runs Megatron-FSDP (``cfg.ddp.use_megatron_fsdp``), which refuses
    CUDA_DEVICE_MAX_CONNECTIONS=1."""
    cutedsl_fused_grouped_mlp: bool = False
    """Whether gated experts run Transformer Engine's fused grouped MLP
    (``cfg.model.use_transformer_engine_op_fuser`` on SwiGLU or quick-GeGLU experts), which
    needs NVTE_CUTEDSL_FUSED_GROUPED_MLP=1."""
    a2a_overlap: bool = False
    """Whether EP all-to-all communication overlap is on."""
    user_env_vars: dict[str, EnvValue] = dataclasses.field(default_factory=dict)
    """The variables the user set in ``cfg.env_vars`` (:meth:`from_config` reads them; a
    recipe's derived ones are the plan's): exported as written, never replaced by the plan."""
    script_args_converter_fn: Callable[[PerfEnvPluginScriptArgs], list[str]] | None = None
    """Turns a PerfEnvPluginScriptArgs into script args (called once); default is hydra style."""

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        owner = type(self).__name__
        for name in (
            "enable_layernorm_sm_margin",
            "enable_vboost",
            "enable_manual_gc",
            "megatron_fsdp",
            "cutedsl_fused_grouped_mlp",
            "a2a_overlap",
        ):
            check_bool(owner, name, getattr(self, name))
        check_optional_bool(
            owner, "gpu_sm100_or_newer", self.gpu_sm100_or_newer, none_means="from gpu, else Hopper"
        )
        if self.gpu is not None:
            gpu_spec(self.gpu)
        launch_env.validate_layernorm_sm_margin(
            self.layernorm_sm_margin, name=f"{owner}.layernorm_sm_margin"
        )
        launch_env.validate_nccl_pp_comm_chunksize(
            self.nccl_pp_comm_chunksize, name=f"{owner}.nccl_pp_comm_chunksize"
        )
        launch_env.validate_manual_gc_interval(
            self.manual_gc_interval, name=f"{owner}.manual_gc_interval"
        )
        launch_env.validate_moe_flex_dispatcher_backend(
            self.moe_flex_dispatcher_backend, name=f"{owner}.moe_flex_dispatcher_backend"
        )
        check_converter(owner, self.script_args_converter_fn)
        check_env_vars(self.user_env_vars, owner=f"{owner}.user_env_vars")
        for name, limit in _SIZE_LIMITS:
            check_limit(limit, getattr(self, name), label=f"{owner}.{name}")
        for name in CLUSTER_FIELDS:
            check_cluster_field(name, getattr(self, name), f"{owner}.{name}")
        self.dp_size  # noqa: B018 - validates sizes and divisibility
        self._check_expert_grid(owner)
        self.launch_env_plan()  # the rules validate the rest (EP sizes, gpu vs generation)

    def _check_expert_grid(self, owner: str) -> None:
        # megatron-core refuses an EP group that does not tile the GPUs at start; the plugin would
        # otherwise export an environment for a layout that never runs.
        try:
            check_expert_grid(
                world_size=self.num_gpus,
                tp_size=self.tp_size,
                pp_size=self.pp_size,
                ep_size=self.ep_size,
                etp_size=self.etp_size,
            )
        except ValueError as exc:
            raise ValueError(
                f"{owner}: num_gpus={self.num_gpus} with ep_size={self.ep_size}, etp_size="
                f"{self.etp_size}, pp_size={self.pp_size}: {exc} Pass the sizes the job runs with "
                "(PerfEnvPlugin.from_config / from_recipe read them from the job)."
            ) from None

    @property
    def dp_size(self) -> int:
        """Data-parallel size derived from ``num_gpus`` and the model-parallel sizes."""
        return data_parallel_size(
            num_gpus=self.num_gpus, tp_size=self.tp_size, cp_size=self.cp_size, pp_size=self.pp_size
        )

    @classmethod
    def from_config(
        cls,
        cfg: Any,
        *,
        num_gpus: int,
        gpu: str | None = None,
        **overrides: Any,
    ) -> PerfEnvPlugin:
        """Build the plugin from a ``ConfigContainer``, through the same plan the job resolves.

        ``cfg`` is resolved as ``runtime_config_update`` resolves it at model-build time (on
        copies: ``cfg`` is not changed) for ``num_gpus`` GPUs, with Transformer Engine assumed
        present where the job runs. The parallel sizes, the MoE flex backend and whether EP
        all-to-all overlap survived come from that plan, so the exported environment is the one
        the build-time check expects. The variables the user set in ``cfg.env_vars`` (those not
        derived by the recipe: ``env_vars.user_env_vars``) become ``user_env_vars``; one that
        breaks what the layout requires is a ``ValueError`` naming it and the fix. ``gpu`` (a GPU
        catalogue name, else ``cfg.gpu``) sets the GPU generation; without either,
        ``gpu_sm100_or_newer`` may be passed in ``overrides`` (default: Hopper). The cluster
        (``gpus_per_node``, ``nvlink_domain``) is ``cfg``'s. ``overrides`` set the other fields.
        """
        cls._refuse_layout_overrides("from_config", overrides)
        if "user_env_vars" in overrides:
            raise TypeError(
                "PerfEnvPlugin.from_config reads user_env_vars from cfg.env_vars; set the "
                "variables there, or construct PerfEnvPlugin(...) directly. Choose one."
            )
        # megatron-core: only for a plugin built from a container.
        from megatron.bridge.training.resolve import resolve_config

        resolved = resolve_config(cfg, world_size=num_gpus, te=te_status("assume"), gpu=gpu)
        _warn_other_gpu(cfg, resolved)
        return cls._from_job(
            resolved.job,
            a2a_overlap=resolved.a2a_overlap,
            num_gpus=num_gpus,
            user_env_vars=user_env_vars(resolved.env_vars, resolved.derived_env),
            **overrides,
        )

    @classmethod
    def from_recipe(
        cls,
        recipe: Any,
        *,
        num_gpus: int | None = None,
        gpu: str | None = None,
        precision: str | None = None,
        **overrides: Any,
    ) -> PerfEnvPlugin:
        """Build the plugin from a recipe's torch-free plan: no torch or megatron-core needed.

        ``recipe`` is a ``RecipeSpec`` or a recipe name with a spec (see
        ``megatron.bridge.recipes``). ``num_gpus`` defaults to the recipe's published GPU count;
        ``gpu`` and ``precision`` default to the recipe's, and a change re-derives what depends
        on them (the preset, the GPU generation) as the recipe's keywords do. The parallel sizes,
        the MoE flex backend and whether EP all-to-all overlap survived come from the plan the
        job will resolve to. ``overrides`` set the other fields.
        """
        spec = recipe if isinstance(recipe, RecipeSpec) else recipe_spec(recipe)
        if spec is None:
            raise ValueError(
                f"Recipe {recipe!r} builds a ConfigContainer and has no torch-free spec: use "
                "PerfEnvPlugin.from_config(cfg, num_gpus=...)."
            )
        changes = {k: v for k, v in (("gpu", gpu), ("precision", precision)) if v is not None}
        if changes:
            spec = spec.changed(**changes)
        cls._refuse_layout_overrides("from_recipe", overrides)
        world = spec.num_gpus if num_gpus is None else num_gpus
        plan = spec.plan(world_size=world)
        return cls._from_job(
            plan.job,
            a2a_overlap=plan.a2a_overlap,
            num_gpus=world,
            **overrides,
        )

    @classmethod
    def _from_job(
        cls, job: JobDescription, *, a2a_overlap: bool, num_gpus: int, **overrides: Any
    ) -> PerfEnvPlugin:
        """The plugin for a resolved job: what both constructors from a plan share."""
        if job.gpu is not None and "gpu_sm100_or_newer" in overrides:
            raise TypeError(
                f"PerfEnvPlugin derives gpu_sm100_or_newer from gpu={job.gpu!r}; pass the "
                "GPU name only."
            )
        layout = launch_env.launch_layout(job)
        return cls(
            gpu=job.gpu,
            gpus_per_node=job.gpus_per_node,
            nvlink_domain=job.nvlink_domain,
            **{name: layout[name] for name in _LAYOUT_FIELDS},
            a2a_overlap=a2a_overlap,
            num_gpus=num_gpus,
            **overrides,
        )

    @staticmethod
    def _refuse_layout_overrides(source: str, overrides: Mapping[str, Any]) -> None:
        derived = ("gpu", *CLUSTER_FIELDS, *_LAYOUT_FIELDS, "a2a_overlap")
        clashing = sorted(set(overrides) & set(derived))
        if clashing:
            read, where = (
                (
                    "cfg",
                    "on cfg (cfg.gpu, cfg.gpus_per_node, cfg.nvlink_domain), cfg.model or "
                    "cfg.comm_overlap",
                )
                if source == "from_config"
                else ("the recipe", "on the recipe (spec.changed(gpu=..., nvlink_domain=...))")
            )
            raise TypeError(
                f"PerfEnvPlugin.{source} reads {clashing} from {read}; set them {where}, or "
                "construct PerfEnvPlugin(...) directly. Choose one."
            )

    def launch_env_plan(self) -> launch_env.LaunchEnvPlan:
        """The environment this plugin applies: the plan (same code as the runtime check) with
        ``user_env_vars`` laid over it (``env_vars.with_user_env``, which refuses a user's value
        that breaks what the layout requires)."""
        generation = self.gpu_sm100_or_newer
        if generation is None and self.gpu is None:
            generation = False
        plan = launch_env.plan_launch_env(
            gpu_sm100_or_newer=generation,
            gpu=self.gpu,
            gpus_per_node=self.gpus_per_node,
            nvlink_domain=self.nvlink_domain,
            **self._layout(),
            a2a_overlap=self.a2a_overlap,
            enable_layernorm_sm_margin=self.enable_layernorm_sm_margin,
            layernorm_sm_margin=self.layernorm_sm_margin,
            nccl_pp_comm_chunksize=self.nccl_pp_comm_chunksize,
        )
        return with_user_env(
            plan, self.user_env_vars, layout=self._layout(), a2a_overlap=self.a2a_overlap
        )

    def _layout(self) -> dict[str, Any]:
        # launch_env.launch_layout's keywords, from the plugin's fields and num_gpus.
        return {name: getattr(self, name) for name in _LAYOUT_FIELDS} | {"dp_size": self.dp_size}

    def script_args(self) -> PerfEnvPluginScriptArgs:
        """What ``setup`` hands the converter for a ``run.Script`` task."""
        return PerfEnvPluginScriptArgs(
            enable_manual_gc=self.enable_manual_gc, manual_gc_interval=self.manual_gc_interval
        )

    def setup(self, task: run.Partial | run.Script, executor: Executor) -> None:
        """Write the plan onto ``executor.env_vars`` and GC overrides onto ``task``."""
        self._validate()  # fields are plain attributes and may have changed since __init__
        # The plan is checked against the executor's variables: a name no shell or launcher
        # passes on (a newline, 'é') is refused before anything is written.
        for name in executor.env_vars:
            check_env_var_name(f"PerfEnvPlugin: {type(executor).__name__}.env_vars", name)
        self._apply_env(executor)
        self._apply_manual_gc(task)
        self._apply_vboost(executor)

    def _apply_env(self, executor: Executor) -> None:
        plan = self.launch_env_plan()
        # The environment the job will start with: the executor's values, the plan's elsewhere.
        # A value with which it fails at start is refused before anything is written.
        started = {name: str(value) for name, value in executor.env_vars.items()}
        started |= {
            e.name: e.value for e in plan.entries if e.value is not None and e.name not in started
        }
        failing = launch_env.failing_environment(**self._layout(), env=started)
        if failing:
            raise ValueError(
                f"PerfEnvPlugin: {type(executor).__name__}.env_vars: {failing[0]} The job would "
                "fail when it starts: fix or remove that value on the executor (the plan sets "
                "what the layout needs where the executor sets nothing)."
            )
        for entry in plan.entries:
            current = executor.env_vars.get(entry.name)
            if entry.value is None:
                logger.info("PerfEnvPlugin: %s not set: %s.", entry.name, entry.reason)
            elif current is None:
                executor.env_vars[entry.name] = entry.value
                logger.info(
                    "PerfEnvPlugin: %s=%s (%s%s).",
                    entry.name,
                    entry.value,
                    entry.reason,
                    f"; note: {entry.note}" if entry.note else "",
                )
            elif str(current) == entry.value:
                logger.info("PerfEnvPlugin: %s=%s already on the executor.", entry.name, current)
            elif entry.source == "user":
                # The launcher's value beats the config's, as runtime_config_update keeps a value
                # the environment already holds: two settings of the user's disagree, said.
                logger.warning(
                    "PerfEnvPlugin: %s.env_vars sets %s=%s and cfg.env_vars sets %s: the "
                    "executor's value is used (a launcher's value wins over cfg.env_vars). "
                    "Remove one of them so they agree.",
                    type(executor).__name__,
                    entry.name,
                    current,
                    entry.value,
                )
            else:
                logger.info(
                    "PerfEnvPlugin: keeping %s=%s from the executor (plan: %s, %s).",
                    entry.name,
                    current,
                    entry.value,
                    entry.reason,
                )
        # What the job will launch with, executor values included: warn only where a value
        # breaks what the layout requires; a tuned value other than the plan's is accepted.
        problems = launch_env.check_live_environment(
            **self._layout(),
            a2a_overlap=self.a2a_overlap,
            env={name: str(value) for name, value in executor.env_vars.items()},
        )
        for problem in problems:
            logger.warning(
                "PerfEnvPlugin: %s Remove it from executor.env_vars to use the planned value.",
                problem,
            )

    def _apply_manual_gc(self, task: run.Partial | run.Script) -> None:
        if not self.enable_manual_gc:
            logger.info("PerfEnvPlugin: manual GC overrides off (enable_manual_gc=False).")
            return
        if isinstance(task, run.Script):
            add_script_overrides(
                task,
                self.script_args(),
                self.script_args_converter_fn,
                perf_env_hydra_overrides,
                owner="PerfEnvPlugin",
            )
        else:
            logger.warning(
                "PerfEnvPlugin: manual GC overrides apply to run.Script tasks only; for this "
                "%s set cfg.train.manual_gc / manual_gc_interval in the recipe instead.",
                type(task).__name__,
            )

    def _apply_vboost(self, executor: Executor) -> None:
        if not self.enable_vboost:
            return
        if not isinstance(executor, run.SlurmExecutor):
            logger.warning(
                "PerfEnvPlugin: enable_vboost needs a SlurmExecutor (it runs on every node "
                "before the job); skipped on %s.",
                type(executor).__name__,
            )
            return
        lines = executor.setup_lines or ""
        if VBOOST_SETUP_LINE in lines.splitlines():
            logger.info("PerfEnvPlugin: vboost setup line already on the executor.")
            return
        executor.setup_lines = (
            f"{lines.rstrip()}\n{VBOOST_SETUP_LINE}" if lines else VBOOST_SETUP_LINE
        )
        logger.info("PerfEnvPlugin: vboost setup line added: %s", VBOOST_SETUP_LINE)
