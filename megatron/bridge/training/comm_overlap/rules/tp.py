"""TP overlap rules: TE userbuffers overlap, its preset and bootstrap backend, and the buffer rows.

:func:`tp_overlap_blockers` names what keeps a layout from running TP overlap (TP below 2,
sequence parallelism off, no Transformer Engine, a TP group across NVLink domains).
:func:`decide_tp` turns ``tp_comm_overlap`` on when nothing blocks it: a request (``True``) that
is blocked is refused with a warning naming every blocker; ``"auto"`` asks only for what the
layout can run, so a blocked layout is planned without TP overlap and without a warning. Either
way, the token count must divide into TE's userbuffers (:func:`tp_overlap_buffer_rows`) and a
preset should fit the model.
"""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.plan import Source
from megatron.bridge.training.comm_overlap.rules.planner import Planner
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.upstream_divergence import differs_from_upstream
from megatron.bridge.training.userbuffers import (
    PresetChoice,
    TransformerLayerTPOverlapCfg,
    choose_userbuffers_preset,
    mtp_userbuffers_pitfall,
    preset_fits_model,
    preset_names_of,
    preset_shapes_of,
    published_name_for,
)
from megatron.bridge.training.userbuffers_file import load_preset

__all__ = ["decide_tp", "tp_group_domain_crossed", "tp_overlap_blockers", "tp_overlap_buffer_rows"]


@differs_from_upstream(
    "a TP-overlap request the layout cannot run names every failed condition in the plan, and "
    "strict=True raises (upstream logs the first one and turns it off); a TP group across NVLink "
    "domains is one (upstream launches it, and userbuffers fail to map the group's buffers)"
)
def tp_overlap_blockers(job: JobDescription) -> tuple[str, ...]:
    """Why TP overlap cannot run on ``job``'s layout, one reason per blocker; empty when it can.

    TE's userbuffers overlap the sequence-parallel all-gather/reduce-scatter of a TP group, so
    they need TP >= 2, sequence parallelism, Transformer Engine, and every TP group inside one
    NVLink domain (:func:`tp_group_domain_crossed`). Each reason names the field and the fix.
    """
    blockers: list[str] = []
    if job.tp_size < 2:
        blockers.append(
            f"tensor_model_parallel_size is {job.tp_size}; TP overlap needs >= 2 "
            "(raise tensor_model_parallel_size or set tp_comm_overlap=False)"
        )
    if not job.sequence_parallel:
        blockers.append(
            "sequence_parallel is False; TE userbuffers overlap the sequence-parallel "
            "all-gather/reduce-scatter (set cfg.model.sequence_parallel=True)"
        )
    if not job.te_available:
        blockers.append(
            "Transformer Engine is not available: "
            + (job.te_reason or "not importable (install the 'te' extra where the job runs)")
        )
    domain = tp_group_domain_crossed(job)
    if domain is not None:
        blockers.append(
            f"tensor_model_parallel_size={job.tp_size} puts a TP group across NVLink domains "
            f"of {domain} {job.gpu} GPUs; TE's userbuffers reach a TP group's peers only "
            f"inside one NVLink domain (keep TP within {domain} consecutive GPUs, a divisor of "
            f"{domain}, or set tp_comm_overlap=False)"
        )
    return tuple(blockers)


