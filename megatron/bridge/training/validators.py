"""Checks of user-given values, shared by every config and command of the library.

Each raises ``TypeError`` for a value of the wrong type and ``ValueError`` for one out of range
(``check_int(type_error=ValueError)`` keeps the few settings that always raised ``ValueError``),
naming the setting (``owner.name``, or ``name`` alone when ``owner`` is empty) and what it
accepts. ``bool`` is never accepted where an int is expected: ``bucket_size=True`` is a typo,
not "one parameter". No ``assert``: these checks must hold under ``python -O``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, get_args

__all__ = [
    "LIMITS",
    "Limit",
    "LimitError",
    "check_bool",
    "check_choice",
    "check_int",
    "check_limit",
    "check_optional_bool",
    "is_int",
    "nonnegative_int_argument",
    "positive_int_argument",
]


class LimitError(ValueError):
    """A size or count outside the bounds ``bridge-overlap`` and the planner accept
    (:data:`LIMITS`): raised before any planning or simulation."""


def _label(owner: str, name: str) -> str:
    return f"{owner}.{name}" if owner else name


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending: the sizes a layout error suggests."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0] if n > 0 else []
    return sorted({*small, *(n // d for d in small)})


def shown_value(value: object) -> str:
    """``repr(value)`` for an error message, its middle cut out past 120 characters."""
    text = repr(value)
    return text if len(text) <= 120 else text[:100] + " ... " + text[-15:]


def is_int(value: object) -> bool:
    """True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_bool(owner: str, name: str, value: object) -> bool:
    """``value`` must be True or False."""
    if type(value) is not bool:
        raise TypeError(
            f"{_label(owner, name)} must be True or False, got {value!r} ({type(value).__name__})."
        )
    return value


def check_optional_bool(
    owner: str, name: str, value: object, *, none_means: str = ""
) -> bool | None:
    """``value`` must be True, False or None; ``none_means`` says what None does."""
    if value is not None and type(value) is not bool:
        meaning = f" ({none_means})" if none_means else ""
        raise TypeError(
            f"{_label(owner, name)} must be True, False or None{meaning}, got {value!r} "
            f"({type(value).__name__})."
        )
    return value


def _bounds(minimum: int | None, maximum: int | None) -> str:
    parts = [
        f">= {minimum}" if minimum is not None else "",
        f"<= {maximum}" if maximum is not None else "",
    ]
    return " and ".join(p for p in parts if p)


def check_int(
    owner: str,
    name: str,
    value: object,
    *,
    minimum: int | None = 1,
    maximum: int | None = None,
    optional: bool = False,
    unit: str = "",
    hint: str = "",
    type_error: type[Exception] = TypeError,
) -> Any:
    """``value`` must be an int in ``[minimum, maximum]`` (or None when ``optional``).

    ``unit`` names what it counts (shown in the type error); ``hint`` says how to fix it and ends
    every error. ``type_error`` is what a value that is not an int raises: ``TypeError``, except
    for the few settings whose contract is a ``ValueError`` for any bad value.
    """
    if value is None and optional:
        return None
    if (
        type(value) is int
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    ):
        return value  # the common case: no message to build
    label = _label(owner, name)
    bounds = _bounds(minimum, maximum)
    tail = f" {hint}" if hint else ""
    if not is_int(value):
        what = " ".join(p for p in ("an int", bounds, f"({unit})" if unit else "") if p)
        if optional:
            what += " or None"
        raise type_error(f"{label} must be {what}, got {value!r} ({type(value).__name__}).{tail}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{label} must be {bounds}, got {value}.{tail}")
    return value


def check_choice[T](
    owner: str, name: str, value: T, allowed: Any, *, optional: bool = False, hint: str = ""
) -> T:
    """``value`` must be one of ``allowed`` (a ``Literal`` type or an iterable); lists the choices.

    With ``optional`` None is accepted too (and listed); ``hint`` ends the error.
    """
    choices = get_args(allowed) if get_args(allowed) else tuple(allowed)
    if optional:
        choices = (*choices, None)
    if value not in choices:
        tail = f" {hint}" if hint else ""
        raise ValueError(
            f"{_label(owner, name)} must be one of {list(choices)}, got {value!r}.{tail}"
        )
    return value


