"""The job around the model: :class:`JobDescription` and the layout facts derived from it.

A :class:`JobDescription` holds the :class:`~megatron.bridge.training.job.model.ModelDescription`
and what megatron-core's other configs say of the job: the world size, the GPU, the batch sizes,
the optimizer sharding and where Transformer Engine stands. The derived layout facts
(data-parallel size, interleaving, micro-batches, expert data parallelism, optimizer shards) are
properties, computed from the fields and never stored twice. Its JSON form is
:meth:`JobDescription.to_dict` and :meth:`JobDescription.from_dict`.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from megatron.bridge.training.hardware import gpu_spec, nvlink_ranks
from megatron.bridge.training.job.model import ModelDescription
from megatron.bridge.training.parallel_layout import data_parallel_size, micro_batches_per_step
from megatron.bridge.training.pipeline_layout import parse_layout

__all__ = ["OUTER_DP_SHARDING_STRATEGIES", "ConfigName", "JobDescription"]

ConfigName = Literal["model", "ddp", "optimizer"]
"""A megatron-core config of the job, by its ``ConfigContainer`` attribute: TransformerConfig,
DistributedDataParallelConfig or OptimizerConfig (``cfg.model``, ``cfg.ddp``, ``cfg.optimizer``)."""

OUTER_DP_SHARDING_STRATEGIES = ("no_shard", "optim")
"""The values of the DDP config's ``outer_dp_sharding_strategy`` (Megatron-LM's
``--outer-dp-sharding-strategy`` choices)."""


def _model_field(name: str, doc: str) -> property:
    """A read-only property giving the model's field (or property) ``name`` under a short name."""
    return property(operator.attrgetter(f"model.{name}"), doc=doc)


