"""The flags that describe the job, defined once for ``explain`` and ``search``
(:func:`add_job_flags`): the GPU and the precision (:func:`add_gpu_and_precision`) and the
cluster (:func:`add_cluster`), which ``bridge-overlap-check`` takes too, the model as
Megatron-LM's ``arguments.py`` spells it, the batch and, for ``explain``, the layout.
"""

from __future__ import annotations

import argparse
from typing import get_args

from megatron.bridge.cli.argument_types import (
    hybrid_layer_pattern_argument,
    layer_freq_argument,
    per_layer_ints_argument,
    pipeline_layout_argument,
    positive_float_argument,
    share_argument,
    window_argument,
)
from megatron.bridge.training import hardware, launch_env
from megatron.bridge.training.comm_overlap.rules.layout import CP_COMM_TYPES
from megatron.bridge.training.comm_overlap.te import ASSUMED_TE_VERSION
from megatron.bridge.training.job import (
    BF16_LAYER_DEFAULTS,
    OUTER_DP_SHARDING_STRATEGIES,
    PositionEmbeddingType,
)
from megatron.bridge.training.precisions import precision_choices
from megatron.bridge.training.validators import nonnegative_int_argument, positive_int_argument

__all__ = ["add_cluster", "add_gpu_and_precision", "add_job_flags"]


def _add_switch(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """A ``--flag``/``--no-flag`` pair; None when neither is given (the layout decides)."""
    parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help)


def _add_counts(parser: argparse.ArgumentParser, flags: dict[str, str]) -> None:
    """Flags that each take a positive integer (a size or a count): flag -> help, in order."""
    for flag, help in flags.items():
        parser.add_argument(flag, type=positive_int_argument, help=help)


def _add_moe_router_and_layout(ex: argparse.ArgumentParser, *, layout: bool) -> None:
    """The router and expert-GEMM flags and, with ``layout``, the pipeline-layout and
    Megatron-FSDP flags, as Megatron-LM spells them."""
    ex.add_argument(
        "--moe-router-score-function",
        # megatron-core's TransformerConfig.moe_router_score_function Literal.
        choices=["softmax", "sigmoid", "sqrtsoftplus"],
        help="MoE router scores (default softmax)",
    )
    ex.add_argument(
        "--moe-router-load-balancing-type",
        # The single-type options of megatron-core's TransformerConfig.moe_router_load_balancing_type.
        choices=[
            "aux_loss",
            "seq_aux_loss",
            "global_aux_loss",
            "sinkhorn",
            "quantile_balancing",
            "none",
        ],
        help="MoE load balancing (default aux_loss)",
    )
    _add_switch(ex, "--moe-grouped-gemm", "run the local experts as one grouped GEMM")
    _add_switch(
        ex,
        "--moe-router-enable-expert-bias",
        "top-k choice with a per-expert bias updated from the load (aux-loss-free balancing)",
    )
    ex.add_argument(
        "--moe-router-topk-scaling-factor",
        type=positive_float_argument,
        help="factor on the chosen experts' routing weights (default: none)",
    )
    ex.add_argument(
        "--moe-n-hash-layers",
        type=nonnegative_int_argument,
        help="the first N layers route tokens by a fixed hash (DeepSeek-V4; default 0)",
    )
    if not layout:
        return
    ex.add_argument(
        "--pipeline-model-parallel-layout",
        type=pipeline_layout_argument,
        help="custom placement of layers on (virtual) pipeline stages, e.g. 'Et*4|(t*4|)*14tmL'",
    )
    _add_switch(ex, "--use-megatron-fsdp", "Megatron-FSDP instead of megatron-core's DDP")
    ex.add_argument(
        "--num-distributed-optimizer-instances",
        type=positive_int_argument,
        help="split the data-parallel ranks into N groups: the distributed optimizer (or "
        "Megatron-FSDP, as HSDP) shards within each (default 1)",
    )
    ex.add_argument(
        "--outer-dp-sharding-strategy",
        choices=OUTER_DP_SHARDING_STRATEGIES,
        help="HSDP: 'optim' shards the optimizer state over the groups too (default no_shard)",
    )
    _add_switch(
        ex,
        "--grad-reduce-in-fp32",
        "accumulate and reduce gradients in fp32 (default: the precision's mixed-precision "
        "preset, fp32; a published run's: bf16)",
    )
    _add_switch(
        ex, "--cpu-offloading", "offload the first --cpu-offloading-num-layers layers' activations"
    )
    ex.add_argument(
        "--cpu-offloading-num-layers",
        type=positive_int_argument,
        help="layers whose activations --cpu-offloading moves to the CPU",
    )
    _add_switch(
        ex,
        "--fine-grained-activation-offloading",
        "move the large tensors the --offload-modules save for the backward to the host",
    )
    ex.add_argument(
        "--offload-modules",
        nargs="+",
        metavar="MODULE",
        help=(
            "with fine-grained offloading: the modules whose saved tensors move, e.g. "
            "fused_group_mlp, expert_fc1, moe_act, core_attn"
        ),
    )
    ex.add_argument(
        "--min-offloaded-tensor-size",
        type=nonnegative_int_argument,
        help="with fine-grained offloading: the fewest elements of a tensor it moves",
    )
    ex.add_argument(
        "--activation-offload-fraction",
        type=share_argument,
        help="with fine-grained offloading: the share of each chunk's groups it moves",
    )
    ex.add_argument(
        "--fine-grained-offloading-max-inflight-offloads",
        type=nonnegative_int_argument,
        help="with fine-grained offloading: unfinished offloads per module before the GPU waits",
    )
    _add_switch(
        ex,
        "--use-transformer-engine-op-fuser",
        "run the MoE experts in Transformer Engine's op fuser (fused_group_mlp offloading)",
    )


