"""Torch-free recipe specs: a recipe's job description plus what it asks of overlap.

A :class:`RecipeSpec` holds a :class:`~megatron.bridge.training.job.JobDescription` (the model
with megatron-core's field names, the published GPU count and GPU, batch sizes, optimizer
sharding), the training precision, the userbuffers preset choice and the overlap request. Both
routes start from it:

- :meth:`RecipeSpec.plan` and :meth:`RecipeSpec.launch_env` give the overlap plan and the launch
  environment with neither torch nor megatron-core imported (``bridge-overlap explain
  --recipe`` and ``PerfEnvPlugin.from_recipe`` use them);
- :meth:`RecipeSpec.build` gives the full ``ConfigContainer`` (megatron-core configs), which
  ``runtime_config_update`` resolves at model-build time. The model config is the provider's
  architecture with the description written over it (``job_configs.write_model``), so reading it
  back (``job_configs.describe_model``) gives the description again.

:meth:`RecipeSpec.changed` is the one way to change a spec: by spec field, or by the name of a
field of its job description (``model.tensor_model_parallel_size``, ``world_size``, ...).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from megatron.bridge.recipes.models import recipe_model
from megatron.bridge.recipes.published import PublishedRun, published_runs
from megatron.bridge.training import hardware, launch_env
from megatron.bridge.training.comm_overlap import (
    PUBLISHED_PRESETS,
    CommOverlapConfig,
    OverlapPlan,
    TEStatus,
    check_layout,
    plan_comm_overlap,
    te_status,
)
from megatron.bridge.training.comm_overlap.rules.tp import tp_overlap_blockers
from megatron.bridge.training.env_vars import DerivedEnv
from megatron.bridge.training.job import BF16_LAYER_DEFAULTS, JobDescription, ModelDescription
from megatron.bridge.training.job_configs import write_model
from megatron.bridge.training.megatron_core_support import check_buildable
from megatron.bridge.training.precisions import (
    PRECISIONS,
    ComputeDtype,
    PrecisionSetting,
    canonical_precision,
)
from megatron.bridge.training.userbuffers import (
    PresetChoice,
    choose_userbuffers_preset,
    preset_fits_model,
    preset_names_of,
)
from megatron.bridge.training.validators import LIMITS, check_int, is_int
from megatron.bridge.training.value_types import check_field

if TYPE_CHECKING:
    from megatron.bridge.training.config import ConfigContainer

__all__ = [
    "PRECISIONS",
    "RECIPE_KEYWORDS",
    "Precision",
    "PrecisionSetting",
    "RecipeFunctions",
    "RecipeSpec",
    "published_spec",
    "recipe_functions",
    "spec_of",
]

Precision = ComputeDtype
"""Training precisions a recipe offers: the compute dtypes of :data:`PRECISIONS` (the aliases of
``PRECISION_ALIASES``, such as ``fp8`` for fp8_ds, are accepted and resolved)."""

#: The keywords every recipe function takes, and the spec field or job-description field each
#: one sets.
RECIPE_KEYWORDS: Mapping[str, str] = MappingProxyType(
    {
        "gpu": "gpu",
        "precision": "precision",
        "tp_size": "model.tensor_model_parallel_size",
        "pp_size": "model.pipeline_model_parallel_size",
        "vpp_size": "model.virtual_pipeline_model_parallel_size",
        "cp_size": "model.context_parallel_size",
        "seq_length": "model.seq_length",
        "micro_batch_size": "micro_batch_size",
        "global_batch_size": "global_batch_size",
        "tp_comm_overlap": "tp_comm_overlap",
    }
)

logger = logging.getLogger(__name__)

_JOB_FIELDS = frozenset(f.name for f in dataclasses.fields(JobDescription)) - {"model"}
_MODEL_FIELDS = frozenset(f.name for f in dataclasses.fields(ModelDescription))


@dataclass(frozen=True, kw_only=True)
class RecipeSpec:
    """Everything a recipe decides, as plain values; the plan and the container derive from it.

    ``job.world_size`` is the published GPU count (the default world size); the precision fields
    of ``job.model`` always follow ``precision`` (:data:`PRECISIONS`).
    """

    name: str
    """Recipe name."""
    provider: str
    """``"module:function"`` returning the architecture's ``GPTModelProvider`` (the settings the
    job description does not hold: activation, RoPE base, initialization, fusions); imported
    only by :meth:`build`."""
    provider_options: tuple[tuple[str, Any], ...] = ()
    """Keywords for the provider function, as (name, plain value) pairs."""
    job: JobDescription
    """The job: model, published GPU count and GPU, batch sizes, optimizer sharding."""
    precision: Precision = "bf16"
    """Training precision (a compute dtype; an alias given is stored resolved)."""
    tp_comm_overlap: bool | Literal["auto"] = "auto"
    """TP communication overlap: "auto" (on where the layout can run it: TP >= 2, sequence
    parallelism, Transformer Engine; otherwise off without a warning), or True (a request,
    refused with a warning where the layout cannot run it) or False."""
    preset: str = "auto"
    """Userbuffers preset: "auto" (the published one for the shape), a published name, or "none"."""
    overlap: tuple[tuple[str, Any], ...] = ()
    """Further CommOverlapConfig fields (EP overlap, strict, ...), as (name, value) pairs."""
    grad_reduce_in_fp32: bool | None = None
    """Gradients accumulated and reduced in fp32 (True) or in the parameters' 16 bits (False);
    None: the precision's mixed-precision preset (fp32 for every preset of :data:`PRECISIONS`).
    A published run sets False: upstream's performance recipes reduce in 16 bits
    (Megatron-Bridge ``perf_recipes/_common.py``: ``_benchmark_common`` and ``_perf_precision``
    set ``grad_reduce_in_fp32 = False``)."""
    lr: float = 3e-4
    """Peak learning rate."""
    min_lr: float = 3e-5
    """Final learning rate."""
    published: tuple[PublishedRun, ...] = ()
    """The recipe's published runs, one per (GPU, precision): asking for a GPU or a precision
    starts from that pair's run (:meth:`with_overrides`)."""
    bf16_layers: tuple[tuple[str, int, int], ...] = ()
    """(precision, start, end): the precisions in which the recipe keeps its first ``start`` and
    last ``end`` decoder layers out of the FP8/FP4 recipe (megatron-core's
    ``first_last_layers_bf16``), as upstream's recipe for the model does. A change of
    precision (:meth:`changed`) sets the three model fields from it; the other precisions keep
    every layer in the precision."""

    def __post_init__(self) -> None:
        precision = canonical_precision(self.precision)
        object.__setattr__(self, "precision", precision)
        setting = PRECISIONS[precision]
        grad_fp32 = self.grad_reduce_in_fp32
        job = self.job.replace(
            grad_reduce_in_fp32=setting.grad_reduce_in_fp32 if grad_fp32 is None else grad_fp32,
            fp8_param_gather=setting.quantized_params == "fp8",
            fp4_param_gather=setting.quantized_params == "fp4",
            **{f"model.{k}": v for k, v in setting.model.items()},
        )
        if job.gpu is not None:
            job = job.replace(gpu=hardware.gpu_spec(job.gpu).name)
            hardware.check_precision_on_gpu(gpu=job.gpu, precision=precision)
        object.__setattr__(self, "job", job)
        if self.preset not in ("auto", "none") and self.preset not in PUBLISHED_PRESETS:
            raise ValueError(
                f"preset {self.preset!r} is not a published preset; choose 'auto', 'none' or one "
                f"of: {', '.join(sorted(PUBLISHED_PRESETS))}"
            )

    @property
    def num_gpus(self) -> int:
        """GPU count of the published run."""
        return self.job.world_size

    @property
    def gpu(self) -> str | None:
        """GPU model of the published run."""
        return self.job.gpu

    def changed(self, **changes: Any) -> RecipeSpec:
        """This spec with fields changed: spec fields by name, job fields by their description name.

        Keys are spec fields (``precision``, ``preset``, ``overlap``, ...), job fields
        (``world_size``, ``gpu``, ``global_batch_size``, ...) or ``model.<field>``. A change of
        the tensor-parallel size without one of ``model.sequence_parallel`` turns sequence
        parallelism on exactly when TP > 1 (it is what TP overlap hides; with TP 1 there is
        nothing to split). ``TypeError`` names an unknown key.
        """
        spec_fields = {f.name for f in dataclasses.fields(self)} - {"job"}
        unknown = sorted(
            k
            for k in changes
            if k not in spec_fields
            and k not in _JOB_FIELDS
            and not (k.startswith("model.") and k.removeprefix("model.") in _MODEL_FIELDS)
        )
        if unknown:
            raise TypeError(
                f"recipe {self.name}: unknown field(s) {unknown}; a spec takes its own fields "
                f"{sorted(spec_fields)}, the job's {sorted(_JOB_FIELDS)} and model.<field> for "
                "megatron-core's TransformerConfig fields."
            )
        tp = changes.get("model.tensor_model_parallel_size")
        if tp is not None and "model.sequence_parallel" not in changes:
            changes["model.sequence_parallel"] = isinstance(tp, int) and tp > 1
        if "precision" in changes:
            for key, value in self._bf16_layer_fields(changes["precision"]).items():
                changes.setdefault(key, value)
        own = {k: v for k, v in changes.items() if k in spec_fields}
        job = {k: v for k, v in changes.items() if k not in spec_fields}
        new = dataclasses.replace(self, job=self.job.replace(**job) if job else self.job, **own)
        if "preset" not in changes:
            _check_named_preset_follows(self, new)
        return new

    def _bf16_layer_fields(self, precision: object) -> dict[str, Any]:
        """The BF16-layer model fields of ``precision`` (:attr:`bf16_layers`): the description's
        defaults (megatron-core's, off) for a precision the recipe keeps whole; a name that is
        not a precision gets none (the precision check names it)."""
        try:
            name = canonical_precision(precision)
        except (TypeError, ValueError):
            return {}
        fields = dict(BF16_LAYER_DEFAULTS)
        for kept, start, end in self.bf16_layers:
            if kept == name:
                fields.update(
                    first_last_layers_bf16=True,
                    num_layers_at_start_in_bf16=start,
                    num_layers_at_end_in_bf16=end,
                )
        return {f"model.{field}": value for field, value in fields.items()}

    def published_run(self, gpu: str | None, precision: str | None) -> PublishedRun | None:
        """The published run for ``gpu`` and ``precision`` (None: this spec's own), or None.

        Names are resolved as the catalogue and the precision table resolve them (``GB200``,
        ``mxfp8``); ``ValueError`` for a name neither knows.
        """
        gpu = self.gpu if gpu is None else hardware.gpu_spec(gpu).name
        precision = self.precision if precision is None else canonical_precision(precision)
        return next((r for r in self.published if r.key == (gpu, precision)), None)

    @property
    def published_pairs(self) -> tuple[tuple[str, str], ...]:
        """The (GPU, precision) pairs of the published runs, in the order the recipe lists them."""
        return tuple(r.key for r in self.published)

    def with_overrides(self, **overrides: Any) -> RecipeSpec:
        """This spec with a recipe's keyword overrides (:data:`RECIPE_KEYWORDS`) applied.

        Given ``gpu`` or ``precision``, the layout starts from the published run for that GPU
        and precision (the one not given stays this spec's); the other keywords change it. A
        pair with no published run keeps this spec's layout.
        """
        unknown = sorted(set(overrides) - set(RECIPE_KEYWORDS))
        if unknown:
            raise TypeError(
                f"recipe {self.name} got unexpected keyword(s) {unknown}; it takes "
                f"{list(RECIPE_KEYWORDS)}."
            )
        for keyword, value in overrides.items():
            _check_keyword(keyword, value)
        changes: dict[str, Any] = {}
        if overrides.get("gpu") is not None or overrides.get("precision") is not None:
            published = self.published_run(overrides.get("gpu"), overrides.get("precision"))
            if published is not None:
                changes.update(published.changes)
        changes.update({RECIPE_KEYWORDS[k]: v for k, v in overrides.items()})
        return self.changed(**changes)

    # --- the torch-free route ----------------------------------------------------------------

    def preset_choice(self) -> PresetChoice:
        """The userbuffers preset this recipe runs with, and why."""
        job = self.job
        if self.preset == "auto":
            return choose_userbuffers_preset(
                tp_comm_overlap=self._tp_overlap_wanted(),
                precision=job.precision,
                gpu=job.gpu,
                hidden_size=job.model.hidden_size,
                tp_size=job.tp_size,
                cp_size=job.cp_size,
                micro_batch_size=job.micro_batch_size,
                seq_length=job.model.seq_length,
            )
        if self.preset == "none":
            return PresetChoice(name=None, preset=None, detail="preset 'none': TE defaults")
        return PresetChoice(
            name=self.preset, preset=PUBLISHED_PRESETS[self.preset], detail="named preset"
        )

    def _tp_overlap_wanted(self) -> bool:
        """Whether the request asks for TP overlap on the published job, with TE assumed where
        it runs: "auto" asks where :func:`tp_overlap_blockers` finds nothing."""
        if self.tp_comm_overlap == "auto":
            return not tp_overlap_blockers(self.job)
        return bool(self.tp_comm_overlap)

    def request(self) -> CommOverlapConfig:
        """The comm-overlap request this recipe makes; an automatic preset choice says so."""
        choice = self.preset_choice()
        chosen_by = None
        if self.preset == "auto" and choice.name is not None:
            job = self.job
            # The same words on every route to this spec (flags, recipe, built container).
            chosen_by = (
                f"chosen automatically (preset 'auto', choose_userbuffers_preset) from "
                f"{job.gpu} {self.precision}, "
                f"hidden {job.model.hidden_size}, TP{job.tp_size}, CP{job.cp_size}: "
                f"{choice.name} ({choice.detail})"
            )
        return CommOverlapConfig(
            tp_comm_overlap=self.tp_comm_overlap,
            tp_comm_overlap_cfg=choice.preset,
            preset_chosen_by=chosen_by,
            **dict(self.overlap),
        )

    def job_on(
        self, *, world_size: int | None = None, te: TEStatus | str = "assume"
    ) -> JobDescription:
        """The job on ``world_size`` GPUs (default: the published count) with TE as ``te`` says.

        The description ``describe_configs`` reads from the built and resolved container.
        """
        status = te_status(te) if isinstance(te, str) else te
        return self.job.replace(
            world_size=self.job.world_size if world_size is None else world_size,
            te_available=status.available,
            te_reason=status.reason,
            te_version=status.version,
        )

    def plan(self, *, world_size: int | None = None, te: TEStatus | str = "assume") -> OverlapPlan:
        """The overlap plan of this recipe: layout checked, then the rules, without torch."""
        job = self.job_on(world_size=world_size, te=te)
        check_layout(job)
        return plan_comm_overlap(self.request(), job)

    def launch_env(
        self, *, world_size: int | None = None, te: TEStatus | str = "assume", **options: Any
    ) -> launch_env.LaunchEnvPlan:
        """The launch environment of this recipe on ``world_size`` GPUs (default: published).

        The plan's job through ``launch_env.plan_launch_env_for``, EP all-to-all overlap as the
        plan decided it: what ``PerfEnvPlugin.from_recipe`` exports and what :meth:`build` puts
        in ``cfg.env_vars``. ``options`` are ``plan_launch_env_for``'s (``layernorm_sm_margin``,
        ``nccl_pp_comm_chunksize``, ...).
        """
        # The layout errors are plan()'s and the resolver's to raise (a container is built
        # before it is checked); the environment only needs the job and the EP decision.
        plan = plan_comm_overlap(self.request(), self.job_on(world_size=world_size, te=te))
        return launch_env.plan_launch_env_for(
            plan.job,
            a2a_overlap=plan.a2a_overlap,
            **options,
        )

    # --- the full container ------------------------------------------------------------------

    def build(self) -> ConfigContainer:
        """The recipe's ``ConfigContainer`` (imports megatron-core and torch).

        The provider's architecture with the job's model description written over it, the
        training sizes, the optimizer and DDP (distributed optimizer and Megatron-FSDP as the job
        says), the precision's mixed-precision preset, the comm-overlap request (TP overlap, the
        preset and the spec's extra overlap fields; the other knobs stay ``None`` so the rules
        derive them at model-build time), the GPU, and ``cfg.env_vars``: the launch environment
        at the published GPU count (:meth:`launch_env`, what ``PerfEnvPlugin.from_recipe``
        exports).
        A config changed afterwards keeps these values; ``runtime_config_update`` warns when
        they contradict the layout it resolves. ``ValueError`` for a model the installed
        megatron-core cannot build (``megatron_core_support.check_buildable``).
        """
        check_buildable(self.job.model)
        # megatron-core and torch: only when a container is asked for.
        from megatron.core.distributed import DistributedDataParallelConfig

        from megatron.bridge.training.config import (
            ConfigContainer,
            TrainingConfig,
            default_optimizer,
        )

        module_name, _, function_name = self.provider.partition(":")
        provider = getattr(importlib.import_module(module_name), function_name)
        model = provider(**dict(self.provider_options))
        write_model(model, self.job.model)
        _log_preset_choice(self.preset_choice(), tp_comm_overlap=self._tp_overlap_wanted())
        dist_opt = self.job.use_distributed_optimizer
        cfg = ConfigContainer(
            model=model,
            train=TrainingConfig(
                micro_batch_size=self.job.micro_batch_size,
                global_batch_size=self.job.global_batch_size,
            ),
            optimizer=default_optimizer(
                lr=self.lr, min_lr=self.min_lr, use_distributed_optimizer=dist_opt
            ),
            ddp=DistributedDataParallelConfig(
                use_distributed_optimizer=dist_opt,
                check_for_nan_in_grad=True,
                use_megatron_fsdp=self.job.use_megatron_fsdp,
                num_distributed_optimizer_instances=self.job.num_distributed_optimizer_instances,
                outer_dp_sharding_strategy=self.job.outer_dp_sharding_strategy,
            ),
            mixed_precision=self._mixed_precision(),
            comm_overlap=self.request(),
            gpu=self.job.gpu,
            gpus_per_node=self.job.gpus_per_node,
            nvlink_domain=self.job.nvlink_domain,
            env_vars=self._env_vars(),
        )
        cfg._derived_env = DerivedEnv(
            gpu=self.job.gpu, precision=self.job.precision, env=dict(cfg.env_vars)
        )
        return cfg

    def _mixed_precision(self) -> Any:
        """The precision's mixed-precision preset, reducing gradients and keeping layers in BF16
        as the job says (its setup writes those onto the model config)."""
        from megatron.bridge.training.mixed_precision import get_mixed_precision_config

        mixed = get_mixed_precision_config(PRECISIONS[self.precision].mixed_precision)
        mixed.grad_reduce_in_fp32 = self.job.grad_reduce_in_fp32
        for name in BF16_LAYER_DEFAULTS:
            setattr(mixed, name, getattr(self.job.model, name))
        return mixed

    def _env_vars(self) -> dict[str, str]:
        # The recipe's launch environment at its published GPU count. A request the rules refuse
        # outright (ValueError) gets none: the container still builds, so an override can fix
        # the request, and runtime_config_update raises the same error if it stays.
        try:
            return dict(self.launch_env().env)
        except ValueError as exc:
            logger.warning(
                "Recipe %s: cfg.env_vars left empty, the launch environment needs a plan and "
                "the plan fails: %s",
                self.name,
                exc,
            )
            return {}