def tp_group_domain_crossed(job: JobDescription) -> int | None:
    """The NVLink domain size (:attr:`JobDescription.nvlink_ranks`, the cluster's) that one
    of ``job``'s TP groups crosses; None where every group lies inside one domain, or the domain
    is unknown (no GPU named and no cluster given).

    megatron-core numbers TP innermost (``initialize_model_parallel``'s default order
    "tp-cp-ep-dp-pp"), so TP group g holds ranks [g TP, (g + 1) TP). Transformer Engine's
    userbuffers map the group's buffers into each peer through CUDA IPC handles, or fabric
    handles across a multi-node NVLink domain (``register_user_buffer_collective`` in
    ``transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers-host.cpp``), which no
    GPU outside the domain can open; ``initialize_ub`` builds one userbuffers domain per TP
    group. TE's maintainers: comm+GEMM overlap runs single-node (NVLink-domain) tensor
    parallelism only (NVIDIA/TransformerEngine issue 1071).
    """
    domain = job.nvlink_ranks
    if domain is None or job.tp_size < 2:
        return None
    groups = max(1, job.world_size // job.tp_size)
    # A group's first rank within its domain repeats with a period of at most `domain` groups.
    for group in range(min(groups, domain)):
        if group * job.tp_size % domain + job.tp_size > domain:
            return domain
    return None


@differs_from_upstream(
    "tp_comm_overlap='auto' is resolved to True or False for the model config (upstream writes "
    "the request through, the string included)"
)
def decide_tp(planner: Planner) -> None:
    """Decide TP overlap, its preset and bootstrap backend.

    ``tp_comm_overlap=True`` that the layout cannot run is refused with a warning naming why;
    ``"auto"`` turns it on exactly when :func:`tp_overlap_blockers` finds nothing, TE's
    userbuffers rows divide and the model has no multi-token-prediction layers (whose build
    turns TP overlap off again), and otherwise says why it was not requested.
    """
    f, user = planner.job, planner.user
    preset, where = _preset(planner)
    auto = user.tp_comm_overlap == "auto"
    if not user.tp_comm_overlap:
        _tp_off(planner, "user", "tp_comm_overlap=False in CommOverlapConfig")
        chosen_by = _automatic_choice(planner)
        if chosen_by is not None:
            # The recipe chose it for a TP-overlap run; turning TP overlap off is no mistake.
            planner.notes.append(
                f"tp_comm_overlap=False: the userbuffers preset goes unused (it was {chosen_by})."
            )
        elif preset is not None:
            planner.warnings.append(
                "tp_comm_overlap_cfg is set but tp_comm_overlap=False, so the preset is "
                "ignored; set tp_comm_overlap=True to use it or drop the preset."
            )
        return

    failed = tp_overlap_blockers(f)
    if failed and auto:
        _not_requested(planner, preset, "; ".join(failed))
        return
    if auto and f.model.mtp_num_layers:
        # The build turns TP overlap off again (see the warning an explicit request gets).
        _not_requested(planner, preset, mtp_userbuffers_pitfall(f.model.mtp_num_layers))
        return
    if failed:
        reason = "requested but refused: " + "; ".join(failed)
        _tp_off(planner, "refused", reason)
        planner.warnings.append(f"TP comm overlap turned OFF: {'; '.join(failed)}.")
        return

    if auto:
        try:
            _check_tp_token_divisibility(planner)
        except ValueError as exc:
            _not_requested(planner, preset, str(exc))
            return
    else:
        _check_tp_token_divisibility(planner)
    if f.model.mtp_num_layers:
        planner.warnings.append(
            f"TP overlap {mtp_userbuffers_pitfall(f.model.mtp_num_layers)}; build_model "
            "checks the config after the build and reports such a flip."
        )
    facts = f"TP={f.tp_size} >= 2, sequence parallel on, Transformer Engine available"
    if auto:
        planner.set(
            "tp_comm_overlap",
            True,
            "derived",
            f"tp_comm_overlap='auto' and the layout runs it: {facts}",
        )
    else:
        planner.set("tp_comm_overlap", True, "user", f"requested, and {facts}")
    chosen_by = _automatic_choice(planner)
    if chosen_by is not None:
        preset, chosen_by = _rechosen(planner, preset, chosen_by)
    if preset is None:
        planner.set(
            "tp_comm_overlap_cfg",
            None,
            "default" if chosen_by is None else "derived",
            chosen_by or "no preset: Transformer Engine's defaults",
        )
        planner.notes.append(_te_defaults_note(planner, chosen_by))
    else:
        planner.preset_names = preset_names_of(preset)
        # One object published under several names shows the one that describes this run.
        label = (
            published_name_for(
                planner.preset_names,
                gpu=f.gpu,
                precision=f.precision,
                hidden_size=f.model.hidden_size,
                tp_size=f.tp_size,
            )
            if planner.preset_names
            else "a custom preset"
        )
        if chosen_by is not None:
            planner.set("tp_comm_overlap_cfg", preset.to_ub_cfgs(), "derived", chosen_by)
        else:
            planner.set("tp_comm_overlap_cfg", preset.to_ub_cfgs(), "user", f"{where}: {label}")
        _check_preset_shape(planner, preset)
    backend, backend_source = _backend(planner)
    planner.set(
        "tp_comm_bootstrap_backend",
        backend,
        backend_source,
        "bootstraps the userbuffers communicator" + (" (default)" if backend == "nccl" else ""),
    )


def _backend(planner: Planner) -> tuple[str, Source]:
    """The bootstrap backend asked for, and whether it is the default (nccl) or the user's."""
    backend = planner.user.tp_comm_bootstrap_backend
    return backend, "default" if backend == "nccl" else "user"


def _tp_off(planner: Planner, source: Source, reason: str) -> None:
    """Record TP overlap off (and its preset and backend unused) for ``reason``."""
    backend, backend_source = _backend(planner)
    planner.set("tp_comm_overlap", False, source, reason)
    planner.set("tp_comm_overlap_cfg", None, "default", "TP overlap is off")
    planner.set("tp_comm_bootstrap_backend", backend, backend_source, "unused: TP overlap is off")


def _not_requested(planner: Planner, preset: TransformerLayerTPOverlapCfg | None, why: str) -> None:
    """``tp_comm_overlap='auto'`` on a layout that cannot run it: off, said as derived.

    A preset the user gave is ignored, which a warning says; one chosen automatically goes
    unused without one.
    """
    _tp_off(
        planner,
        "derived",
        f"not requested: the layout cannot run it (TP={planner.job.tp_size}): {why} "
        "(tp_comm_overlap='auto' asks only for what the layout can run)",
    )
    if preset is not None and _automatic_choice(planner) is None:
        planner.warnings.append(
            "tp_comm_overlap_cfg is set but the layout cannot run TP overlap "
            f"(tp_comm_overlap='auto': {why}), so the preset is ignored; change the layout or "
            "drop the preset."
        )


@differs_from_upstream(
    "a preset written straight on cfg.model.tp_comm_overlap_cfg is kept and used (upstream "
    "overwrites it with CommOverlapConfig's, None: TE's defaults)"
)
def _preset(planner: Planner) -> tuple[TransformerLayerTPOverlapCfg | None, str]:
    """The userbuffers config in use and where it was set."""
    if planner.user.preset is not None:
        return planner.user.preset, "set in CommOverlapConfig"
    found = planner.job.direct_setting("tp_comm_overlap_cfg")
    if found is None:
        return None, ""
    config, value = found
    return load_preset(value, owner=f"cfg.{config}"), f"set on cfg.{config}.tp_comm_overlap_cfg"


@differs_from_upstream(
    "a preset a recipe chose (preset_chosen_by) is derived and re-chosen when the GPU or "
    "precision changes (upstream has no automatic choice)"
)
def _automatic_choice(planner: Planner) -> str | None:
    """Who chose CommOverlapConfig's preset and from what, while it is still that choice.

    ``preset_chosen_by`` names the published preset that was chosen; a preset the user put in
    its place since (another object) is the user's.
    """
    chosen_by = planner.user.preset_chosen_by
    preset = planner.user.preset
    if chosen_by is None or preset is None:
        return None
    if not any(name in chosen_by for name in preset_names_of(preset)):
        return None
    return chosen_by


def _rechosen(
    planner: Planner, preset: TransformerLayerTPOverlapCfg, chosen_by: str
) -> tuple[TransformerLayerTPOverlapCfg | None, str]:
    """The automatic choice made again for this job's GPU, precision and shape.

    An automatic choice follows the facts it was made from: a GPU or precision changed after
    the recipe chose (``cfg.gpu``, ``cfg.mixed_precision``, an override) chooses again.
    """
    f = planner.job
    choice = _published_choice(planner)
    if choice is None or choice.preset is preset:
        return preset, chosen_by
    facts = f"{f.gpu} {f.precision}, hidden {f.model.hidden_size}, TP{f.tp_size}, CP{f.cp_size}"
    planner.notes.append(
        f"the userbuffers preset was {chosen_by}; this job differs ({facts}), so it was chosen "
        f"again: {choice.name or 'none'}."
    )
    return choice.preset, (
        f"chosen automatically again for {facts}: {choice.name or 'none'} ({choice.detail})"
    )


def _published_choice(planner: Planner) -> PresetChoice | None:
    """The preset the recipes would choose for this job's shape; None when the shape is unknown."""
    f = planner.job
    if f.gpu is None or f.model.hidden_size is None or f.model.seq_length is None:
        return None
    return choose_userbuffers_preset(
        tp_comm_overlap=True,
        precision="fp8" if f.precision == "fp8" else "bf16",
        gpu=f.gpu,
        hidden_size=f.model.hidden_size,
        tp_size=f.tp_size,
        cp_size=f.cp_size,
        micro_batch_size=f.micro_batch_size or 1,
        seq_length=f.model.seq_length,
    )


def _te_defaults_note(planner: Planner, chosen_by: str | None) -> str:
    """The note for TP overlap on TE's defaults, naming the published preset that fits, if any.

    A ``CommOverlapConfig(tp_comm_overlap=True)`` put in place of a recipe's request drops the
    preset the recipe chose; saying which one fits (and how to set it) keeps that from passing
    unnoticed. An automatic choice that found none already said why in ``chosen_by``.
    """
    note = (
        "TP overlap uses Transformer Engine's default userbuffer settings (no "
        "tp_comm_overlap_cfg preset given)"
    )
    choice = _published_choice(planner) if chosen_by is None else None
    if choice is None or choice.name is None:
        return f"{note}; a published preset for your shape is often faster."
    return (
        f"{note}; the published preset {choice.name} fits this shape ({choice.detail}): set "
        f"CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg={choice.name}) with "
        f"`from megatron.bridge.training.comm_overlap import {choice.name}`, or "
        f"comm_overlap.tp_comm_overlap_cfg={choice.name} on the command line (a recipe's own "
        "request chooses it: change that request's fields instead of replacing it)."
    )


def _check_tp_token_divisibility(planner: Planner) -> None:
    f = planner.job
    if f.model.seq_length is None or f.micro_batch_size is None:
        missing = [
            n
            for n, v in (
                ("seq_length", f.model.seq_length),
                ("micro_batch_size", f.micro_batch_size),
            )
            if v is None
        ]
        planner.notes.append(
            f"TP overlap token-divisibility check skipped: {' and '.join(missing)} unknown here."
        )
        return
    tp_overlap_buffer_rows(
        seq_length=f.model.seq_length,
        micro_batch_size=f.micro_batch_size,
        cp_size=f.cp_size,
        tp_size=f.tp_size,
    )


def _check_preset_shape(planner: Planner, preset: TransformerLayerTPOverlapCfg) -> None:
    """Warn when a published preset was tuned for another shape, precision or GPU family.

    A bf16 preset's methods and SM counts on an FP8 run (or the reverse) and a Hopper preset on
    Blackwell run, but were not measured there.
    """
    f = planner.job
    names = preset_names_of(preset)
    facts = dict(hidden_size=f.model.hidden_size, tp_size=f.tp_size)
    if preset_fits_model(names, **facts, precision=f.precision, gpu=f.gpu) is not False:
        return
    shapes = preset_shapes_of(preset)
    label = ", ".join(names)
    if preset_fits_model(names, **facts) is False:
        published = ", ".join(f"hidden {s.hidden_size} TP{s.tp_size}" for s in shapes)
        planner.warnings.append(
            f"tp_comm_overlap_cfg {label} was tuned for {published}, but the model has hidden "
            f"{f.model.hidden_size} TP{f.tp_size}: almost always a mistake. Use "
            "find_userbuffers_preset(...) for your shape, or tp_comm_overlap_cfg=None for TE "
            "defaults."
        )
        return
    tuned = ", ".join(sorted({f"{s.precision} on {s.gpu.upper()}" for s in shapes}))
    planner.warnings.append(
        f"tp_comm_overlap_cfg {label} was tuned for {tuned}, but this run trains in "
        f"{f.precision} on {(f.gpu or 'an unknown GPU').upper()}: the preset's precision or GPU "
        "differs. Use find_userbuffers_preset(...) for this precision and GPU, or "
        "tp_comm_overlap_cfg=None for TE defaults."
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
