"""The job ``explain``'s flags describe: which field each flag changes (:data:`FLAG_FIELDS`), the
reference job planned without flags (:data:`REFERENCE`), and the spec the flags make of a recipe or
of the reference (:func:`flags_spec`).

Flags and recipes reach the same plan: flags become a :class:`RecipeSpec`, a shipped recipe has
one, and ``RecipeSpec.plan`` checks the layout and runs the rules.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from megatron.bridge.recipes import gpt3_175b, recipe_spec
from megatron.bridge.recipes.spec import RecipeSpec
from megatron.bridge.training.comm_overlap import PUBLISHED_PRESETS, TEStatus, te_status
from megatron.bridge.training.estimate.hybrid_pattern import MAMBA
from megatron.bridge.training.job import JobDescription
from megatron.bridge.training.megatron_core_support import DSV4_HYBRID
from megatron.bridge.training.model_rules import check_moe_layer_pattern
from megatron.bridge.training.model_rules.architecture import check_bias_activation_fusion
from megatron.bridge.training.override_syntax import parse_overrides
from megatron.bridge.training.parallel_layout import data_parallel_size
from megatron.bridge.training.precisions import canonical_precision, precision_of_preset

#: The reference job ``explain`` plans without flags: GPT-3 175B's shape on 128 H100 GPUs, TP4
#: with sequence parallelism, PP4 with VPP2, distributed optimizer, bf16, and the precision knobs
#: of the job SPEC.md section 1 describes: gradients reduced in bf16
#: (``mixed_precision.grad_reduce_in_fp32 = False``; bf16 has no FP8 parameter gather, so
#: ``fp8_param_gather`` is False too). With fp32 gradients it would not fit an H100.
REFERENCE: RecipeSpec = gpt3_175b.SPEC.changed(
    name="reference",
    world_size=128,
    global_batch_size=None,
    grad_reduce_in_fp32=False,
    **{"model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 2},
)

#: Each ``explain`` flag that describes the job, and the field it changes: a spec field or a
#: job-description field (``RecipeSpec.changed``). Flags and recipes are planned through it alike.
FLAG_FIELDS: dict[str, str] = {
    "world_size": "world_size",
    "gpu": "gpu",
    "gpus_per_node": "gpus_per_node",
    "nvlink_domain": "nvlink_domain",
    "precision": "precision",
    "micro_batch_size": "micro_batch_size",
    "global_batch_size": "global_batch_size",
    "distributed_optimizer": "use_distributed_optimizer",
    "tp_comm_overlap": "tp_comm_overlap",
    "preset": "preset",
    "tp": "model.tensor_model_parallel_size",
    "pp": "model.pipeline_model_parallel_size",
    "vpp": "model.virtual_pipeline_model_parallel_size",
    "cp": "model.context_parallel_size",
    "cp_comm_type": "model.cp_comm_type",
    "ep": "model.expert_model_parallel_size",
    "etp": "model.expert_tensor_parallel_size",
    "sequence_parallel": "model.sequence_parallel",
    "seq_length": "model.seq_length",
    "hidden_size": "model.hidden_size",
    "num_layers": "model.num_layers",
    "num_attention_heads": "model.num_attention_heads",
    "num_query_groups": "model.num_query_groups",
    "ffn_hidden_size": "model.ffn_hidden_size",
    "vocab_size": "model.vocab_size",
    "swiglu": "model.gated_linear_unit",
    "add_bias_linear": "model.add_bias_linear",
    "bias_activation_fusion": "model.bias_activation_fusion",
    "add_qkv_bias": "model.add_qkv_bias",
    "normalization": "model.normalization",
    "position_embedding_type": "model.position_embedding_type",
    "embedding_in_pipeline_split": "model.account_for_embedding_in_pipeline_split",
    "loss_in_pipeline_split": "model.account_for_loss_in_pipeline_split",
    "num_moe_experts": "model.num_moe_experts",
    "moe_token_dispatcher": "model.moe_token_dispatcher_type",
    "moe_flex_backend": "model.moe_flex_dispatcher_backend",
    "kv_channels": "model.kv_channels",
    "multi_latent_attention": "model.multi_latent_attention",
    "q_lora_rank": "model.q_lora_rank",
    "kv_lora_rank": "model.kv_lora_rank",
    "qk_head_dim": "model.qk_head_dim",
    "qk_pos_emb_head_dim": "model.qk_pos_emb_head_dim",
    "v_head_dim": "model.v_head_dim",
    "window_size": "model.window_size",
    "window_attn_skip_freq": "model.window_attn_skip_freq",
    "moe_router_topk": "model.moe_router_topk",
    "moe_ffn_hidden_size": "model.moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size": "model.moe_shared_expert_intermediate_size",
    "moe_layer_freq": "model.moe_layer_freq",
    "moe_latent_size": "model.moe_latent_size",
    "mtp_num_layers": "model.mtp_num_layers",
    "hybrid_layer_pattern": "model.hybrid_layer_pattern",
    "mamba_state_dim": "model.mamba_state_dim",
    "mamba_head_dim": "model.mamba_head_dim",
    "mamba_num_groups": "model.mamba_num_groups",
    "mamba_num_heads": "model.mamba_num_heads",
    "moe_router_score_function": "model.moe_router_score_function",
    "moe_router_load_balancing_type": "model.moe_router_load_balancing_type",
    "moe_grouped_gemm": "model.moe_grouped_gemm",
    "use_fused_weighted_squared_relu": "model.use_fused_weighted_squared_relu",
    "moe_router_enable_expert_bias": "model.moe_router_enable_expert_bias",
    "moe_router_topk_scaling_factor": "model.moe_router_topk_scaling_factor",
    "moe_n_hash_layers": "model.moe_n_hash_layers",
    "mtp_use_repeated_layer": "model.mtp_use_repeated_layer",
    "experimental_attention_variant": "model.experimental_attention_variant",
    "dsa_indexer_n_heads": "model.dsa_indexer_n_heads",
    "dsa_indexer_head_dim": "model.dsa_indexer_head_dim",
    "dsa_indexer_topk": "model.dsa_indexer_topk",
    "o_lora_rank": "model.o_lora_rank",
    "o_groups": "model.o_groups",
    "csa_window_size": "model.csa_window_size",
    "csa_compress_ratios": "model.csa_compress_ratios",
    "enable_hyper_connections": "model.enable_hyper_connections",
    "num_residual_streams": "model.num_residual_streams",
    "make_vocab_size_divisible_by": "model.make_vocab_size_divisible_by",
    "fp8_dot_product_attention": "model.fp8_dot_product_attention",
    "first_last_layers_bf16": "model.first_last_layers_bf16",
    "num_layers_at_start_in_bf16": "model.num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16": "model.num_layers_at_end_in_bf16",
    "pipeline_model_parallel_layout": "model.pipeline_model_parallel_layout",
    "use_megatron_fsdp": "use_megatron_fsdp",
    "num_distributed_optimizer_instances": "num_distributed_optimizer_instances",
    "outer_dp_sharding_strategy": "outer_dp_sharding_strategy",
    "grad_reduce_in_fp32": "grad_reduce_in_fp32",
    "cpu_offloading": "model.cpu_offloading",
    "cpu_offloading_num_layers": "model.cpu_offloading_num_layers",
    "fine_grained_activation_offloading": "model.fine_grained_activation_offloading",
    "offload_modules": "model.offload_modules",
    "min_offloaded_tensor_size": "model.min_offloaded_tensor_size",
    "activation_offload_fraction": "model.activation_offload_fraction",
    "fine_grained_offloading_max_inflight_offloads": (
        "model.fine_grained_offloading_max_inflight_offloads"
    ),
    "use_transformer_engine_op_fuser": "model.use_transformer_engine_op_fuser",
    "recompute_granularity": "model.recompute_granularity",
    "recompute_method": "model.recompute_method",
    "recompute_num_layers": "model.recompute_num_layers",
    "recompute_modules": "model.recompute_modules",
}


def flag_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The job changes the flags given make (:data:`FLAG_FIELDS`); ``overlap`` holds the
    overlap-request fields they set (``strict``, EP overlap)."""
    changes = {
        # A flag taking several values (--recompute-modules) gives a list; the description
        # holds a tuple.
        field: tuple(value) if isinstance(value, list) else value
        for flag, field in FLAG_FIELDS.items()
        if (value := getattr(args, flag, None)) is not None
    }
    if len(changes.get("model.cp_comm_type", ())) == 1:
        # One type for every layer, as Megatron-LM's --cp-comm-type with one value gives.
        changes["model.cp_comm_type"] = changes["model.cp_comm_type"][0]
    if changes.get("model.virtual_pipeline_model_parallel_size") == 1:
        # --vpp 1 says "no interleaving", which the description holds as None.
        changes["model.virtual_pipeline_model_parallel_size"] = None
    if args.swiglu is not None:
        # Megatron-LM's --swiglu: a gated MLP with SiLU (gelu otherwise).
        changes["model.activation_func"] = "silu" if args.swiglu else "gelu"
    if args.squared_relu:
        changes["model.activation_func"] = "squared_relu"
    if args.quick_geglu:
        # Megatron-LM's --quick-geglu: a gated MLP with quick-GELU.
        changes |= {"model.gated_linear_unit": True, "model.activation_func": "quick_gelu"}
    if args.untie_embeddings_and_output_weights is not None:
        # Megatron-LM's flag says the opposite of the field it sets.
        changes[
            "model.share_embeddings_and_output_weights"
        ] = not args.untie_embeddings_and_output_weights
    preset = changes.get("preset")
    if preset == "auto":
        del changes["preset"]
    elif preset not in (None, "none") and preset not in PUBLISHED_PRESETS:
        raise ValueError(
            f"--preset {preset!r} is not a published preset; choose 'auto', 'none' or one of: "
            + ", ".join(sorted(PUBLISHED_PRESETS))
        )
    overlap: dict[str, Any] = {"strict": args.strict}
    if args.ep_overlap:
        overlap["overlap_moe_expert_parallel_comm"] = True
    changes["overlap"] = tuple(overlap.items())
    return changes