def _check_keyword(keyword: str, value: Any) -> None:
    """A recipe keyword's value, checked as a flag or a YAML value of its field is: the field's
    type (``value_types.check_field``: ``TypeError``/``ValueError`` naming the keyword), then its
    range (``validators.LIMITS``)."""
    field = RECIPE_KEYWORDS[keyword]
    if field == "precision":
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"precision must be a precision name such as 'bf16' or 'fp8_cs', got {value!r} "
                f"({type(value).__name__})."
            )
        return
    if field.startswith("model."):
        owner, name = ModelDescription, field.removeprefix("model.")
    elif field in _JOB_FIELDS:
        owner, name = JobDescription, field
    else:
        owner, name = RecipeSpec, field
    if field == "gpu" and value is None:
        return  # the recipe's own GPU
    check_field(owner, name, value, keyword)
    limit = LIMITS.get(field)
    if limit is not None and is_int(value):
        check_int(
            "", keyword, value, minimum=limit.minimum, maximum=limit.maximum, hint=f"({limit.why})"
        )


def _check_named_preset_follows(before: RecipeSpec, after: RecipeSpec) -> None:
    # A preset named on the spec was the user's choice for its GPU and precision; a change of
    # either that it no longer fits is refused ("auto" chooses again, "none" has nothing to fit).
    name = before.preset
    if name in ("auto", "none") or not after._tp_overlap_wanted():
        return
    old, new = before.job, after.job
    if (old.gpu, old.precision) == (new.gpu, new.precision):
        return
    names = preset_names_of(PUBLISHED_PRESETS[name])
    shape = dict(hidden_size=new.model.hidden_size, tp_size=new.tp_size)
    if preset_fits_model(names, **shape, gpu=old.gpu, precision=old.precision) is False:
        return
    if preset_fits_model(names, **shape, gpu=new.gpu, precision=new.precision) is False:
        raise ValueError(
            f"recipe {after.name}: preset {name!r} was named for {old.gpu} {old.precision}; on "
            f"{new.gpu} {new.precision} it does not fit. Name a preset for {new.gpu} "
            f"{new.precision}, or use preset='auto' to let the recipe choose."
        )


