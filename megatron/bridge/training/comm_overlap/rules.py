"""The resolution rules: from a request and the job description to a plan, as a pure function.

:func:`plan_comm_overlap` decides every knob from a :class:`CommOverlapConfig` and a
:class:`~megatron.bridge.training.job.JobDescription` alone (no megatron-core objects, no I/O, no torch). Each decision records
its source and a one-line reason; a refused request becomes a warning naming every failed
condition and its fix, and a contradiction raises ``ValueError``/``TypeError`` naming the field.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from megatron.bridge.training import hardware
from megatron.bridge.training.comm_overlap.knobs import DEFAULT_BUCKET_SIZE, KNOBS
from megatron.bridge.training.comm_overlap.plan import (
    Decision,
    OverlapPlan,
    OverlapRefusedError,
    Source,
)
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.parallel_layout import check_parallel_layout
from megatron.bridge.training.userbuffers import (
    TransformerLayerTPOverlapCfg,
    mtp_userbuffers_pitfall,
    preset_fits_model,
    preset_names_of,
    preset_shapes_of,
)
from megatron.bridge.training.userbuffers_file import load_preset
from megatron.bridge.training.validators import check_int

__all__ = [
    "EPDispatcher",
    "check_layout",
    "plan_comm_overlap",
    "tp_overlap_buffer_rows",
]

EPDispatcher = Literal["alltoall", "flex"]
"""MoE token dispatchers that EP all-to-all overlap works with."""


class _Planner:
    """Collects decisions, warnings and notes while the rules run."""

    def __init__(self, user: Any, job: JobDescription) -> None:
        self.user = user
        self.job = job
        self.decisions: dict[str, Decision] = {}
        self.warnings: list[str] = []
        # Cautions about a setting the user chose knowingly: shown with the warnings, but strict
        # mode does not turn them into errors (that would forbid the setting outright).
        self.cautions: list[str] = []
        self.notes: list[str] = []
        self.preset_names: tuple[str, ...] = ()

    def set(self, knob: str, value: Any, source: Source, reason: str) -> None:
        self.decisions[knob] = Decision(knob, value, source, reason)

    def value(self, knob: str) -> Any:
        return self.decisions[knob].value

    def direct_values(self, knob: str) -> tuple[tuple[str, Any], ...]:
        """Each ``(config, value)`` set straight on one of ``knob``'s targets, in table order."""
        return tuple((c, v) for c, name, v in self.job.direct_settings if name == knob)

    def user_value(self, knob: str) -> tuple[Any, str]:
        """The user's setting of ``knob`` and where it was made, or (None, "").

        A value written straight onto any megatron-core config the knob targets counts when the
        knob table says such a setting is honoured; it must then agree with CommOverlapConfig.
        Two configs that disagree: the first target in the knob table wins (a warning names
        both, see :meth:`_report_direct_settings`).
        """
        mine = getattr(self.user, knob)
        found = self.direct_values(knob) if KNOBS[knob].direct == "honoured" else ()
        for config, theirs in found:
            if mine is not None and mine != theirs:
                raise ValueError(
                    f"{knob} is {mine!r} in CommOverlapConfig but {theirs!r} on "
                    f"cfg.{config}.{knob}: choose one, preferably in CommOverlapConfig."
                )
        if mine is not None:
            return mine, "set in CommOverlapConfig"
        if found:
            theirs = found[0][1]
            where = " and ".join(f"cfg.{c}.{knob}" for c, v in found if v == theirs)
            return theirs, f"set on {where}"
        return None, ""

    def _report_direct_settings(self) -> None:
        # Nothing the user wrote straight onto a megatron-core config is overridden silently: a
        # reported setting the plan replaces is said, and so is an honoured one that another
        # config contradicts (the first target won in user_value; the plan writes every target).
        for knob, spec in KNOBS.items():
            decided = self.decisions[knob]
            found = self.direct_values(knob)
            if spec.direct == "reported":
                for config, value in found:
                    if decided.value != value:
                        self.warnings.append(
                            f"cfg.{config}.{knob}={value!r} is replaced by {decided.value!r} "
                            f"({decided.reason}); set {knob} in CommOverlapConfig to make it a "
                            "request."
                        )
            elif spec.direct == "honoured" and found:
                kept_config, kept = found[0]
                for config, value in found[1:]:
                    if value != kept:
                        self.warnings.append(
                            f"cfg.{kept_config}.{knob}={kept!r} but cfg.{config}.{knob}={value!r}: "
                            f"the plan keeps cfg.{kept_config}'s and writes {decided.value!r} to "
                            f"both (megatron-core reads each); set {knob} in CommOverlapConfig, or "
                            "the same value on both, to choose."
                        )

    def plan(self) -> OverlapPlan:
        self._tp()
        self._pp()
        self._dp()
        self._ep()
        self._wgrad_deferral()
        self._report_direct_settings()
        self._hardware_notes()
        ordered = tuple(self.decisions[k] for k in KNOBS)
        return OverlapPlan(
            job=self.job,
            decisions=ordered,
            warnings=tuple(self.warnings + self.cautions),
            notes=tuple(self.notes),
            preset_names=self.preset_names,
        )

    def _preset(self) -> tuple[TransformerLayerTPOverlapCfg | None, str]:
        """The userbuffers config in use and where it was set."""
        if self.user.preset is not None:
            return self.user.preset, "set in CommOverlapConfig"
        found = self.job.direct_setting("tp_comm_overlap_cfg")
        if found is None:
            return None, ""
        config, value = found
        return load_preset(value, owner=f"cfg.{config}"), f"set on cfg.{config}.tp_comm_overlap_cfg"

    def _hardware_notes(self) -> None:
        f = self.job
        if f.model.moe:
            self.notes.append(
                f"expert parameters are replicated over expert-DP={f.expert_data_parallel_size} "
                "(world / (ETP x EP x PP)): their gradients are reduced, and overlapped by "
                "overlap_grad_reduce, over that group rather than over DP="
                f"{f.dp_size}."
            )
        if f.gpu is None:
            return
        spec = hardware.gpu_spec(f.gpu)
        tp_split = f.tp_size > 1 or f.cp_size > 1
        if (
            not spec.sm100_or_newer
            and tp_split
            and self.value("tp_comm_overlap")
            and self.value("overlap_moe_expert_parallel_comm")
        ):
            self.cautions.append(
                f"TP overlap and EP all-to-all overlap are both on, on {spec.name} (Hopper or "
                "older): EP overlap needs concurrent streams, so CUDA_DEVICE_MAX_CONNECTIONS stays "
                "8 instead of 1 and TP overlap loses: its comm kernels are no longer guaranteed "
                "to start before the GEMMs they overlap. Keep the one that hides more (profile "
                "with NsysPlugin), or move to Blackwell where both get their queues."
            )

    # --- TP -----------------------------------------------------------------------------------

    def _tp(self) -> None:
        f, user = self.job, self.user
        preset, where = self._preset()
        backend = user.tp_comm_bootstrap_backend
        backend_source: Source = "default" if backend == "nccl" else "user"
        if not user.tp_comm_overlap:
            self.set("tp_comm_overlap", False, "user", "tp_comm_overlap=False in CommOverlapConfig")
            self.set("tp_comm_overlap_cfg", None, "default", "TP overlap is off")
            self.set(
                "tp_comm_bootstrap_backend", backend, backend_source, "unused: TP overlap is off"
            )
            if preset is not None:
                self.warnings.append(
                    "tp_comm_overlap_cfg is set but tp_comm_overlap=False, so the preset is "
                    "ignored; set tp_comm_overlap=True to use it or drop the preset."
                )
            return

        failed: list[str] = []
        if f.tp_size < 2:
            failed.append(
                f"tensor_model_parallel_size is {f.tp_size}; TP overlap needs >= 2 "
                "(raise tensor_model_parallel_size or set tp_comm_overlap=False)"
            )
        if not f.sequence_parallel:
            failed.append(
                "sequence_parallel is False; TE userbuffers overlap the sequence-parallel "
                "all-gather/reduce-scatter (set cfg.model.sequence_parallel=True)"
            )
        if not f.te_available:
            failed.append(
                "Transformer Engine is not available: "
                + (f.te_reason or "not importable (install the 'te' extra where the job runs)")
            )
        if failed:
            reason = "requested but refused: " + "; ".join(failed)
            self.set("tp_comm_overlap", False, "refused", reason)
            self.set("tp_comm_overlap_cfg", None, "default", "TP overlap is off")
            self.set(
                "tp_comm_bootstrap_backend", backend, backend_source, "unused: TP overlap is off"
            )
            self.warnings.append(f"TP comm overlap turned OFF: {'; '.join(failed)}.")
            return

        self._check_tp_token_divisibility()
        if f.model.mtp_num_layers:
            self.warnings.append(
                f"TP overlap {mtp_userbuffers_pitfall(f.model.mtp_num_layers)}; build_model "
                "checks the config after the build and reports such a flip."
            )
        self.set(
            "tp_comm_overlap",
            True,
            "user",
            f"requested, and TP={f.tp_size} >= 2, sequence parallel on, Transformer Engine available",
        )
        if preset is None:
            self.set(
                "tp_comm_overlap_cfg", None, "default", "no preset: Transformer Engine's defaults"
            )
            self.notes.append(
                "TP overlap uses Transformer Engine's default userbuffer settings (no "
                "tp_comm_overlap_cfg preset given); a published preset for your shape is often faster."
            )
        else:
            self.preset_names = preset_names_of(preset)
            label = ", ".join(self.preset_names) if self.preset_names else "a custom preset"
            self.set("tp_comm_overlap_cfg", preset.to_ub_cfgs(), "user", f"{where}: {label}")
            self._check_preset_shape(preset)
        self.set(
            "tp_comm_bootstrap_backend",
            backend,
            backend_source,
            "bootstraps the userbuffers communicator" + (" (default)" if backend == "nccl" else ""),
        )

    def _check_tp_token_divisibility(self) -> None:
        f = self.job
        if f.model.seq_length is None or f.micro_batch_size is None:
            missing = [
                n
                for n, v in (
                    ("seq_length", f.model.seq_length),
                    ("micro_batch_size", f.micro_batch_size),
                )
                if v is None
            ]
            self.notes.append(
                f"TP overlap token-divisibility check skipped: {' and '.join(missing)} unknown here."
            )
            return
        tp_overlap_buffer_rows(
            seq_length=f.model.seq_length,
            micro_batch_size=f.micro_batch_size,
            cp_size=f.cp_size,
            tp_size=f.tp_size,
        )

    def _check_preset_shape(self, preset: TransformerLayerTPOverlapCfg) -> None:
        f = self.job
        names = preset_names_of(preset)
        if (
            preset_fits_model(names, hidden_size=f.model.hidden_size, tp_size=f.tp_size)
            is not False
        ):
            return
        shapes = preset_shapes_of(preset)
        published = ", ".join(f"hidden {s.hidden_size} TP{s.tp_size}" for s in shapes)
        self.warnings.append(
            f"tp_comm_overlap_cfg {', '.join(preset_names_of(preset))} was tuned for {published}, "
            f"but the model has hidden {f.model.hidden_size} TP{f.tp_size}: almost always a mistake. Use "
            "find_userbuffers_preset(...) for your shape, or tp_comm_overlap_cfg=None for TE defaults."
        )

    # --- PP -----------------------------------------------------------------------------------

    def _pp(self) -> None:
        f, user = self.job, self.user
        overlap, batch = user.overlap_p2p_comm, user.batch_p2p_comm
        if overlap and batch:
            raise ValueError(
                "overlap_p2p_comm=True and batch_p2p_comm=True are mutually exclusive at run time: "
                "choose one (overlap_p2p_comm for an interleaved pipeline)."
            )
        if overlap and not f.interleaved:
            raise ValueError(
                f"overlap_p2p_comm=True needs an interleaved pipeline (PP > 1 and VPP > 1), got "
                f"PP={f.pp_size} VPP={f.vpp_size}: megatron-core's non-interleaved schedule rejects "
                "it. Set virtual_pipeline_model_parallel_size or drop overlap_p2p_comm."
            )
        if f.interleaved:
            layout = f"interleaved pipeline (PP={f.pp_size}, VPP={f.vpp_size})"
            d_overlap, d_batch = True, False
        elif f.pp_size > 1:
            layout = f"PP={f.pp_size} without VPP: p2p overlap needs an interleaved pipeline"
            d_overlap, d_batch = False, True
        else:
            layout = "no pipeline parallelism"
            d_overlap, d_batch = False, False

        if overlap is not None:
            self.set("overlap_p2p_comm", overlap, "user", "set in CommOverlapConfig")
        elif batch:
            self.set(
                "overlap_p2p_comm",
                False,
                "derived",
                "batch_p2p_comm=True was set; the two are exclusive",
            )
        else:
            self.set("overlap_p2p_comm", d_overlap, "derived", layout)

        if batch is not None:
            self.set("batch_p2p_comm", batch, "user", "set in CommOverlapConfig")
        elif self.value("overlap_p2p_comm"):
            self.set("batch_p2p_comm", False, "derived", "exclusive with overlap_p2p_comm")
        else:
            value = f.pp_size > 1
            self.set(
                "batch_p2p_comm",
                value,
                "derived",
                layout if value == d_batch else "PP > 1 without p2p overlap",
            )
        if f.pp_size == 1 and (overlap or batch):
            self.notes.append("p2p settings have no effect without pipeline parallelism (PP=1).")
        if f.model.overlap_p2p_comm_warmup_flush and (
            not self.value("overlap_p2p_comm") or self.value("batch_p2p_comm")
        ):
            raise ValueError(
                "overlap_p2p_comm_warmup_flush=True on cfg.model needs overlap_p2p_comm=True and "
                f"batch_p2p_comm=False, but the plan has overlap_p2p_comm="
                f"{self.value('overlap_p2p_comm')}, batch_p2p_comm={self.value('batch_p2p_comm')} "
                f"({self.decisions['overlap_p2p_comm'].reason}); megatron-core rejects that. Set "
                "cfg.model.overlap_p2p_comm_warmup_flush=False, or use an interleaved pipeline with "
                "overlap_p2p_comm."
            )

    # --- DP -----------------------------------------------------------------------------------

    def _dp(self) -> None:
        f = self.job
        dist_opt = f.use_distributed_optimizer
        many = f.dp_size > 1
        why_dp = f"DP={f.dp_size}"
        if f.distributed_optimizer_note is not None:
            self.notes.append(f.distributed_optimizer_note)

        grad, where = self.user_value("overlap_grad_reduce")
        gather, gather_where = self.user_value("overlap_param_gather")
        if grad is not None:
            self.set("overlap_grad_reduce", grad, "user", where)
        elif many:
            self.set(
                "overlap_grad_reduce",
                True,
                "derived",
                f"{why_dp} > 1: hide the gradient reduction under backward",
            )
        elif gather:
            # megatron-core overlaps the param all-gather only together with the grad reduce, so
            # a param-gather request brings it along (at DP=1 neither has anything to do).
            self.set(
                "overlap_grad_reduce",
                True,
                "derived",
                f"overlap_param_gather=True ({gather_where}) needs it",
            )
        else:
            self.set(
                "overlap_grad_reduce",
                False,
                "derived",
                f"{why_dp}: nothing to reduce across replicas",
            )
        grad = self.value("overlap_grad_reduce")

        if gather:
            if not dist_opt:
                raise ValueError(
                    "overlap_param_gather=True needs the distributed optimizer (it overlaps the "
                    "all-gather of sharded parameters): set cfg.ddp.use_distributed_optimizer=True "
                    "and cfg.optimizer.use_distributed_optimizer=True, or drop "
                    f"overlap_param_gather ({gather_where})."
                )
            if not grad:
                raise ValueError(
                    "overlap_param_gather=True needs overlap_grad_reduce=True (megatron-core "
                    "overlaps the param all-gather only together with the grad reduce-scatter); "
                    f"overlap_param_gather was {gather_where}."
                )
        if gather is not None:
            self.set("overlap_param_gather", gather, "user", gather_where)
        elif not many:
            self.set("overlap_param_gather", False, "derived", f"{why_dp}: nothing to gather")
        elif not dist_opt:
            self.set(
                "overlap_param_gather",
                False,
                "derived",
                "needs the distributed optimizer (off): only the gradient all-reduce is overlapped",
            )
        elif not grad:
            self.set(
                "overlap_param_gather", False, "derived", "needs overlap_grad_reduce, which is off"
            )
        else:
            self.set(
                "overlap_param_gather",
                True,
                "derived",
                f"{why_dp} > 1 with the distributed optimizer",
            )
        gather = self.value("overlap_param_gather")

        align, where = self.user_value("align_param_gather")
        if align and not f.interleaved:
            raise ValueError(
                f"align_param_gather=True only applies to an interleaved pipeline (PP > 1 and VPP > "
                f"1), got PP={f.pp_size} VPP={f.vpp_size}; drop it or set "
                "virtual_pipeline_model_parallel_size."
            )
        if align is not None:
            self.set("align_param_gather", align, "user", where)
        elif gather and f.interleaved:
            self.set(
                "align_param_gather",
                True,
                "derived",
                "param-gather overlap with an interleaved pipeline",
            )
        else:
            self.set(
                "align_param_gather",
                False,
                "derived",
                "no param-gather overlap" if not gather else "pipeline is not interleaved",
            )

        size, where = self.user_value("bucket_size")
        if size is not None and f.num_buckets is not None:
            raise ValueError(
                f"bucket_size={size!r} ({where}) and cfg.ddp.num_buckets={f.num_buckets} are both "
                "set; megatron-core's DistributedDataParallelConfig takes one: choose one (drop "
                "bucket_size or set cfg.ddp.num_buckets=None)."
            )
        if size is not None:
            if type(size) is not int or size < 1:
                raise TypeError(
                    f"bucket_size must be a positive int (parameters), got {size!r} ({where})."
                )
            self.set("bucket_size", size, "user", f"{where} (parameters, not bytes)")
        elif f.num_buckets is not None:
            self.set(
                "bucket_size",
                None,
                "derived",
                f"cfg.ddp.num_buckets={f.num_buckets} sets the bucketing (exclusive with bucket_size)",
            )
        elif many:
            self.set(
                "bucket_size",
                DEFAULT_BUCKET_SIZE,
                "derived",
                f"{why_dp} > 1: 128 Mi parameters per bucket",
            )
        else:
            self.set("bucket_size", None, "derived", f"{why_dp}: megatron-core's default bucketing")

        step = self.user.overlap_param_gather_with_optimizer_step
        if step:
            missing = [
                text
                for ok, text in (
                    (dist_opt, "the distributed optimizer"),
                    (gather, "overlap_param_gather=True"),
                    (f.interleaved, "an interleaved pipeline (PP > 1 and VPP > 1)"),
                )
                if not ok
            ]
            if missing:
                raise ValueError(
                    "overlap_param_gather_with_optimizer_step=True needs "
                    + ", ".join(missing)
                    + "."
                )
            self.set(
                "overlap_param_gather_with_optimizer_step", True, "user", "set in CommOverlapConfig"
            )
            self.cautions.append(
                "overlap_param_gather_with_optimizer_step=True is known to break checkpointing; "
                "check that checkpoints load before relying on it."
            )
        elif step is False:
            self.set(
                "overlap_param_gather_with_optimizer_step",
                False,
                "user",
                "set in CommOverlapConfig",
            )
        else:
            self.set(
                "overlap_param_gather_with_optimizer_step",
                False,
                "default",
                "off by default: it breaks checkpointing",
            )

        if not f.megatron_ddp:
            self.notes.append(
                "DDP is not megatron-core's DistributedDataParallelConfig: the DP decisions above "
                "are not written there; configure that implementation's overlap yourself."
            )
        if not many:
            for knob, idle in (
                ("overlap_grad_reduce", "no gradient is reduced across replicas"),
                ("overlap_param_gather", "no parameter is gathered across replicas"),
            ):
                decided = self.decisions[knob]
                if decided.source == "user" and decided.value:
                    self.notes.append(
                        f"{knob}=True ({decided.reason}) is kept but has no effect with "
                        f"{why_dp}: {idle}."
                    )

    # --- EP -----------------------------------------------------------------------------------

    def _ep(self) -> None:
        f, user = self.job, self.user
        ep = user.overlap_moe_expert_parallel_comm
        if ep:
            failed = [
                text
                for bad, text in (
                    (f.ep_size <= 1, f"expert_model_parallel_size > 1 (got {f.ep_size})"),
                    (
                        not f.model.num_moe_experts or f.model.num_moe_experts <= 1,
                        f"more than one expert (num_moe_experts={f.model.num_moe_experts})",
                    ),
                    (
                        f.model.token_dispatcher not in get_args(EPDispatcher),
                        f"moe_token_dispatcher_type alltoall or flex (got {f.model.token_dispatcher!r})",
                    ),
                    (not (f.model.bf16 or f.model.fp16), "bf16 or fp16 training"),
                    (
                        f.pp_size > 1 and f.vpp_size is None,
                        "virtual_pipeline_model_parallel_size set when PP > 1",
                    ),
                    (
                        f.model.recompute_granularity == "full",
                        "no full activation recompute (recompute_granularity='full')",
                    ),
                    (
                        f.model.recompute_method is not None,
                        f"recompute_method=None (got {f.model.recompute_method!r})",
                    ),
                    (
                        f.model.recompute_num_layers is not None,
                        f"recompute_num_layers=None (got {f.model.recompute_num_layers})",
                    ),
                    ("moe" in (f.model.recompute_modules or ()), "'moe' not in recompute_modules"),
                    (f.model.moe_shared_expert_overlap, "moe_shared_expert_overlap=False"),
                    (
                        f.model.mtp_num_layers not in (None, 0, 1),
                        f"mtp_num_layers None, 0 or 1 (got {f.model.mtp_num_layers})",
                    ),
                )
                if bad
            ]
            if f.model.overlap_dispatch_backward_with_experts_wgrad:
                failed.append("overlap_dispatch_backward_with_experts_wgrad=False on cfg.model")
            if f.model.cuda_graph_impl == "transformer_engine":
                graphed = [m for m in ("moe", "mlp") if m in f.model.cuda_graph_modules]
                if graphed:
                    failed.append(
                        f"no {' or '.join(graphed)} in cuda_graph_modules with "
                        "cuda_graph_impl='transformer_engine'"
                    )
            if failed:
                raise ValueError(
                    "overlap_moe_expert_parallel_comm=True needs: " + "; ".join(failed) + ". Fix "
                    "these or set overlap_moe_expert_parallel_comm=False."
                )
            self.set(
                "overlap_moe_expert_parallel_comm",
                True,
                "user",
                f"set in CommOverlapConfig; EP={f.ep_size}, {f.model.num_moe_experts} experts",
            )
        elif ep is False:
            self.set("overlap_moe_expert_parallel_comm", False, "user", "set in CommOverlapConfig")
        else:
            self.set("overlap_moe_expert_parallel_comm", False, "default", "off unless requested")

        if f.model.ep_overlap_early_attn_memory_release and not self.value(
            "overlap_moe_expert_parallel_comm"
        ):
            raise ValueError(
                "ep_overlap_early_attn_memory_release=True on cfg.model needs "
                "overlap_moe_expert_parallel_comm=True: request EP overlap in CommOverlapConfig or "
                "set cfg.model.ep_overlap_early_attn_memory_release=False."
            )

        delay = user.delay_wgrad_compute
        if delay:
            if not self.value("overlap_moe_expert_parallel_comm"):
                raise ValueError(
                    "delay_wgrad_compute=True needs overlap_moe_expert_parallel_comm=True."
                )
            self._check_delayed_wgrad_with_cuda_graphs()
            needs_recent_te = (
                self.value("overlap_grad_reduce") or f.model.gradient_accumulation_fusion
            )
            te_version = f.te_version if f.te_available else None
            if needs_recent_te and not _version_at_least(te_version, (2, 7)):
                raise ValueError(
                    "delay_wgrad_compute=True with overlap_grad_reduce or "
                    f"gradient_accumulation_fusion needs Transformer Engine >= 2.7 (found "
                    f"{te_version or 'none'})."
                )
            self.set("delay_wgrad_compute", True, "user", "set in CommOverlapConfig")
        elif delay is False:
            self.set("delay_wgrad_compute", False, "user", "set in CommOverlapConfig")
        else:
            self.set("delay_wgrad_compute", False, "default", "off unless requested")

    def _check_delayed_wgrad_with_cuda_graphs(self) -> None:
        f = self.job
        te_version = f.te_version if f.te_available else None
        if f.model.cuda_graph_impl == "transformer_engine" and not _version_at_least(
            te_version, (2, 10)
        ):
            raise ValueError(
                "delay_wgrad_compute=True with cuda_graph_impl='transformer_engine' needs "
                f"Transformer Engine >= 2.10 (found {te_version or 'none'}): upgrade TE, or set "
                "cuda_graph_impl='none' or delay_wgrad_compute=False."
            )
        # The per-layer graph implementations capture the delayed wgrad too when the captured
        # region holds weights whose wgrad is delayed: attention, or the router region when it
        # runs non-overlapped shared experts (megatron-core's TECudaGraphHelper condition).
        attn = "attn" in f.model.cuda_graph_modules
        shared_experts_in_router = (
            "moe_router" in f.model.cuda_graph_modules
            and f.model.moe_shared_expert_intermediate_size is not None
            and not f.model.moe_shared_expert_overlap
        )
        if f.model.cuda_graph_impl not in ("local", "transformer_engine") or not (
            attn or shared_experts_in_router
        ):
            return
        scope = "attn" if attn else "moe_router with shared experts"
        if not _version_at_least(te_version, (2, 12)):
            raise ValueError(
                f"delay_wgrad_compute=True with a CUDA graph scope covering {scope} needs "
                f"Transformer Engine >= 2.12 (found {te_version or 'none'}): upgrade TE, or drop "
                f"{scope.split()[0]} from cuda_graph_modules."
            )
        if not f.model.gradient_accumulation_fusion:
            raise ValueError(
                f"delay_wgrad_compute=True with a CUDA graph scope covering {scope} needs "
                "gradient_accumulation_fusion=True on cfg.model: without it the delayed wgrad "
                "accumulates into buffers whose addresses change, which a CUDA graph cannot "
                f"replay. Set cfg.model.gradient_accumulation_fusion=True or drop "
                f"{scope.split()[0]} from cuda_graph_modules."
            )
        if attn and f.model.attention_bias:
            raise ValueError(
                "delay_wgrad_compute=True with 'attn' in cuda_graph_modules does not support "
                "attention bias: set cfg.model.add_bias_linear=False and "
                "cfg.model.add_qkv_bias=False, or drop 'attn' from cuda_graph_modules."
            )

    # --- embedding wgrad deferral ----------------------------------------------------------------

    def _wgrad_deferral(self) -> None:
        f, user = self.job, self.user
        defer, limit = user.defer_embedding_wgrad_compute, user.wgrad_deferral_limit
        if defer:
            if f.pp_size == 1:
                raise ValueError(
                    "defer_embedding_wgrad_compute=True needs pipeline parallelism (it hides the "
                    "embedding wgrad in the pipeline flush); drop it or set PP > 1."
                )
            if not f.model.gradient_accumulation_fusion:
                raise ValueError(
                    "defer_embedding_wgrad_compute=True needs gradient_accumulation_fusion=True on the model config."
                )
            if limit is not None and limit < 0:
                raise ValueError(
                    "wgrad_deferral_limit must be >= 0 when defer_embedding_wgrad_compute=True "
                    "(0 defers every micro-batch)."
                )
            self.set("defer_embedding_wgrad_compute", True, "user", "set in CommOverlapConfig")
            if limit is None:
                self.set(
                    "wgrad_deferral_limit", 0, "derived", "deferral on: 0 defers every micro-batch"
                )
            else:
                self.set("wgrad_deferral_limit", limit, "user", "set in CommOverlapConfig")
            return
        self.set(
            "defer_embedding_wgrad_compute",
            False,
            "user" if defer is False else "default",
            "set in CommOverlapConfig" if defer is False else "off unless requested",
        )
        if limit is not None and limit != -1:
            self.warnings.append(
                f"wgrad_deferral_limit={limit} has no effect without defer_embedding_wgrad_compute=True."
            )
        self.set(
            "wgrad_deferral_limit",
            -1 if limit is None else limit,
            "default" if limit is None else "user",
            "deferral is off",
        )