def _add_model_vocabulary(ex: argparse.ArgumentParser, *, layout: bool) -> None:
    """The model flags spelled as Megatron-LM's ``arguments.py`` spells them; with ``layout``
    the activation recompute too (a layout choice ``search`` makes itself)."""
    ex.add_argument(
        "--kv-channels", type=positive_int_argument, help="head dimension (default hidden / heads)"
    )
    ex.add_argument(
        "--multi-latent-attention",
        action="store_const",
        const=True,
        help="multi-latent attention (DeepSeek's MLA; its ranks and head dims below)",
    )
    _add_counts(
        ex,
        {
            "--q-lora-rank": "MLA query down-projection rank",
            "--kv-lora-rank": "MLA key/value latent rank",
            "--qk-head-dim": "MLA query/key head dim (no rotary part)",
            "--qk-pos-emb-head-dim": "MLA rotary head dim",
            "--v-head-dim": "MLA value head dim",
        },
    )
    ex.add_argument(
        "--window-size",
        type=window_argument,
        help="sliding-window attention LEFT,RIGHT tokens, e.g. 128,0 (default: full attention)",
    )
    ex.add_argument(
        "--window-attn-skip-freq",
        type=layer_freq_argument,
        help="full-attention layers among windowed ones: every N-th, or a 0/1 list (1 = window)",
    )
    _add_counts(
        ex,
        {
            "--moe-router-topk": "experts per token (default 2)",
            "--moe-ffn-hidden-size": "width of one routed expert",
            "--moe-shared-expert-intermediate-size": "total width of the shared experts",
        },
    )
    ex.add_argument(
        "--moe-layer-freq",
        type=layer_freq_argument,
        help="MoE layers: every N-th, or a 0/1 list expression such as '([0]*3+[1]*58)'",
    )
    ex.add_argument(
        "--moe-latent-size",
        type=positive_int_argument,
        help="latent width the routed experts compute in (latent MoE)",
    )
    ex.add_argument(
        "--mtp-num-layers", type=nonnegative_int_argument, help="multi-token-prediction layers"
    )
    _add_switch(
        ex,
        "--mtp-use-repeated-layer",
        "one MTP layer's weights run for every MTP depth",
    )
    ex.add_argument(
        "--experimental-attention-variant",
        # megatron-core's TransformerConfig.experimental_attention_variant Literal, and
        # Megatron-Bridge's DeepSeek-V4 hybrid attention.
        choices=["gated_delta_net", "dsa", "dsv4_hybrid"],
        help="an experimental attention variant (dsv4_hybrid: DeepSeek-V4's, fields below)",
    )
    _add_counts(
        ex,
        {
            "--dsa-indexer-n-heads": "DSA indexer heads",
            "--dsa-indexer-head-dim": "DSA indexer head dim",
            "--dsa-indexer-topk": "DSA indexer: keys each query attends to",
            "--o-lora-rank": "DeepSeek-V4 grouped low-rank output projection rank",
            "--o-groups": "DeepSeek-V4 output projection head groups (default 1)",
            "--csa-window-size": "DeepSeek-V4 sliding window in tokens (default 128)",
        },
    )
    ex.add_argument(
        "--csa-compress-ratios",
        type=per_layer_ints_argument,
        help=(
            "DeepSeek-V4 key/value compression ratio per layer, decoder then MTP (0, 4 or 128), "
            "e.g. '([0,0]+[4,128]*20+[4,0])'"
        ),
    )
    _add_switch(ex, "--enable-hyper-connections", "hyper-connections around each block")
    _add_counts(
        ex,
        {
            "--num-residual-streams": "hyper-connections' residual streams (default 1)",
            "--make-vocab-size-divisible-by": (
                "pad the vocabulary to a multiple of this x TP (default 128)"
            ),
        },
    )
    ex.add_argument(
        "--hybrid-layer-pattern",
        "--hybrid-override-pattern",
        dest="hybrid_layer_pattern",
        type=hybrid_layer_pattern_argument,
        help="hybrid model layers, one symbol each: M Mamba, * attention, - MLP, E MoE, ...",
    )
    _add_counts(
        ex,
        {
            "--mamba-state-dim": "Mamba state dim",
            "--mamba-head-dim": "Mamba head dim",
            "--mamba-num-groups": "Mamba B/C projection groups",
            "--mamba-num-heads": "Mamba heads (default 2 x hidden / head dim)",
        },
    )
    if layout:
        ex.add_argument(
            "--recompute-granularity",
            choices=["full", "selective"],
            help="activation recompute: whole layers or the modules below (default: none)",
        )
        ex.add_argument(
            "--recompute-method",
            choices=["uniform", "block"],
            help="with full recompute: layers recomputed in uniform groups or the first N per stage",
        )
        ex.add_argument(
            "--recompute-num-layers",
            type=positive_int_argument,
            help="with full recompute: layers per group (uniform) or per stage (block)",
        )
        ex.add_argument(
            "--recompute-modules",
            nargs="*",
            metavar="MODULE",
            help=(
                "with selective recompute: the modules recomputed, e.g. core_attn moe_act layernorm "
                "mla_up_proj (given with none: nothing; not given: core_attn)"
            ),
        )