def _log_preset_choice(choice: PresetChoice, *, tp_comm_overlap: bool) -> None:
    # Which userbuffers preset a recipe runs with; a warning when TE's defaults stand in. With
    # TP overlap off nothing was looked up and nothing is said.
    if tp_comm_overlap and choice.preset is None:
        logger.warning(
            "%s. Set cfg.comm_overlap.tp_comm_overlap_cfg to a preset tuned for this shape if "
            "you have one.",
            choice.detail,
        )
    elif choice.name is not None:
        logger.info("Userbuffers preset %s: %s.", choice.name, choice.detail)


def spec_of(
    name: str,
    *,
    provider: str,
    model: ModelDescription,
    world_size: int,
    gpu: str,
    micro_batch_size: int = 1,
    global_batch_size: int | None = None,
    use_distributed_optimizer: bool = True,
    **spec_fields: Any,
) -> RecipeSpec:
    """A recipe's spec from its model and published run; sequence parallelism follows TP > 1.

    ``spec_fields`` are the other :class:`RecipeSpec` fields (``precision``, ``lr``, ...).
    """
    spec = RecipeSpec(
        name=name,
        provider=provider,
        job=JobDescription(
            model=model,
            world_size=world_size,
            gpu=gpu,
            micro_batch_size=micro_batch_size,
            global_batch_size=global_batch_size,
            use_distributed_optimizer=use_distributed_optimizer,
        ),
        **spec_fields,
    )
    # The tensor-parallel size, given as a change, brings sequence parallelism with it.
    return spec.changed(**{"model.tensor_model_parallel_size": model.tensor_model_parallel_size})