def tp_overlap_buffer_rows(
    *, seq_length: int, micro_batch_size: int, cp_size: int, tp_size: int
) -> int:
    """Rows of TE's TP-overlap userbuffers: ``(seq_length * micro_batch_size) // cp_size``.

    TE splits those rows evenly across the TP ranks, so they must divide by CP and then by TP;
    otherwise ``ValueError`` naming the sizes and the fix.
    """
    tokens = seq_length * micro_batch_size
    if tokens % cp_size:
        raise ValueError(
            f"tp_comm_overlap needs seq_length * micro_batch_size = {seq_length} * "
            f"{micro_batch_size} = {tokens}, which is not divisible by context_parallel_size="
            f"{cp_size}; change seq_length or micro_batch_size, or set tp_comm_overlap=False."
        )
    rows = tokens // cp_size
    if rows % tp_size:
        raise ValueError(
            f"tp_comm_overlap needs (seq_length * micro_batch_size) / context_parallel_size = "
            f"{rows} divisible by tensor_model_parallel_size={tp_size}; change seq_length or "
            "micro_batch_size, or set tp_comm_overlap=False."
        )
    return rows


def _version_at_least(version: str | None, minimum: tuple[int, int]) -> bool:
    if not version:
        return False
    parts: list[int] = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= minimum