def add_gpu_and_precision(
    parser: argparse.ArgumentParser, *, gpu_default: str, precision_default: str
) -> None:
    """The ``--gpu`` and ``--precision`` flags: the GPU catalogue's names and the precision
    table's (its aliases included); the defaults are named in the help only.

    ``bridge-overlap explain`` and ``bridge-overlap-check`` take them alike; what a GPU cannot
    train in is refused by the spec they change (``RecipeSpec``), not here.
    """
    parser.add_argument(
        "--gpu", choices=sorted(hardware.GPUS), help=f"GPU model (default {gpu_default})"
    )
    parser.add_argument(
        "--precision",
        choices=precision_choices(),
        help=(
            "training precision: bf16, fp16, fp8_ds (FP8 delayed scaling), fp8_cs (current "
            "scaling), fp8_sc (sub-channel/blockwise), fp8_mx (MXFP8) or nvfp4; aliases fp8 "
            f"(fp8_ds) and mxfp8 (fp8_mx). Default {precision_default}"
        ),
    )


def add_cluster(parser: argparse.ArgumentParser) -> None:
    """The ``--gpus-per-node`` and ``--nvlink-domain`` flags: the job's ``gpus_per_node`` and
    ``nvlink_domain`` (``job.CLUSTER_FIELDS``), where the cluster is not the GPU catalogue's.
    ``bridge-overlap explain``, ``search`` and ``bridge-overlap-check`` take them alike."""
    _add_counts(
        parser,
        {
            "--gpus-per-node": "GPUs per node (default: the GPU's, 8; 4 on GB200/GB300)",
            "--nvlink-domain": (
                "GPUs sharing NVLink (default: the GPU's, e.g. one node; 72 on GB200 NVL72)"
            ),
        },
    )