#: The top-level overrides that say what a flag says: the override key, the flag's destination.
_FLAG_OVERRIDES = {"gpu": "gpu", "mixed_precision": "precision"}


def overrides_as_flags(args: argparse.Namespace) -> None:
    """Check the KEY=VALUE overrides' text (``override_syntax.parse_overrides``, no torch) and
    move ``gpu=NAME`` and ``mixed_precision=NAME`` onto ``args`` as ``--gpu`` and
    ``--precision``; ``args.overrides`` keeps the others, as typed.

    One change of GPU or precision, one route: ``mixed_precision=`` moves when it names a
    training precision or the preset one trains with (``fp8_cs``,
    ``bf16_with_fp8_current_scaling_mixed``), and the recipe then starts from its published run
    for that GPU and precision (:func:`flags_spec`) on every route. ``gpu=null``,
    ``mixed_precision=null`` and a preset no precision trains with (``fp32_no_mixed``) stay
    overrides of the container. An override and a flag naming different values: ``ValueError``
    naming both (neither silently wins).
    """
    rest: list[str] = []
    for override in parse_overrides(getattr(args, "overrides", None) or []):
        dest = _FLAG_OVERRIDES.get(override.key)
        if dest is None:
            rest.append(override.text)
            continue
        value = override.value
        if dest == "precision" and value is not None:
            value = precision_of_preset(str(value))
        given = getattr(args, dest, None)
        if given is not None:
            same = given if dest == "gpu" else canonical_precision(given)
            if value != same:
                raise ValueError(
                    f"--{dest} {given} and the override {override.text!r} name different "
                    f"{'GPUs' if dest == 'gpu' else 'precisions'}; give one of them."
                )
        if value is None:
            rest.append(override.text)
        else:
            setattr(args, dest, value)
    args.overrides = rest