def plan_comm_overlap(user: Any, job: JobDescription) -> OverlapPlan:
    """Resolve a ``CommOverlapConfig`` request against a job: the pure core of the rules.

    Runs the request's ``finalize()`` checks, then every rule. Raises ``TypeError``/``ValueError``
    for bad or contradictory input and :class:`OverlapRefusedError` when ``user.strict`` and a
    requested overlap was refused or a likely mistake was found (cautions about a setting the
    user chose, such as ``overlap_param_gather_with_optimizer_step``, stay warnings).
    """
    user.finalize()
    _check_job(job)
    planner = _Planner(user, job)
    plan = planner.plan()
    if user.strict and planner.warnings:
        raise OverlapRefusedError(
            "strict comm overlap: "
            + " | ".join(planner.warnings)
            + " (strict=True turns these into errors)"
        )
    return plan


def _check_job(job: JobDescription) -> None:
    # ValueError for a wrong type too: a job description is built by the library, so a bad one is a bad
    # layout value that reached it, not a programming error of the caller.
    for name in ("tp_size", "pp_size", "cp_size", "ep_size", "dp_size"):
        check_int("", name, getattr(job, name), type_error=ValueError)
    check_int(
        "",
        "virtual_pipeline_model_parallel_size",
        job.model.virtual_pipeline_model_parallel_size,
        optional=True,
        type_error=ValueError,
    )
    if job.gpu is not None:
        hardware.check_precision_on_gpu(gpu=job.gpu, fp8=(job.precision == "fp8"))


