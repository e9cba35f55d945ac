"""The command line of ``bridge-overlap``: its subcommands and flags (:func:`build_parser`).

A command line argparse rejects raises :class:`UsageError` instead of exiting, so that ``--json``
can answer with a JSON error document.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any, get_args

from megatron.bridge.cli.errors import UsageError
from megatron.bridge.cli.flags import FLAG_FIELDS
from megatron.bridge.training import hardware, launch_env
from megatron.bridge.training.comm_overlap.te import ASSUMED_TE_VERSION
from megatron.bridge.training.estimate.model_cost import parse_hybrid_pattern
from megatron.bridge.training.job import (
    BF16_LAYER_DEFAULTS,
    OUTER_DP_SHARDING_STRATEGIES,
    PositionEmbeddingType,
)
from megatron.bridge.training.pipeline_layout import parse_layout
from megatron.bridge.training.precisions import precision_choices
from megatron.bridge.training.validators import (
    LIMITS,
    nonnegative_int_argument,
    positive_int_argument,
)
from megatron.bridge.training.validators import check_limit as _check_limit

#: The program's one-line description (``bridge-overlap --help``).
_DESCRIPTION = "``bridge-overlap``: read the overlap plan of a layout before launching it."


class _Parser(argparse.ArgumentParser):
    _checking_argument = False

    def error(self, message: str) -> None:
        # Raised rather than printed, so that --json can answer with a JSON error document.
        raise UsageError(f"{self.prog}: error: {message}")

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        self._checking_argument = True
        try:
            return super().add_argument(*args, **kwargs)
        finally:
            self._checking_argument = False

    def _get_formatter(self) -> argparse.HelpFormatter:
        # add_argument formats each new argument once, only to check its metavar against nargs;
        # that formatter's width is never used, so the terminal is not asked for it (HelpFormatter
        # imports shutil and reads the terminal size each time). Help and usage get the default.
        if self._checking_argument:
            return self.formatter_class(prog=self.prog, width=80)
        return super()._get_formatter()


def _add_switch(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """A ``--flag``/``--no-flag`` pair; None when neither is given (the layout decides)."""
    parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help)


def _add_counts(parser: argparse.ArgumentParser, flags: dict[str, str]) -> None:
    """Flags that each take a positive integer (a size or a count): flag -> help, in order."""
    for flag, help in flags.items():
        parser.add_argument(flag, type=positive_int_argument, help=help)


#: The most layers a per-layer list expression may spell (a bound on what a typo can allocate).
_MAX_LAYERS = LIMITS["model.num_layers"].maximum

#: ``explain`` options that are no job field, and their entry in ``LIMITS``.
_OPTION_LIMITS = {
    "layernorm_sm_margin": "layernorm_sm_margin",
    "nccl_pp_chunksize": "nccl_pp_comm_chunksize",
    "gpus_per_node": "gpus_per_node",
    "nvlink_domain": "nvlink_domain",
}


def _bounded(parse: Callable[[str], object], name: str, flag: str) -> Callable[[str], object]:
    """``parse``, then the value's bound in ``LIMITS[name]`` (the error names ``flag``)."""

    def read(text: str) -> object:
        value = parse(text)
        try:
            _check_limit(name, value, label=flag)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    read.__name__ = getattr(parse, "__name__", "value")
    read.parse = parse  # type: ignore[attr-defined]  # what reads the text, for introspection
    read.limit = name  # type: ignore[attr-defined]  # its entry in LIMITS
    return read


def _bound_numeric_flags(parser: argparse.ArgumentParser) -> None:
    """Give every flag whose field has a bound in ``LIMITS`` that bound: checked as the flag is
    read, before any work, and shown in its help."""
    for action in parser._actions:
        name = FLAG_FIELDS.get(action.dest, _OPTION_LIMITS.get(action.dest))
        if action.type is None or name not in LIMITS:
            continue
        action.type = _bounded(action.type, name, action.option_strings[-1])
        bound = f"at most {LIMITS[name].maximum}"
        action.help = f"{action.help}; {bound}" if action.help else bound