def flags_spec(args: argparse.Namespace, base: RecipeSpec | None = None) -> RecipeSpec:
    """The job the flags describe: ``base`` (default: the recipe's spec, or the reference job)
    with the flags applied.

    Flags and recipes are then planned by the same code (``RecipeSpec.plan``); the flags'
    overlap fields join the recipe's own.
    """
    if base is None and args.recipe:
        base = recipe_spec(args.recipe)
        if base is None:
            raise ValueError(
                f"Recipe {args.recipe!r} returns a ConfigContainer: it has no job description "
                "to plan without torch."
            )
    elif base is None:
        base = REFERENCE
    picks = {k: getattr(args, k) for k in ("gpu", "precision") if getattr(args, k) is not None}
    if args.recipe and picks:
        # The recipe's published run for that GPU and precision is what the other flags change.
        base = base.with_overrides(**picks)
    changes = flag_changes(args)
    changes["overlap"] = tuple({**dict(base.overlap), **dict(changes["overlap"])}.items())
    args._flag_notes = _fusion_for_activation_flag(args, base, changes)
    spec = base.changed(**changes)
    _check_vpp_is_read(args, spec)
    _check_flags_are_read(args, spec)
    check_moe_layer_pattern(spec.job.model)
    if args.world_size is not None:
        job = spec.job
        try:
            data_parallel_size(
                num_gpus=job.world_size,
                tp_size=job.tp_size,
                cp_size=job.cp_size,
                pp_size=job.pp_size,
            )
        except ValueError as exc:
            raise ValueError(f"--world-size {args.world_size}: {exc}") from None
    return spec