@dataclass(frozen=True, kw_only=True)
class JobDescription:
    """One training job: the model, the world it runs on, batches, optimizer sharding, TE.

    The parallel sizes are the model's (``model.tensor_model_parallel_size`` ...); the properties
    below give them short names and derive the data-parallel layout from ``world_size``.
    """

    model: ModelDescription
    """The model, as megatron-core's TransformerConfig names it."""
    world_size: int = 1
    """GPUs in the job."""
    gpu: str | None = None
    """GPU model (a name from the GPU catalogue); None when unknown."""
    gpus_per_node: int | None = None
    """GPUs per node (None: the GPU catalogue's for ``gpu``)."""
    nvlink_domain: int | None = None
    """Consecutive ranks one NVLink domain connects (None: the GPU catalogue's domain beyond a
    node, e.g. 72 on GB200 NVL72, else the node); :attr:`nvlink_ranks` reads both."""
    micro_batch_size: int | None = None
    """Samples per micro-batch."""
    global_batch_size: int | None = None
    """Samples per optimizer step (None: micro-batch x DP x PP)."""
    use_distributed_optimizer: bool = False
    """The distributed optimizer shards optimizer state over data-parallel ranks."""
    megatron_ddp: bool = True
    """DDP is megatron-core's DistributedDataParallel (the DP knobs are written only then)."""
    use_megatron_fsdp: bool = False
    """The DDP config's ``use_megatron_fsdp``: megatron-core wraps the model in Megatron-FSDP,
    which reads the DP knobs its own way (the plan says which do nothing there)."""
    num_distributed_optimizer_instances: int = 1
    """The DDP config's ``num_distributed_optimizer_instances``: the DP x CP ranks (and the
    expert-DP ranks) split into this many consecutive groups (megatron-core's intra partial
    data-parallel groups); the distributed optimizer, or Megatron-FSDP, shards within a group,
    and the groups reduce gradients among themselves once per step (with Megatron-FSDP, hybrid
    sharding: HSDP)."""
    outer_dp_sharding_strategy: str = "no_shard"  # one of OUTER_DP_SHARDING_STRATEGIES
    """The DDP config's ``outer_dp_sharding_strategy`` under HSDP: ``"optim"`` shards the
    optimizer state over the groups as well; ``"no_shard"`` replicates it in each group."""
    num_buckets: int | None = None
    """DDP bucket count set on the DDP config (exclusive with bucket_size in megatron-core)."""
    grad_reduce_in_fp32: bool = False
    """Gradients are reduced in fp32 (the main-gradient buffer is fp32; else the parameters'
    16-bit dtype)."""
    fp8_param_gather: bool = False
    """Parameters are kept in FP8 (DDP config's ``fp8_param_gather``: Transformer Engine's FP8
    primary weights, gathered in FP8); else in 16 bits, with FP8 copies cast for the GEMMs."""
    fp4_param_gather: bool = False
    """Parameters are kept in FP4 (DDP config's ``fp4_param_gather``, NVFP4 primary weights)."""
    optimizer_cpu_offload: bool = False
    """The optimizer's fp32 state and main weights live partly in CPU memory (OptimizerConfig's
    ``optimizer_cpu_offload``)."""
    optimizer_offload_fraction: float = 0.0
    """Share of the optimizer state offloaded to the CPU with ``optimizer_cpu_offload``
    (OptimizerConfig's ``optimizer_offload_fraction``)."""
    te_available: bool = True
    """Transformer Engine imports where the job runs."""
    te_reason: str = ""
    """Why Transformer Engine is not available (empty when it is)."""
    te_version: str | None = None
    """Transformer Engine version, when known."""
    direct_settings: tuple[tuple[ConfigName, str, Any], ...] = ()
    """Overlap knobs set straight on a megatron-core config, as (config, knob, value)."""
    distributed_optimizer_turned_on: ConfigName | None = None
    """The config (ddp or optimizer) whose use_distributed_optimizer the job turns on to match
    the other one's True (megatron-core reads both); None when they agree."""

    # --- the layout, by short name ------------------------------------------------------------

    tp_size = _model_field("tensor_model_parallel_size", "Tensor-parallel size.")
    pp_size = _model_field("pipeline_model_parallel_size", "Pipeline-parallel size.")
    cp_size = _model_field("context_parallel_size", "Context-parallel size.")
    ep_size = _model_field("expert_model_parallel_size", "Expert-parallel size.")
    sequence_parallel = _model_field("sequence_parallel", "Whether sequence parallelism is on.")
    precision = _model_field(
        "precision", "The userbuffers preset family of the model's precision: bf16, fp16 or fp8."
    )
    compute_dtype = _model_field(
        "compute_dtype", "The model's training precision (``ModelDescription.compute_dtype``)."
    )

    @property
    def nvlink_ranks(self) -> int | None:
        """Consecutive ranks one NVLink domain connects on this job's cluster
        (:func:`~megatron.bridge.training.hardware.nvlink_ranks` of the GPU, with
        :attr:`nvlink_domain` and :attr:`gpus_per_node`); without a GPU, those two alone (None
        when neither is given)."""
        spec = None if self.gpu is None else gpu_spec(self.gpu)
        return nvlink_ranks(
            spec, nvlink_domain=self.nvlink_domain, gpus_per_node=self.gpus_per_node
        )

    @property
    def vpp_size(self) -> int | None:
        """Model chunks per pipeline rank, None without interleaving (megatron-core's "off").

        With a custom ``pipeline_model_parallel_layout``, megatron-core takes it from the layout:
        its stage count over the pipeline size.
        """
        vpp = self.model.virtual_pipeline_model_parallel_size
        layout = self.model.pipeline_model_parallel_layout
        if vpp is None and layout is not None and self.pp_size > 0:
            vpp = len(parse_layout(layout)) // self.pp_size
        return None if vpp in (None, 1) else vpp

    @property
    def etp_size(self) -> int:
        """Expert tensor-parallel size (megatron-core's default: the tensor-parallel size)."""
        etp = self.model.expert_tensor_parallel_size
        return self.tp_size if etp is None else etp

    @property
    def interleaved(self) -> bool:
        """An interleaved (virtual) pipeline: PP > 1 and more than one chunk per rank."""
        return self.pp_size > 1 and self.vpp_size is not None

    @property
    def interleaved_schedule(self) -> bool:
        """Whether megatron-core runs its interleaved schedule: PP > 1 and a VPP size set, 1 too.

        ``get_forward_backward_func`` picks the interleaved schedule whenever the VPP size is not
        None, so ``virtual_pipeline_model_parallel_size=1`` runs it with one model chunk per rank
        (:attr:`interleaved` is False there: nothing is interleaved). A custom pipeline layout
        sets the size only with more than one stage per rank (``TransformerConfig.__post_init__``).
        """
        explicit = self.model.virtual_pipeline_model_parallel_size is not None
        return self.pp_size > 1 and (explicit or self.vpp_size is not None)

    # Cached on the frozen instance (the rules read it many times per plan); an error is not.
    @functools.cached_property
    def dp_size(self) -> int:
        """Data-parallel size: world / (TP x CP x PP); ``ValueError`` when that does not divide."""
        return data_parallel_size(
            num_gpus=self.world_size,
            tp_size=self.tp_size,
            cp_size=self.cp_size,
            pp_size=self.pp_size,
        )

    @property
    def effective_global_batch_size(self) -> int | None:
        """Samples per optimizer step: ``global_batch_size``, or micro-batch x DP x PP where it
        is None; None without a micro-batch size either."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        if self.micro_batch_size is None:
            return None
        return self.micro_batch_size * self.dp_size * self.pp_size

    @property
    def micro_batches(self) -> int | None:
        """Micro-batches per replica and step (None without a micro-batch size); ``ValueError``
        where megatron-core cannot split or schedule the global batch
        (``parallel_layout.micro_batches_per_step``)."""
        gbs = self.effective_global_batch_size
        if self.micro_batch_size is None or gbs is None:
            return None
        return micro_batches_per_step(
            global_batch_size=gbs,
            micro_batch_size=self.micro_batch_size,
            dp_size=self.dp_size,
            pp_size=self.pp_size,
            interleaved=self.interleaved_schedule,
        )

    @property
    def hsdp_outer_shard(self) -> bool:
        """Megatron-FSDP shards the optimizer state over the distributed-optimizer groups too:
        HSDP (more than one group) with an ``outer_dp_sharding_strategy`` other than
        ``"no_shard"`` (``mcore_fsdp_adapter``'s ``hsdp_outer_dp_shard``)."""
        return (
            self.use_megatron_fsdp
            and self.num_distributed_optimizer_instances > 1
            and self.outer_dp_sharding_strategy != "no_shard"
        )

    @property
    def optimizer_shards(self) -> tuple[int, int]:
        """Ranks the distributed optimizer (or Megatron-FSDP) shards over within one instance:
        (dense DP x CP ranks, expert-DP ranks) over ``num_distributed_optimizer_instances``
        (megatron-core's intra partial data-parallel groups; experts: 1 for a dense model)."""
        instances = self.num_distributed_optimizer_instances
        experts = self.expert_data_parallel_size or instances
        return self.dp_size * self.cp_size // instances, max(1, experts // instances)

    @property
    def expert_data_parallel_size(self) -> int | None:
        """Replicas of each expert: world / (ETP x EP x PP); None for a dense model.

        Expert gradients are reduced (and, with the distributed optimizer, expert parameters
        gathered) over this group, not over the dense data-parallel group.
        """
        if not self.model.moe:
            return None
        return self.world_size // (self.etp_size * self.ep_size * self.pp_size)

    @property
    def distributed_optimizer_note(self) -> str | None:
        """The sentence saying which config's ``use_distributed_optimizer`` the job turns on."""
        target = self.distributed_optimizer_turned_on
        if target is None:
            return None
        source = "optimizer" if target == "ddp" else "ddp"
        return (
            f"cfg.{source}.use_distributed_optimizer=True but cfg.{target}."
            f"use_distributed_optimizer=False: cfg.{target}.use_distributed_optimizer is set to "
            "True to match (megatron-core reads both)."
        )

    def direct_setting(self, knob: str) -> tuple[str, Any] | None:
        """``(config, value)`` when the user set ``knob`` straight on a megatron-core config."""
        for config, name, value in self.direct_settings:
            if name == knob:
                return config, value
        return None

    def replace(self, **changes: Any) -> JobDescription:
        """This job with fields changed; ``model.<field>`` keys change model fields."""
        model = {k.removeprefix("model."): v for k, v in changes.items() if k.startswith("model.")}
        top = {k: v for k, v in changes.items() if not k.startswith("model.")}
        if model:
            top["model"] = dataclasses.replace(top.get("model", self.model), **model)
        return dataclasses.replace(self, **top)

    # --- JSON ---------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The description as JSON-ready values (tuples as lists)."""
        return _jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobDescription:
        """Rebuild a description from :meth:`to_dict` output."""
        fields = dict(data)
        model = dict(fields.pop("model"))
        for name in (
            "recompute_modules",
            "offload_modules",
            "cuda_graph_modules",
            "csa_compress_ratios",
        ):
            if model.get(name) is not None:
                model[name] = tuple(model[name])
        layout = model.get("pipeline_model_parallel_layout")
        if isinstance(layout, list):
            model["pipeline_model_parallel_layout"] = tuple(tuple(stage) for stage in layout)
        fields["direct_settings"] = tuple(tuple(t) for t in fields.get("direct_settings", ()))
        return cls(model=ModelDescription(**model), **fields)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