def _layer_list(text: str, *, binary: bool = True) -> tuple[int, ...]:
    """Megatron-LM's list expression of per-layer 0/1 entries (any integers with
    ``binary=False``), read without ``eval``.

    The grammar Megatron-LM's ``moe_freq_type`` patterns use: ``[a, b, ...]`` lists, ``*`` by
    an integer (either side), ``+`` to join, and parentheses: ``([0]*3+[1]*58)``.
    """
    tokens = re.findall(r"\d+|[\[\](),*+]|\S", text)
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal position
        token = peek()
        if token is None or (expected is not None and token != expected):
            found = "the end" if token is None else repr(token)
            raise ValueError(f"expected {expected or 'more'} at {found}")
        position += 1
        return token

    def chain(
        operand: Callable[[], list[int] | int],
        operator: str,
        combine: Callable[[list[int] | int, list[int] | int], list[int]],
    ) -> list[int] | int:
        # operand (operator operand)*, combined left to right.
        value = operand()
        while peek() == operator:
            take(operator)
            value = combine(value, operand())
        return value

    def join(left: list[int] | int, right: list[int] | int) -> list[int]:
        if isinstance(left, int) or isinstance(right, int):
            raise ValueError("'+' joins lists, not numbers")
        return left + right

    def repeat(left: list[int] | int, right: list[int] | int) -> list[int]:
        if isinstance(left, int) == isinstance(right, int):
            raise ValueError("'*' repeats a list by a number")
        items, count = (left, right) if isinstance(right, int) else (right, left)
        if len(items) * count > _MAX_LAYERS:
            raise ValueError(f"more than {_MAX_LAYERS} layers")
        return items * count

    def expression() -> list[int] | int:
        return chain(term, "+", join)

    def term() -> list[int] | int:
        return chain(atom, "*", repeat)

    def atom() -> list[int] | int:
        token = take()
        if token.isdigit():
            return int(token)
        if token == "(":
            value = expression()
            take(")")
            return value
        if token == "[":
            items = [int(take())] if peek() != "]" else []
            while peek() == ",":
                take(",")
                items.append(int(take()))
            take("]")
            return items
        raise ValueError(f"unexpected {token!r}")

    try:
        value = expression()
        if peek() is not None:
            raise ValueError(f"unexpected {peek()!r}")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r} ({exc}); write an int N or a list expression such as "
            "'([0]*3+[1]*58)'"
        ) from None
    if isinstance(value, int) or not value or (binary and set(value) - {0, 1}):
        entries = "0/1 entries" if binary else "integers"
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of {entries}, one per layer; write e.g. '([0]*3+[1]*58)'"
        )
    return tuple(value)


def _per_layer_ints(text: str) -> tuple[int, ...]:
    """A list expression of integers, one per layer (``[0,0]+[4,128]*20+[4,0]``)."""
    return _layer_list(text, binary=False)


def _positive_float(text: str) -> float:
    """An ``argparse`` type for a factor: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def _share(text: str) -> float:
    """An ``argparse`` type for a share: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def _layer_freq(text: str) -> int | tuple[int, ...]:
    """Megatron-LM's ``moe_freq_type``: an int N (every N-th layer) or a per-layer 0/1 list."""
    if "[" not in text:
        return positive_int_argument(text)
    return _layer_list(text)


def _window(text: str) -> tuple[int, int]:
    """Megatron-LM's ``tuple_type`` for --window-size: ``LEFT,RIGHT`` (parentheses optional)."""
    parts = text.strip().strip("()").split(",")
    try:
        left, right = (int(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected two integers LEFT,RIGHT (tokens before and after; -1 = unbounded), e.g. "
            f"'128,0'; got {text!r}"
        ) from None
    if left < -1 or right < -1:
        raise argparse.ArgumentTypeError(f"window sides are >= -1 (-1 = unbounded), got {text!r}")
    return left, right


def _read_by(parse: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse type that keeps the text once ``parse`` reads it; its ValueError is the error."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return check


_hybrid_layer_pattern = _read_by(parse_hybrid_pattern)
_pipeline_layout = _read_by(parse_layout)


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
        type=_positive_float,
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
        type=_pipeline_layout,
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
        type=_share,
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
        type=_window,
        help="sliding-window attention LEFT,RIGHT tokens, e.g. 128,0 (default: full attention)",
    )
    ex.add_argument(
        "--window-attn-skip-freq",
        type=_layer_freq,
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
        type=_layer_freq,
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
        type=_per_layer_ints,
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
        type=_hybrid_layer_pattern,
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


def _limits_epilog() -> str:
    """The bounds that no single flag's help shows (``LIMITS``)."""
    chunks, buckets = LIMITS["micro_batches_x_chunks"], LIMITS["buckets"]
    return (
        "Limits: every size and count has an upper bound, shown in its flag's help; KEY=VALUE "
        "overrides, YAML files and recipe keywords meet the same bounds. A value above its bound "
        f"exits 2 before any planning. The step laid out may hold at most {chunks.maximum} "
        f"micro-batches x model chunks ({chunks.why}) and {buckets.maximum} buckets per stage "
        f"({buckets.why})."
    )


def _add_job_flags(ex: argparse.ArgumentParser, *, layout: bool) -> None:
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
    _add_counts(
        ex,
        {
            "--gpus-per-node": "GPUs per node (default: the GPU's, 8; 4 on GB200/GB300)",
            "--nvlink-domain": (
                "GPUs sharing NVLink (default: the GPU's, e.g. one node; 72 on GB200 NVL72)"
            ),
        },
    )


def world_sizes_argument(text: str) -> tuple[int, ...]:
    """``search --world-size``: ``N``, a list ``N,M,...``, or a doubling range ``A:B`` (A, 2A,
    4A, ... up to B); at most 16 sizes, each within ``LIMITS["world_size"]``."""
    text = text.strip()
    try:
        if ":" in text:
            low_text, high_text = text.split(":")
            low, high = int(low_text), int(high_text)
            if low < 1 or high < low:
                raise ValueError
            sizes: list[int] = []
            while low <= high and len(sizes) <= 16:
                sizes.append(low)
                low *= 2
        else:
            sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r}: write a GPU count (256), a list (64,128,256) or a doubling "
            "range A:B (64:256 = 64, 128, 256)"
        ) from None
    if len(sizes) > 16:
        raise argparse.ArgumentTypeError(f"{text!r} names more than 16 world sizes; give fewer")
    for size in sizes:
        if size < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: a world size is a GPU count >= 1")
        try:
            _check_limit("world_size", size, label="--world-size")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return tuple(sorted(set(sizes)))