def _fusion_for_activation_flag(
    args: argparse.Namespace, base: RecipeSpec, changes: dict[str, Any]
) -> list[str]:
    """An activation flag (``--squared-relu``, ``--swiglu``, ``--quick-geglu``) describes the MLP
    anew: where the base job's ``bias_activation_fusion=True`` (chosen for its own activation, as
    GPT-3's recipe does for gelu) has no fused kernel for the new MLP, the fusion takes
    megatron-core's default (``TransformerConfig.bias_activation_fusion = False``) and the note
    returned says so. Without an activation flag the check refuses as megatron-core does."""
    if not (args.squared_relu or args.quick_geglu or args.swiglu is not None):
        return []
    if args.bias_activation_fusion is not None:  # --no-bias-*-fusion: the user's word
        return []
    model = base.job.model
    activation = changes.get("model.activation_func", model.activation_func)
    try:
        check_bias_activation_fusion(
            bias_activation_fusion=model.bias_activation_fusion,
            activation_func=activation,
            gated_linear_unit=changes.get("model.gated_linear_unit", model.gated_linear_unit),
            add_bias_linear=changes.get("model.add_bias_linear", model.add_bias_linear),
        )
    except ValueError as exc:
        changes["model.bias_activation_fusion"] = False
        if args.squared_relu:
            flag = "--squared-relu"
        elif args.quick_geglu:
            flag = "--quick-geglu"
        else:
            flag = "--swiglu" if args.swiglu else "--no-swiglu"
        return [
            f"{flag}: bias_activation_fusion=False (megatron-core's default): the "
            f"{base.name} job's fused bias-activation kernel does not apply ({exc})"
        ]
    return []


def _check_vpp_is_read(args: argparse.Namespace, spec: RecipeSpec) -> None:
    """``--vpp 1`` (no interleaving) on a custom pipeline layout that interleaves: megatron-core
    takes VPP from the layout, so the flag would do nothing; refused naming both."""
    job = spec.job
    if args.vpp != 1 or job.vpp_size is None:
        return
    layout = job.model.pipeline_model_parallel_layout
    source = (
        "--pipeline-model-parallel-layout"
        if args.pipeline_model_parallel_layout
        else ("the recipe's pipeline_model_parallel_layout")
    )
    raise ValueError(
        f"--vpp 1 asks for no interleaving, but {source} ({str(layout)[:60]!r}) has "
        f"{job.pp_size * job.vpp_size} stages: PP {job.pp_size} x VPP {job.vpp_size}, and "
        "megatron-core takes VPP from the layout. Drop --vpp, or give "
        f"--pipeline-model-parallel-layout with {job.pp_size} stages."
    )