def published_spec(
    name: str,
    *,
    provider: str,
    use_distributed_optimizer: bool = True,
    **spec_fields: Any,
) -> RecipeSpec:
    """The spec of the shipped recipe ``name`` from its model and its published runs; the first
    run is its default layout (GPU, precision, GPU count, batch sizes, parallel sizes).

    The model is the recipe's entry of ``models.json`` (:func:`~megatron.bridge.recipes.models.
    recipe_model`), the runs its rows of ``published_runs.csv`` (:func:`~megatron.bridge.
    recipes.published.published_runs`); ``spec_fields`` are the other :class:`RecipeSpec` fields.
    """
    runs = published_runs(name)
    first = runs[0]
    spec = spec_of(
        name,
        provider=provider,
        model=recipe_model(name),
        world_size=first.changes["world_size"],
        gpu=first.gpu,
        precision=first.precision,
        use_distributed_optimizer=use_distributed_optimizer,
        published=runs,
        **spec_fields,
    )
    return spec.changed(precision=first.precision, **first.changes)


class RecipeFunctions(NamedTuple):
    """What a recipe module exports besides its :class:`RecipeSpec`."""

    spec: Callable[..., RecipeSpec]
    """The spec with keyword overrides (:data:`RECIPE_KEYWORDS`); no torch."""
    build: Callable[..., ConfigContainer]
    """The ``ConfigContainer`` with keyword overrides (imports megatron-core)."""