def _add_search(se: argparse.ArgumentParser) -> None:
    """``bridge-overlap search``: the job flags without the layout, the world sizes, the output."""
    se.description = (
        "Search every layout megatron-core accepts for a model (a recipe, or the model flags "
        "explain takes) on a GPU, precision, world size(s) and global batch: keep those that "
        "fit by the memory estimate, plan their overlap as explain does, and rank them by "
        "predicted tokens/s/GPU. Exit code 0: printed; 2: invalid input, or no layout fits."
    )
    se.add_argument(
        "--recipe",
        help="search a recipe's model (see 'bridge-overlap recipes'); flags change its model",
    )
    se.add_argument(
        "--world-size",
        dest="world_sizes",
        type=world_sizes_argument,
        help=(
            "GPU count(s): N, a list N,M,... or a doubling range A:B (64:256 = 64, 128, 256); "
            "default: the recipe's published count"
        ),
    )
    _add_job_flags(se, layout=False)
    se.add_argument(
        "--top", type=positive_int_argument, default=10, help="rows to print (default 10)"
    )
    se.add_argument(
        "--plot",
        metavar="PATH",
        help="draw tokens/s/GPU against memory per GPU for every costed layout (PNG or SVG; "
        "needs the 'plot' extra)",
    )
    se.add_argument("--json", action="store_true", help="print the result as one JSON object")
    # What search chooses itself: the layout flags explain reads are absent here.
    se.set_defaults(
        world_size=None,
        vpp=None,
        pipeline_model_parallel_layout=None,
        strict=False,
        ep_overlap=False,
    )
    _bound_numeric_flags(se)


#: The subcommands of ``bridge-overlap``, in the order ``--help`` lists them, with their help.
SUBCOMMANDS: dict[str, str] = {
    "explain": "show every overlap decision for a layout, with reasons",
    "search": "rank the layouts that fit a GPU by predicted tokens/s/GPU",
    "recipes": "list the recipes available here, with each one's layout",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``bridge-overlap``.

    With ``command`` (one of :data:`SUBCOMMANDS`), only that subcommand gets its flags: the parser
    of a command line whose first word is ``command`` (the others are listed, with their help).
    """
    parser = _Parser(prog="bridge-overlap", description=_DESCRIPTION)
    # prog given: what argparse would format from the usage (a formatter asks the terminal).
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, prog="bridge-overlap"
    )
    fill = {"explain": _add_explain, "search": _add_search, "recipes": _add_recipes}
    for name, help in SUBCOMMANDS.items():
        subparser = sub.add_parser(name, help=help)
        if command is None or command == name:
            fill[name](subparser)
    return parser


def _add_explain(ex: argparse.ArgumentParser) -> None:
    """``bridge-overlap explain``: a recipe or the reference, the job flags, the output."""
    ex.description = (
        "Explain the communication-overlap plan of a layout. With no arguments: the "
        "reference layout (TP4 + SP, PP4 with VPP2, distributed optimizer, 128 H100 GPUs, "
        "bf16, GPT-3 175B's shape: 96 layers, hidden 12288, 96 heads, seq 2048, mbs 1)."
    )
    ex.epilog = _limits_epilog()
    ex.add_argument(
        "--recipe",
        help=(
            "explain a recipe: a name (see 'bridge-overlap recipes') or 'package.module:function'; "
            "flags given here override its sizes"
        ),
    )
    ex.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help=(
            "with --recipe: overrides of the recipe's ConfigContainer, e.g. "
            "model.tensor_model_parallel_size=8 comm_overlap.tp_comm_overlap=false "
            "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=8 (builds the container: imports torch)"
        ),
    )
    _add_job_flags(ex, layout=True)
    ex.add_argument(
        "--plot",
        metavar="PATH",
        help="draw one step as lanes, with the plan's overlap and with none (PNG or SVG; needs "
        "the 'plot' extra)",
    )
    ex.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 instead of falling back, and for a layout that does not fit in memory",
    )
    ex.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    _bound_numeric_flags(ex)


def _add_recipes(ls: argparse.ArgumentParser) -> None:
    """``bridge-overlap recipes``: the output."""
    ls.description = (
        "List the shipped recipes and those registered under the "
        "'megatron_bridge.recipes' entry-point group, with each one's published layout."
    )
    ls.add_argument("--json", action="store_true", help="print the list as one JSON object")