def _int_argument(text: str, *, minimum: int, expected: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def positive_int_argument(text: str) -> int:
    """An ``argparse`` type for a size given on a command line: an int >= 1."""
    return _int_argument(text, minimum=1, expected="a positive integer")


def nonnegative_int_argument(text: str) -> int:
    """An ``argparse`` type for a count given on a command line: an int >= 0."""
    return _int_argument(text, minimum=0, expected="an integer >= 0")


# --------------------------------------------------------------------------- size limits


@dataclass(frozen=True)
class Limit:
    """The range of one size or count: what a job may give and why the top is where it is."""

    minimum: int
    """The smallest value megatron-core takes."""
    maximum: int
    """The largest value the planner takes: far above any real job, low enough that planning
    and the step estimate stay quick (what their cost grows with is bounded here)."""
    why: str
    """What the value counts and why no real job comes near the maximum."""


_GPUS = 2**20
_LAYERS = 2**12
_WIDTH = 2**20
_HEADS = 2**16
_TOKENS = 2**24
_WORLD = f"GPUs; the largest training clusters hold some 10^5, and no group exceeds {_GPUS}"
_WIDE = "model width; the widest published models are some 10^4 wide"
_DEEP = (
    "layers; published models have a few hundred, the deepest trained transformer some 1000 "
    "(DeepNet, Wang et al. 2022), and the estimate walks them one by one"
)
_MANY_HEADS = "heads or groups; published models have at most a few hundred"

#: The range of every size and count a job takes, by job-description field (``world_size``,
#: ``model.<field>``), by launch-environment and estimate option, and of the two counts the step
#: estimate's cost grows with (``micro_batches_x_chunks``, ``buckets``). A list-valued field
#: (``moe_layer_freq``) is bounded in entries, a layout or pattern in layers once unrolled.
#: ``check_limits`` checks a job's maxima before any planning; flags, ``KEY=VALUE`` overrides
#: and recipe keywords are checked against the same table where they are read.
LIMITS: Mapping[str, Limit] = MappingProxyType(
    {
        "world_size": Limit(1, _GPUS, _WORLD),
        "model.tensor_model_parallel_size": Limit(1, _GPUS, _WORLD),
        "model.pipeline_model_parallel_size": Limit(
            1, _LAYERS, "pipeline stages; each holds layers"
        ),
        "model.virtual_pipeline_model_parallel_size": Limit(
            1, _LAYERS, "model chunks per pipeline rank; each holds layers"
        ),
        "model.context_parallel_size": Limit(1, _GPUS, _WORLD),
        "model.expert_model_parallel_size": Limit(1, _GPUS, _WORLD),
        "model.expert_tensor_parallel_size": Limit(1, _GPUS, _WORLD),
        "model.num_layers_in_first_pipeline_stage": Limit(1, _LAYERS, _DEEP),
        "model.num_layers_in_last_pipeline_stage": Limit(1, _LAYERS, _DEEP),
        "model.pipeline_model_parallel_layout": Limit(
            1, 8 * _LAYERS, "layers and stage ends once repeats are unrolled"
        ),
        "model.num_layers": Limit(1, _LAYERS, _DEEP),
        "model.hidden_size": Limit(1, _WIDTH, _WIDE),
        "model.num_attention_heads": Limit(1, _HEADS, _MANY_HEADS),
        "model.num_query_groups": Limit(1, _HEADS, _MANY_HEADS),
        "model.kv_channels": Limit(1, _WIDTH, _WIDE),
        "model.ffn_hidden_size": Limit(1, _WIDTH, _WIDE),
        "model.seq_length": Limit(
            1, _TOKENS, "tokens per sequence; the longest trained contexts hold some 10^6"
        ),
        "model.vocab_size": Limit(
            1, _TOKENS, "tokens in the vocabulary; published ones hold some 10^5"
        ),
        "model.make_vocab_size_divisible_by": Limit(1, _HEADS, "vocabulary padding multiple"),
        "model.q_lora_rank": Limit(1, _WIDTH, _WIDE),
        "model.kv_lora_rank": Limit(1, _WIDTH, _WIDE),
        "model.qk_head_dim": Limit(1, _WIDTH, _WIDE),
        "model.qk_pos_emb_head_dim": Limit(1, _WIDTH, _WIDE),
        "model.v_head_dim": Limit(1, _WIDTH, _WIDE),
        "model.window_size": Limit(-1, _TOKENS, "tokens before and after; -1 is unbounded"),
        "model.window_attn_skip_freq": Limit(1, _LAYERS, _DEEP),
        "model.hybrid_layer_pattern": Limit(1, 8 * _LAYERS, "layer symbols"),
        "model.mamba_state_dim": Limit(1, _WIDTH, _WIDE),
        "model.mamba_head_dim": Limit(1, _WIDTH, _WIDE),
        "model.mamba_num_groups": Limit(1, _HEADS, _MANY_HEADS),
        "model.mamba_num_heads": Limit(1, _HEADS, _MANY_HEADS),
        "model.num_moe_experts": Limit(
            1, _GPUS, "routed experts; published MoE models have at most a few thousand"
        ),
        "model.moe_router_topk": Limit(1, _HEADS, "experts per token"),
        "model.moe_ffn_hidden_size": Limit(1, _WIDTH, _WIDE),
        "model.moe_shared_expert_intermediate_size": Limit(1, _WIDTH, _WIDE),
        "model.moe_layer_freq": Limit(1, _LAYERS, _DEEP),
        "model.moe_latent_size": Limit(1, _WIDTH, _WIDE),
        "model.recompute_num_layers": Limit(1, _LAYERS, _DEEP),
        "model.mtp_num_layers": Limit(0, _LAYERS, _DEEP),
        "model.cpu_offloading_num_layers": Limit(0, _LAYERS, _DEEP),
        "model.num_layers_at_start_in_bf16": Limit(0, _LAYERS, _DEEP),
        "model.num_layers_at_end_in_bf16": Limit(0, _LAYERS, _DEEP),
        "model.fine_grained_offloading_max_inflight_offloads": Limit(
            0, _LAYERS, "offloads of one module in flight; a step has one per layer"
        ),
        "model.min_offloaded_tensor_size": Limit(
            0, 2**40, "elements of one saved tensor; a layer's largest holds some 10^9"
        ),
        "model.moe_n_hash_layers": Limit(0, _LAYERS, _DEEP),
        "model.dsa_indexer_n_heads": Limit(1, _HEADS, _MANY_HEADS),
        "model.dsa_indexer_head_dim": Limit(1, _WIDTH, _WIDE),
        "model.dsa_indexer_topk": Limit(1, _TOKENS, "keys each query attends to"),
        "model.o_lora_rank": Limit(1, _WIDTH, _WIDE),
        "model.o_groups": Limit(1, _HEADS, _MANY_HEADS),
        "model.csa_window_size": Limit(1, _TOKENS, "tokens in the sliding window"),
        "model.csa_compress_ratios": Limit(0, _LAYERS, _DEEP),
        "model.num_residual_streams": Limit(1, _HEADS, "residual streams"),
        "micro_batch_size": Limit(1, 2**16, "samples per micro-batch"),
        "global_batch_size": Limit(
            1, _TOKENS, "samples per step; published runs take some 10^3 to 10^4"
        ),
        "num_buckets": Limit(1, 2**14, "DDP buckets; the step estimate places each one"),
        "num_distributed_optimizer_instances": Limit(
            1, _GPUS, "groups of data-parallel ranks; each holds at least one GPU"
        ),
        "layernorm_sm_margin": Limit(0, 1024, "SMs; a GPU has at most a few hundred"),
        # NCCL's environment-variable docs: NCCL_P2P_NET_CHUNKSIZE defaults to 131072.
        "nccl_pp_comm_chunksize": Limit(2, 2**30, "bytes; NCCL's default P2P chunk is 128 KiB"),
        "gpus_per_node": Limit(1, _GPUS, _WORLD),
        "nvlink_domain": Limit(1, _GPUS, _WORLD),
        # What the step estimate's cost grows with: it lays out every forward and backward of
        # every micro-batch and model chunk, and runs every gradient bucket, one by one.
        "micro_batches_x_chunks": Limit(
            1,
            2**13,
            "micro-batches per step and data-parallel replica (global batch / (micro-batch x "
            "DP)) times model chunks per pipeline rank (VPP): the step estimate lays each "
            "forward and backward out one by one",
        ),
        "buckets": Limit(
            1,
            2**14,
            "gradient buckets of one pipeline stage per step (its parameters / bucket_size): "
            "the step estimate runs each one",
        ),
    }
)


def check_limit(name: str, value: object, *, label: str | None = None) -> None:
    """``LimitError`` when ``value`` is outside ``LIMITS[name]``: an int (a window's entries) below
    its minimum or above its maximum, a list, layout or pattern longer than the maximum;
    ``label`` names it (default: ``name``).

    The one check of a size's range: the flags, ``KEY=VALUE`` overrides, YAML, recipe keywords
    and every job description (``job.check_limits``) meet it. Values of another type pass: their
    type is checked where the field is read.
    """
    limit = LIMITS[name]
    size = value
    smallest = value if is_int(value) else None
    what = ""
    if isinstance(value, str):
        size, what = len(value), " characters long"
    elif isinstance(value, tuple | list) and name != "model.window_size":
        size, what = len(value), " entries long"
    elif isinstance(value, tuple | list):
        entries = [v for v in value if is_int(v)]
        size, smallest = max(entries, default=None), min(entries, default=None)
    shown = f"{value!r:.60}" if isinstance(value, str | tuple | list) else str(value)
    # A size below its minimum (hidden_size=-5) would be planned as negative bytes and FLOPs.
    if smallest is not None and smallest < limit.minimum:
        raise LimitError(
            f"{label or name} must be >= {limit.minimum}, got {shown}: below its bound "
            f"{limit.minimum} ({limit.why}); give at least {limit.minimum}."
        )
    if is_int(size) and size > limit.maximum:
        raise LimitError(
            f"{label or name}={shown}{what} is above its bound {limit.maximum} "
            f"({limit.why}); give at most {limit.maximum}."
        )