def _runs_dsa_indexer(job: JobDescription) -> bool:
    """Whether the model builds a DSA indexer, the only reader of the ``dsa_indexer_*`` fields
    (megatron-core's ``experimental_attention_variant/dsa.py`` ``DSAIndexer``): a hybrid model's
    ``D`` layers (``hybrid_layer_allocation.Symbols.DS_ATTENTION``; ``HybridModel`` builds its
    layers from the pattern alone), else a transformer with experimental_attention_variant
    ``dsa`` (``experimental_attention_variant_module_specs``) or DeepSeek-V4's dsv4_hybrid,
    whose compressed sparse attention layers run the indexer."""
    model = job.model
    if model.hybrid_layer_pattern is not None:
        return "D" in model.hybrid_layer_pattern
    return model.experimental_attention_variant in ("dsa", DSV4_HYBRID)


#: Flags whose field megatron-core reads only when the job has some other setting: (the flags'
#: destinations, whether the job reads them, what is off when it does not, the fix). The first
#: entry whose flags are given and unread is the one refused.
_READ_ONLY_WITH: tuple[tuple[tuple[str, ...], Callable[[JobDescription], bool], str, str], ...] = (
    (
        (
            "moe_token_dispatcher",
            "moe_flex_backend",
            "moe_router_topk",
            "moe_shared_expert_intermediate_size",
            "moe_layer_freq",
            "moe_latent_size",
            "moe_router_score_function",
            "moe_router_load_balancing_type",
            "moe_grouped_gemm",
            "moe_router_enable_expert_bias",
            "moe_router_topk_scaling_factor",
            "moe_n_hash_layers",
            # Read only by the routed experts (megatron-core's transformer/moe/experts.py).
            "use_fused_weighted_squared_relu",
        ),
        lambda job: job.model.moe,
        "the model has no routed experts (num_moe_experts is unset)",
        "add --num-moe-experts",
    ),
    (
        ("use_fused_weighted_squared_relu",),
        lambda job: job.model.activation_func == "squared_relu",
        "megatron-core reads it only for a squared-ReLU activation",
        "add --squared-relu",
    ),
    (
        # Fields of megatron-core's MLATransformerConfig alone (transformer_config.py), the
        # config of a multi_latent_attention model.
        ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"),
        lambda job: job.model.multi_latent_attention,
        "the model has no multi-latent attention (multi_latent_attention is off)",
        "add --multi-latent-attention",
    ),
    (
        ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk"),
        _runs_dsa_indexer,
        "the model runs no DSA indexer (experimental_attention_variant is neither 'dsa' nor "
        "'dsv4_hybrid'; a hybrid layer pattern: no 'D' layer)",
        "add --experimental-attention-variant dsa or dsv4_hybrid (a hybrid layer pattern: 'D' "
        "layers)",
    ),
    (
        # Megatron-Bridge's DeepSeek-V4 provider sets them for its attention
        # (megatron_core_support.DSV4_HYBRID_FIELDS).
        ("o_lora_rank", "o_groups", "csa_window_size", "csa_compress_ratios"),
        lambda job: job.model.experimental_attention_variant == DSV4_HYBRID,
        "the model has no DeepSeek-V4 hybrid attention (experimental_attention_variant is not "
        "'dsv4_hybrid')",
        "add --experimental-attention-variant dsv4_hybrid",
    ),
    (
        # Read only by megatron-core's ssm/mamba_mixer.py MambaMixer, a hybrid model's 'M' layer.
        ("mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_num_heads"),
        lambda job: MAMBA in (job.model.hybrid_layer_pattern or ""),
        "the model has no Mamba layers (no 'M' in a hybrid layer pattern)",
        "add --hybrid-layer-pattern with Mamba ('M') layers",
    ),
    (
        # megatron-core's transformer/utils.py is_layer_window_attention: no window, no skip.
        ("window_attn_skip_freq",),
        lambda job: bool(job.model.window_size),
        "the model has no sliding-window attention (window_size is unset)",
        "add --window-size",
    ),
    (
        ("cpu_offloading_num_layers",),
        lambda job: job.model.cpu_offloading,
        "the job does not offload activations (cpu_offloading is off)",
        "add --cpu-offloading",
    ),
    (
        # megatron-core's GPTModel/HybridModel preprocess_for_fine_grained_offloading and the
        # layers' offload_* attributes read them only with fine_grained_activation_offloading.
        (
            "offload_modules",
            "min_offloaded_tensor_size",
            "activation_offload_fraction",
            "fine_grained_offloading_max_inflight_offloads",
        ),
        lambda job: job.model.fine_grained_activation_offloading,
        "the job does not offload activations fine-grained (fine_grained_activation_offloading "
        "is off)",
        "add --fine-grained-activation-offloading",
    ),
    (
        ("recompute_method", "recompute_num_layers"),
        lambda job: job.model.recompute_granularity == "full",
        "they are read only with full recompute",
        "add --recompute-granularity full",
    ),
    (
        ("cp_comm_type",),
        lambda job: job.cp_size > 1,
        "it is read only with context parallelism",
        "add --cp with a size above 1",
    ),
    (
        ("recompute_modules",),
        lambda job: job.model.recompute_granularity == "selective",
        "they are read only with selective recompute",
        "add --recompute-granularity selective",
    ),
    (
        ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"),
        lambda job: job.model.first_last_layers_bf16,
        "they are read only with first_last_layers_bf16",
        "add --first-last-layers-bf16",
    ),
    (
        ("first_last_layers_bf16",),
        lambda job: bool(job.model.fp8 or job.model.fp4),
        "the precision has no FP8/FP4 recipe to keep layers out of",
        "choose an FP8 or NVFP4 --precision",
    ),
    (
        ("num_residual_streams",),
        lambda job: job.model.enable_hyper_connections,
        "the model has no hyper-connections",
        "add --enable-hyper-connections",
    ),
    (
        ("mtp_use_repeated_layer",),
        lambda job: bool(job.model.mtp_num_layers),
        "the model has no multi-token-prediction layers",
        "add --mtp-num-layers",
    ),
    (
        # Read only by Megatron-FSDP under hybrid sharding (megatron-core's
        # distributed/fsdp/mcore_fsdp_adapter.py: enable_hsdp, hsdp_outer_dp_shard).
        ("outer_dp_sharding_strategy",),
        lambda job: job.use_megatron_fsdp and job.num_distributed_optimizer_instances > 1,
        "the job is not HSDP (Megatron-FSDP with more than one distributed-optimizer "
        "instance), the only sharding that reads it",
        "add --use-megatron-fsdp and --num-distributed-optimizer-instances N (N > 1)",
    ),
)


def _check_flags_are_read(args: argparse.Namespace, spec: RecipeSpec) -> None:
    """A flag whose field the job does not read (:data:`_READ_ONLY_WITH`) would do nothing:
    refused naming it as given (``--no-X`` for a switch turned off), what is off, and the fix."""
    for dests, reads, off, fix in _READ_ONLY_WITH:
        given = [
            f"--{'no-' if value is False else ''}{d.replace('_', '-')}"
            for d in dests
            if (value := getattr(args, d, None)) is not None
        ]
        if given and not reads(spec.job):
            flags = ", ".join(given)
            raise ValueError(
                f"{flags} would have no effect: {off}. To use {'it' if len(given) == 1 else 'them'}, "
                f"{fix}; otherwise drop {flags}."
            )


def te_of(args: argparse.Namespace) -> TEStatus:
    """Transformer Engine as the flags say: detected here, or assumed at ``--te-version``."""
    return te_status(args.te, version=args.te_version)