def add_job_flags(ex: argparse.ArgumentParser, *, layout: bool) -> None:
    """The flags that describe the job, one definition for ``explain`` and ``search``: the
    GPU, the precision, the model (Megatron-LM's spellings) and the batch; with ``layout``
    (``explain``) the layout too: parallel sizes, micro-batch, recompute, pipeline split,
    optimizer sharding, overlap requests and the launch environment's options. ``search``
    chooses the layout itself."""
    if layout:
        _add_counts(
            ex,
            {
                "--tp": "tensor-parallel size (default 4)",
                "--pp": "pipeline-parallel size (default 4)",
                "--vpp": "virtual pipeline size (default 2; 1 = none)",
                "--cp": "context-parallel size (default 1)",
                "--ep": "expert-parallel size (default 1)",
                "--etp": "expert tensor-parallel size (default: TP)",
                "--world-size": "number of GPUs (default 128)",
            },
        )
        ex.add_argument(
            "--cp-comm-type",
            nargs="+",
            choices=CP_COMM_TYPES,
            metavar="TYPE",
            help=(
                "with --cp > 1: how attention exchanges the sequence (Transformer Engine's "
                "cp_comm_type): p2p (the K/V ring, default), all_gather, a2a (Q/K/V/O "
                "all-to-all over heads) or a2a+p2p; one for every layer or one per layer"
            ),
        )
        _add_switch(ex, "--sequence-parallel", "sequence parallelism (default: on when TP > 1)")
        _add_switch(ex, "--distributed-optimizer", "distributed optimizer (default: on)")
        _add_switch(
            ex,
            "--tp-comm-overlap",
            "request TP comm overlap; refused with a warning (exit 1 with --strict) where the "
            "layout cannot run it (default: on where it can: TP >= 2, sequence parallel, TE)",
        )
    add_gpu_and_precision(ex, gpu_default="h100", precision_default="bf16")
    _add_switch(
        ex,
        "--fp8-dot-product-attention",
        "run core attention's dot products in FP8 (the estimate prices them at the FP8 peak; "
        "default off: 16-bit)",
    )
    _add_switch(
        ex,
        "--first-last-layers-bf16",
        "keep the first --num-layers-at-start-in-bf16 and the last --num-layers-at-end-in-bf16 "
        "decoder layers out of the FP8/FP4 recipe (the estimate prices their GEMMs at the BF16 "
        "peak; default off, or the recipe's precision's)",
    )
    for end in ("start", "end"):
        ex.add_argument(
            f"--num-layers-at-{end}-in-bf16",
            type=nonnegative_int_argument,
            help=f"decoder layers at the {end} --first-last-layers-bf16 keeps in BF16 (default "
            f"{BF16_LAYER_DEFAULTS[f'num_layers_at_{end}_in_bf16']}, megatron-core's)",
        )
    sizes = {
        "--seq-length": "sequence length (default 2048)",
        "--micro-batch-size": "micro-batch size (default 1)",
        "--global-batch-size": (
            "samples per optimizer step (default: the recipe's; micro-batch x DP x PP without one)"
        ),
        "--hidden-size": "model hidden size (default 12288)",
        "--num-layers": "transformer layers (default 96)",
        "--num-attention-heads": "attention heads (default 96)",
        "--num-query-groups": "GQA query groups (default: MHA)",
    }
    if not layout:
        del sizes["--micro-batch-size"]
        sizes["--global-batch-size"] = "samples per optimizer step (default: the recipe's)"
    _add_counts(ex, sizes)
    for part in ("embedding", "loss") if layout else ():
        _add_switch(
            ex,
            f"--{part}-in-pipeline-split",
            f"count the {part} as a layer when splitting layers over pipeline stages",
        )
    ex.add_argument(
        "--num-moe-experts",
        "--num-experts",
        dest="num_moe_experts",
        type=positive_int_argument,
        help="MoE experts (default: dense)",
    )
    ex.add_argument(
        "--moe-token-dispatcher", choices=["allgather", "alltoall", "flex"], help="MoE dispatcher"
    )
    ex.add_argument(
        "--moe-flex-backend",
        choices=list(get_args(launch_env.MoeFlexDispatcherBackend)),
        help="MoE flex dispatcher backend (affects CUDA_DEVICE_MAX_CONNECTIONS)",
    )
    _add_model_vocabulary(ex, layout=layout)
    _add_moe_router_and_layout(ex, layout=layout)
    if layout:
        ex.add_argument("--ep-overlap", action="store_true", help="request EP all-to-all overlap")
        ex.add_argument(
            "--preset",
            help="userbuffers preset name, 'auto' (look one up for the shape; default) or 'none'",
        )
    ex.add_argument(
        "--te",
        choices=["assume", "detect"],
        default="assume",
        help="'assume' TE is installed where the job runs (default), or 'detect' it here",
    )
    ex.add_argument(
        "--te-version",
        help=(
            "with --te assume: the cluster's Transformer Engine version, MAJOR.MINOR (default: "
            f"{ASSUMED_TE_VERSION}, the newest any rule reads)"
        ),
    )
    if layout:
        ex.add_argument(
            "--layernorm-sm-margin",
            type=int,
            default=launch_env.DEFAULT_LAYERNORM_SM_MARGIN,
            help="LayerNorm SM margin for the launch environment (default %(default)s)",
        )
        ex.add_argument("--nccl-pp-chunksize", type=int, help="NCCL_P2P_NET_CHUNKSIZE when PP > 1")
    _add_counts(
        ex,
        {
            "--ffn-hidden-size": "MLP width for the estimate (default 4 x hidden)",
            "--vocab-size": "vocabulary (default 51200)",
        },
    )
    # The MLP activation, one flag each as Megatron-LM spells them (megatron/training/arguments.py).
    activation = ex.add_mutually_exclusive_group()
    _add_switch(activation, "--swiglu", "gated (SwiGLU) MLP (megatron-core's gated_linear_unit)")
    activation.add_argument(
        "--squared-relu",
        action="store_const",
        const=True,
        help="squared-ReLU MLP activation (Nemotron-H)",
    )
    activation.add_argument(
        "--quick-geglu",
        action="store_const",
        const=True,
        help="gated MLP with quick-GELU (GPT-OSS)",
    )
    # Megatron-LM generates this one from TransformerConfig's field (arguments.py,
    # ArgumentGroupFactory(TransformerConfig)).
    _add_switch(
        ex,
        "--use-fused-weighted-squared-relu",
        "squared-ReLU fused with the router-probability weighting (Nemotron-H recipes; "
        "Transformer Engine's op fuser needs it for squared-ReLU experts)",
    )
    # Megatron-LM's spellings (megatron/training/arguments.py).
    ex.add_argument(
        "--disable-bias-linear",
        dest="add_bias_linear",
        action="store_const",
        const=False,
        help="no biases in linear layers (add_bias_linear=False)",
    )
    for flag in ("--no-bias-gelu-fusion", "--no-bias-swiglu-fusion"):
        ex.add_argument(
            flag,
            dest="bias_activation_fusion",
            action="store_const",
            const=False,
            help="no fused bias + activation kernel (bias_activation_fusion=False)",
        )
    ex.add_argument(
        "--add-qkv-bias",
        dest="add_qkv_bias",
        action="store_const",
        const=True,
        help="a bias on the QKV projection only",
    )
    ex.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], help="normalization layer")
    ex.add_argument(
        "--position-embedding-type",
        choices=list(get_args(PositionEmbeddingType)),
        help="position embedding (learned_absolute adds an s x h table)",
    )
    ex.add_argument(
        "--untie-embeddings-and-output-weights",
        action="store_const",
        const=True,
        help="the output layer has its own weight (share_embeddings_and_output_weights=False)",
    )
    add_cluster(ex)