def check_layout(job: JobDescription) -> None:
    """Raise ``ValueError`` for a layout megatron-core would reject when the job starts.

    Checks the whole layout: the world splits into TP x CP x PP x DP and into the expert grid,
    layers split across pipeline stages (and virtual stages), heads and query groups across TP
    ranks, experts across EP ranks, the sequence across CP ranks, sequence parallelism has TP to
    split over, and FP8 runs on a GPU that has it. Needs the world size, so it runs where the whole
    layout is known: ``runtime_config_update`` (before anything is written) and
    ``bridge-overlap explain``.
    """
    _check_job(job)
    check_parallel_layout(
        world_size=job.world_size,
        tp_size=job.tp_size,
        pp_size=job.pp_size,
        vpp_size=job.model.virtual_pipeline_model_parallel_size,
        cp_size=job.cp_size,
        ep_size=job.ep_size,
        etp_size=job.model.expert_tensor_parallel_size,
        sequence_parallel=job.sequence_parallel,
        num_layers=job.model.num_layers,
        num_attention_heads=job.model.num_attention_heads,
        num_query_groups=job.model.num_query_groups,
        num_moe_experts=job.model.num_moe_experts,
        seq_length=job.model.seq_length,
        account_for_embedding_in_pipeline_split=job.model.account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split=job.model.account_for_loss_in_pipeline_split,
    )