def recipe_functions(base: RecipeSpec, title: str, module: str) -> RecipeFunctions:
    """The ``spec`` and builder functions of the recipe ``base`` describes.

    ``title`` names the model in the docstrings (e.g. "Llama-3 70B"); ``module`` is the recipe
    module's ``__name__``, where the functions are published. The launch plugin of a
    recipe is ``PerfEnvPlugin.from_recipe(name)`` or ``PerfEnvPlugin.from_config(cfg, ...)``.
    """

    def spec(**overrides: Any) -> RecipeSpec:
        return base.with_overrides(**overrides)

    def build(**overrides: Any) -> ConfigContainer:
        return spec(**overrides).build()

    keywords = ", ".join(f"``{k}``" for k in RECIPE_KEYWORDS)
    spec.__doc__ = f"The {title} spec with keyword overrides ({keywords}); no torch."
    build.__name__ = build.__qualname__ = base.name
    spec.__module__ = build.__module__ = module
    build.__doc__ = (
        f"{title}: a complete ``ConfigContainer`` in the published layout, sizes overridable.\n\n"
        f"Keywords: {keywords}. ``gpu`` and ``precision`` pick the userbuffers preset (``None`` "
        "with a logged warning when none is published for the resulting shape)."
    )
    return RecipeFunctions(spec, build)
