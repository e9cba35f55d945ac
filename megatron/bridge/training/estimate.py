"""What one training step costs: model FLOPs, communication bytes per parallelism, lower-bound times.

:func:`estimate_step` reads an :class:`~megatron.bridge.training.comm_overlap.OverlapPlan` (its
job description and overlap decisions) and returns an :class:`Estimate` for one GPU of the busiest pipeline stage:

- **model FLOPs** with the definition Megatron-LM and Megatron-Bridge use for "Model
  TFLOP/s/GPU" (see :meth:`ModelCost.flops_per_token`), and the FLOPs executed once activation
  recomputation is counted;
- **communication bytes** each GPU sends per step for TP, CP, PP, DP and EP, each with its
  formula (see the helpers below), the link it crosses (NVLink inside the NVLink domain, the
  network NIC otherwise), and the time at that link's peak bandwidth;
- **what the plan hides**: the overlap knob that takes each transfer off the critical path,
  when the plan turned it on.

Times are lower bounds: bytes over peak bandwidth, FLOPs over peak dense tensor-core
throughput. :attr:`Estimate.assumptions` lists what the numbers leave out.

Pure arithmetic: importing this module loads no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from megatron.bridge.training.hardware import gpu_spec
from megatron.bridge.training.job import ModelDescription

if TYPE_CHECKING:
    from megatron.bridge.training.comm_overlap import OverlapPlan

__all__ = [
    "CommEntry",
    "Estimate",
    "Link",
    "ModelCost",
    "StepCost",
    "estimate_step",
]

Link = Literal["nvlink", "network"]
"""Where a transfer runs: NVLink inside the NVLink domain, the GPU's network NIC outside it."""

_ACT_BYTES = 2
"""Bytes per activation element on the wire (bf16; FP8 all-gathers are not modelled)."""
_PARAM_BYTES = 2
"""Bytes per parameter in the distributed optimizer's all-gather (bf16 model weights)."""


@dataclass(frozen=True)
class ModelCost:
    """FLOPs and parameter counts of a model, read from its description."""

    model: ModelDescription
    """The model; its shape fields (layers, width, heads, vocabulary, sequence) must be known."""

    def __post_init__(self) -> None:
        missing = [
            name
            for name in (
                "num_layers",
                "hidden_size",
                "num_attention_heads",
                "vocab_size",
                "seq_length",
            )
            if getattr(self.model, name) is None
        ]
        if missing:
            raise ValueError(
                f"The step estimate needs the model's {', '.join(missing)}; set them in the job "
                "description (e.g. --vocab-size on the command line)."
            )

    # --- derived dimensions ------------------------------------------------------------------

    @property
    def query_width(self) -> int:
        """Query projection width: heads x head_dim."""
        return self.model.num_attention_heads * self.model.head_dim

    @property
    def kv_width(self) -> int:
        """Key (and value) projection width: query groups x head_dim."""
        return self.model.query_groups * self.model.head_dim

    @property
    def num_moe_layers(self) -> int:
        """MoE layers (every moe_layer_freq-th layer; 0 for a dense model)."""
        m = self.model
        if not m.moe:
            return 0
        return sum(1 for i in range(m.num_layers) if i % m.moe_layer_freq == 0)

    def padded_vocab(self, tp_size: int) -> int:
        """The vocabulary megatron-core allocates: padded to make_vocab_size_divisible_by x TP."""
        multiple = self.model.make_vocab_size_divisible_by * tp_size
        return math.ceil(self.model.vocab_size / multiple) * multiple

    @property
    def _mlp_matrices(self) -> int:
        return 3 if self.model.gated_linear_unit else 2

    # --- FLOPs -------------------------------------------------------------------------------

    def attention_flops_per_token(self) -> float:
        """Training FLOPs of one attention block per token (forward + backward).

        6 x (h x (q + 2 kv) + q x h) for the QKV and output projections, plus 6 x q x s for
        causal core attention: QK^T and AV are each 2 x q x s FLOPs per token over the full
        square, halved for the causal mask.
        """
        h, q, kv, s = self.model.hidden_size, self.query_width, self.kv_width, self.model.seq_length
        return 6 * (h * (q + 2 * kv) + q * h) + 6 * q * s

    def dense_mlp_flops_per_token(self) -> float:
        """Training FLOPs of one dense MLP per token: 6 x h x ffn x (3 gated, else 2)."""
        return 6 * self.model.hidden_size * self.model.ffn_size * self._mlp_matrices

    def moe_mlp_flops_per_token(self) -> float:
        """Training FLOPs of one MoE MLP per token: top-k routed experts plus the shared experts.

        6 x h x (moe_ffn x topk + shared) x (3 gated, else 2); the router GEMM is not counted
        (nor is it in Megatron's formula).
        """
        if not self.model.moe:
            return 0.0
        width = (self.model.moe_ffn_hidden_size or self.model.ffn_size) * self.model.moe_router_topk
        width += self.model.moe_shared_expert_intermediate_size or 0
        return 6 * self.model.hidden_size * width * self._mlp_matrices

    def logit_flops_per_token(self, tp_size: int = 1) -> float:
        """Training FLOPs of the output layer per token: 6 x h x padded vocabulary."""
        return 6 * self.model.hidden_size * self.padded_vocab(tp_size)

    def flops_per_token(self, tp_size: int = 1) -> float:
        """Model FLOPs per token of one training step (forward + backward), recompute excluded.

        The definition behind Megatron-LM's and Megatron-Bridge's "Model TFLOP/s/GPU"
        (Megatron-LM ``megatron/training/training.py`` ``num_floating_point_operations``,
        Megatron-Bridge ``training/utils/flop_utils.py`` ``transformer_flops``). Each GEMM of
        an (m x k) by (k x n) product costs 2 m k n FLOPs (a multiply and an add); the backward
        pass costs twice the forward (grads w.r.t. inputs and weights), hence the factor
        3 x 2 = 6 per weight and token:

        - attention, per layer: 6 h (q + 2 kv) for Q, K and V (GQA: kv = groups x head_dim)
          + 6 q h for the output projection + 6 q s for causal core attention (QK^T and AV,
          2 q s each over the whole square, halved by the causal mask);
        - MLP, per dense layer: 6 h ffn x 3 for SwiGLU (gate, up, down), x 2 otherwise;
          per MoE layer: the same with ffn = moe_ffn x topk + shared-expert width;
        - logits: 6 h V with V the padded vocabulary (the embedding lookup costs none);
        - norms, softmax, activations, the router and the loss are not counted.

        Recomputed forward passes are not model FLOPs (see :meth:`recompute_flops_per_token`).
        """
        return (
            self.model.num_layers * self.attention_flops_per_token()
            + (self.model.num_layers - self.num_moe_layers) * self.dense_mlp_flops_per_token()
            + self.num_moe_layers * self.moe_mlp_flops_per_token()
            + self.logit_flops_per_token(tp_size)
        )

    # --- parameters --------------------------------------------------------------------------

    def _norm_params(self) -> int:
        return (2 if self.model.normalization == "LayerNorm" else 1) * self.model.hidden_size

    def layer_params(
        self, *, tp_size: int = 1, moe: bool = False, ep_size: int = 1, etp_size: int | None = None
    ) -> tuple[int, int]:
        """(dense, expert) parameters one GPU holds of one transformer layer.

        TP-split weights and biases are divided by ``tp_size``; the output-projection and fc2
        biases and the norms are replicated on every TP rank (megatron-core's row-parallel bias
        and norm weights). An MoE layer's experts are split over EP (whole experts) and ETP.
        """
        h, q, kv = self.model.hidden_size, self.query_width, self.kv_width
        bias = 1 if self.model.add_bias_linear else 0
        dense = (q + 2 * kv) * (h + bias) // tp_size  # QKV weight + bias (column-parallel)
        dense += q * h // tp_size + bias * h  # output projection (row-parallel; bias replicated)
        dense += 2 * self._norm_params()  # input and pre-MLP norms
        expert = 0
        if not moe:
            fc1 = self.model.ffn_size * (self._mlp_matrices - 1)
            dense += fc1 * (h + bias) // tp_size + self.model.ffn_size * h // tp_size + bias * h
            return dense, expert
        etp = tp_size if etp_size is None else etp_size
        width = self.model.moe_ffn_hidden_size or self.model.ffn_size
        one_expert = width * (self._mlp_matrices - 1) * (h + bias) // etp + width * h // etp
        one_expert += bias * h
        expert = one_expert * (self.model.num_moe_experts or 0) // ep_size
        dense += h * (self.model.num_moe_experts or 0)  # router, replicated
        shared = self.model.moe_shared_expert_intermediate_size or 0
        if shared:
            dense += shared * (self._mlp_matrices - 1) * h // tp_size + shared * h // tp_size
        return dense, expert

    def embedding_params(self, tp_size: int = 1) -> int:
        """Parameters one GPU of the first stage holds for the embeddings."""
        params = self.padded_vocab(tp_size) * self.model.hidden_size // tp_size
        if self.model.position_embedding_type == "learned_absolute":
            params += self.model.seq_length * self.model.hidden_size
        return params

    def output_params(self, tp_size: int = 1, *, pp_size: int = 1) -> int:
        """Parameters one GPU of the last stage holds for the final norm and the output layer.

        A tied output layer owns no weight when the first stage is the last (PP 1); with PP > 1
        the last stage keeps its own copy, synchronized with the embedding's.
        """
        params = self._norm_params()
        if not self.model.share_embeddings_and_output_weights or pp_size > 1:
            params += self.padded_vocab(tp_size) * self.model.hidden_size // tp_size
        return params


@dataclass(frozen=True)
class StepCost:
    """The compute side of one step on one GPU of the busiest pipeline stage."""

    tokens: int
    """Tokens in one global batch (global batch size x sequence length)."""
    flops_per_gpu: float
    """Model FLOPs this GPU computes per step (recompute excluded)."""
    compute_seconds_at_peak: float
    """Executed FLOPs (model + recompute) over the GPU's peak dense tensor-core FLOP/s."""


@dataclass(frozen=True)
class CommEntry:
    """One communication stream of a step, per GPU."""

    mode: str
    """Parallelism: tp, cp, pp, dp, dp-expert or ep."""
    collective: str
    """The collective(s), in words."""
    bytes_per_gpu_per_step: float
    """Bytes this GPU sends per step (ring collectives: the (n-1)/n share)."""
    link: Link
    """nvlink or network."""
    seconds_at_link_peak: float
    """bytes / the link's peak per-direction bandwidth: a lower bound."""
    hidden_by: str | None
    """The overlap that takes it off the critical path (None: exposed)."""
    formula: str = ""
    """The byte count's formula, in words."""

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON-ready values (the formula stays out)."""
        return {
            "mode": self.mode,
            "collective": self.collective,
            "bytes_per_gpu_per_step": self.bytes_per_gpu_per_step,
            "link": self.link,
            "seconds_at_link_peak": self.seconds_at_link_peak,
            "hidden_by": self.hidden_by,
        }


CP_RING = "ring attention"
"""hidden_by for CP: TE's ring exchange overlaps the attention kernels themselves, no knob."""


@dataclass(frozen=True)
class Estimate:
    """One training step's cost on one GPU of the busiest pipeline stage."""

    model_flops_per_token: float
    """Model FLOPs per token (:meth:`ModelCost.flops_per_token`)."""
    step: StepCost
    """Compute of one step."""
    communication: tuple[CommEntry, ...]
    """Communication streams, one entry per mode and collective."""
    assumptions: tuple[str, ...]
    """What the numbers assume and leave out."""
    executed_flops_per_gpu: float = 0.0
    """FLOPs this GPU executes per step: model FLOPs plus recomputed forward passes."""
    average_flops_per_gpu: float = 0.0
    """Model FLOPs per step averaged over every GPU (what "Model TFLOP/s/GPU" divides)."""
    dense_params_per_gpu: int = 0
    """Dense (non-expert) parameters held by this GPU: what DP reduces over DP x CP."""
    expert_params_per_gpu: int = 0
    """Expert parameters held by this GPU: what expert-DP reduces."""
    pipeline_rank: int = 0
    """The busiest pipeline stage (most FLOPs; the later one on a tie)."""
    knobs_off: tuple[str, ...] = ()
    """Overlap knobs that would hide an entry but the plan left off or refused."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: model_flops_per_token, step, communication, assumptions."""
        return {
            "model_flops_per_token": self.model_flops_per_token,
            "step": {
                "tokens": self.step.tokens,
                "flops_per_gpu": self.step.flops_per_gpu,
                "compute_seconds_at_peak": self.step.compute_seconds_at_peak,
            },
            "communication": [c.to_dict() for c in self.communication],
            "assumptions": list(self.assumptions),
        }

    def exposed_seconds(self, *, overlap: bool = True) -> float:
        """Communication time left on the critical path: all of it but what overlap hides.

        With ``overlap=False`` only the CP ring stays hidden (attention overlaps it whatever
        the knobs say). Each hidden stream still shows what exceeds the compute time.
        """
        compute = self.step.compute_seconds_at_peak
        exposed = 0.0
        for c in self.communication:
            hidden = c.hidden_by is not None and (overlap or c.hidden_by == CP_RING)
            exposed += (
                max(0.0, c.seconds_at_link_peak - compute) if hidden else c.seconds_at_link_peak
            )
        return exposed

    def knob_summary(self) -> list[str]:
        """One line per overlap knob: what it hides, or what stays exposed while it is off."""
        by_knob: dict[str, list[CommEntry]] = {}
        for c in self.communication:
            if c.hidden_by is not None:
                by_knob.setdefault(c.hidden_by, []).append(c)
        lines = []
        for knob, entries in by_knob.items():
            ms = sum(c.seconds_at_link_peak for c in entries) * 1e3
            what = ", ".join(f"{c.mode} {c.collective}" for c in entries)
            lines.append(f"{knob} hides {ms:.1f} ms/step at peak ({what})")
        for knob in self.knobs_off:
            ms = (
                sum(c.seconds_at_link_peak for c in self.communication if _knob_for(c) == knob)
                * 1e3
            )
            lines.append(f"{knob} is off: {ms:.1f} ms/step at peak stays exposed")
        return lines

    def render(self) -> str:
        """A compact text table of the step, then one line per overlap knob."""
        s = self.step
        lines = [
            f"model FLOPs/token {self.model_flops_per_token:.4g}; step: {s.tokens} tokens, "
            f"{s.flops_per_gpu:.4g} model FLOPs/GPU (pipeline stage {self.pipeline_rank}), "
            f"compute >= {s.compute_seconds_at_peak * 1e3:.1f} ms at peak",
        ]
        header = ("mode", "collective", "bytes/GPU/step", "link", "ms at peak", "hidden by")
        rows = [
            (
                c.mode,
                c.collective,
                _bytes(c.bytes_per_gpu_per_step),
                c.link,
                f"{c.seconds_at_link_peak * 1e3:.2f}",
                c.hidden_by or "-",
            )
            for c in self.communication
        ]
        widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
        for row in (header, *rows):
            lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        lines.extend(self.knob_summary())
        lines.append(
            f"exposed communication >= {self.exposed_seconds() * 1e3:.1f} ms with the plan, "
            f"{self.exposed_seconds(overlap=False) * 1e3:.1f} ms with all overlap off"
        )
        return "\n".join(lines)


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


_KNOB_OF_MODE = {
    "tp": "tp_comm_overlap",
    "pp": "overlap_p2p_comm",
    "ep": "overlap_moe_expert_parallel_comm",
}


def _knob_for(entry: CommEntry) -> str | None:
    if entry.mode in ("dp", "dp-expert"):
        return "overlap_param_gather" if "all-gather" in entry.collective else "overlap_grad_reduce"
    return _KNOB_OF_MODE.get(entry.mode)


def _stage_layers(facts: Any, num_layers: int) -> list[int]:
    """Transformer layers on each pipeline rank, as megatron-core splits them."""
    pp = facts.pp_size
    if pp == 1:
        return [num_layers]
    emb = 1 if facts.model.account_for_embedding_in_pipeline_split else 0
    loss = 1 if facts.model.account_for_loss_in_pipeline_split else 0
    per = (num_layers + emb + loss) / pp
    layers = [per] * pp
    layers[0] -= emb
    layers[-1] -= loss
    return [round(x) for x in layers]


def _recomputed_fraction(facts: Any, stage_layers: int, vpp: int) -> tuple[float, float, float]:
    """(full-layer, core-attention, MLP) fractions of a stage's forward that are recomputed."""
    granularity = facts.model.recompute_granularity
    if granularity == "full":
        if facts.model.recompute_method == "block" and facts.model.recompute_num_layers is not None:
            return min(1.0, facts.model.recompute_num_layers * vpp / max(stage_layers, 1)), 0.0, 0.0
        return 1.0, 0.0, 0.0
    if granularity == "selective":
        modules = (facts.model.recompute_modules or ()) or ("core_attn",)
        return 0.0, float("core_attn" in modules), float("mlp" in modules)
    return 0.0, 0.0, 0.0


def estimate_step(
    plan: OverlapPlan,
    *,
    gpus_per_node: int = 8,
    nvlink_domain: int | None = None,
) -> Estimate:
    """The cost of one training step on one GPU of the busiest pipeline stage of ``plan``.

    Everything comes from the plan's job description: the model (:class:`ModelCost`), the
    layout, the GPU, the batch sizes (the global batch defaults to the smallest that fills the
    pipeline, micro-batch x DP x PP) and whether gradients are reduced in fp32.
    ``nvlink_domain`` is how many consecutive ranks NVLink connects (default: the GPU
    catalogue's domain, e.g. 72 on GB200 NVL72, else ``gpus_per_node``). Raises ``ValueError``
    when the job lacks what the estimate needs (GPU, micro-batch size, the model's shape).
    """
    f = plan.job
    dims = ModelCost(f.model)
    if f.gpu is None:
        raise ValueError("estimate_step needs the GPU model: set JobDescription.gpu (e.g. 'h100').")
    if f.micro_batch_size is None:
        raise ValueError("estimate_step needs JobDescription.micro_batch_size.")
    global_batch_size = f.global_batch_size
    grad_reduce_in_fp32 = f.grad_reduce_in_fp32
    gpu = gpu_spec(f.gpu)
    seq = f.model.seq_length
    tp, cp, pp, dp = f.tp_size, f.cp_size, f.pp_size, f.dp_size
    vpp = f.vpp_size if f.interleaved else 1
    mbs = f.micro_batch_size
    gbs = global_batch_size if global_batch_size is not None else mbs * dp * pp
    if gbs % (mbs * dp):
        raise ValueError(
            f"global_batch_size {gbs} is not a multiple of micro_batch_size x DP = {mbs * dp}."
        )
    micro_batches = gbs // (mbs * dp)
    tokens = gbs * seq
    tokens_per_dp_rank = tokens // dp
    world = f.world_size
    domain = nvlink_domain or gpu.nvlink_domain or gpus_per_node
    fp8 = f.precision == "fp8"
    peak_flops = gpu.peak_tflops(fp8=fp8) * 1e12
    assumptions: list[str] = []

    # --- which pipeline stage is busiest ----------------------------------------------------
    stage_layers = _stage_layers(f, f.model.num_layers)
    moe_share = dims.num_moe_layers / f.model.num_layers
    attn, dense_mlp, moe_mlp = (
        dims.attention_flops_per_token(),
        dims.dense_mlp_flops_per_token(),
        dims.moe_mlp_flops_per_token(),
    )

    def stage_flops(rank: int) -> float:
        n = stage_layers[rank]
        per_layer = attn + (1 - moe_share) * dense_mlp + moe_share * moe_mlp
        return n * per_layer + (dims.logit_flops_per_token(tp) if rank == pp - 1 else 0.0)

    rank = max(range(pp), key=lambda r: (stage_flops(r), r))
    layers = stage_layers[rank]
    moe_layers = layers * moe_share
    first, last = rank == 0, rank == pp - 1

    # --- compute ----------------------------------------------------------------------------
    split = tp * cp  # a micro-batch's work is split over TP and its tokens over CP
    model_flops = tokens_per_dp_rank * stage_flops(rank) / split
    full, core, mlp = _recomputed_fraction(f, layers, vpp)
    layer_fwd = (attn + (1 - moe_share) * dense_mlp + moe_share * moe_mlp) / 3
    core_fwd = 2 * dims.query_width * seq
    mlp_fwd = ((1 - moe_share) * dense_mlp + moe_share * moe_mlp) / 3
    recompute_per_token = layers * (full * layer_fwd + core * core_fwd + mlp * mlp_fwd)
    executed = model_flops + tokens_per_dp_rank * recompute_per_token / split
    step = StepCost(
        tokens=tokens,
        flops_per_gpu=model_flops,
        compute_seconds_at_peak=executed / peak_flops,
    )

    # --- communication ----------------------------------------------------------------------
    def link(span: int) -> Link:
        return "nvlink" if span <= domain else "network"

    def bandwidth(where: Link) -> float:
        return (gpu.nvlink_gb_per_s if where == "nvlink" else gpu.network_gb_per_s) * 1e9

    def on(knob: str) -> bool:
        try:
            return bool(plan.value(knob))
        except KeyError:
            return False

    knobs_off: list[str] = []
    entries: list[CommEntry] = []

    def add(
        mode: str, collective: str, nbytes: float, span: int, knob: str | None, formula: str
    ) -> None:
        if nbytes <= 0:
            return
        where = link(span)
        hidden = knob if knob == CP_RING or (knob is not None and on(knob)) else None
        if knob is not None and hidden is None and knob not in knobs_off:
            knobs_off.append(knob)
        entries.append(
            CommEntry(mode, collective, nbytes, where, nbytes / bandwidth(where), hidden, formula)
        )

    # One micro-batch's hidden activations on this GPU's CP slice, before any SP split.
    act = mbs * (seq // cp) * f.model.hidden_size * _ACT_BYTES
    recomputed_layers = full * layers

    # TP. With SP each layer's attention and MLP all-gather their input (fwd) and
    # reduce-scatter their output (fwd); backward reduce-scatters the input grad, all-gathers
    # the output grad and all-gathers the input again for the weight grad: 10 ring collectives
    # of `act` bytes per layer, each sending (TP-1)/TP x act per GPU; a recomputed layer adds
    # its 4 forward ones. The output layer adds 3 (gather fwd, scatter bwd, re-gather for
    # wgrad), the embedding 2 (scatter fwd, gather bwd). An MoE layer's expert MLP traffic is
    # EP's (below); its attention keeps 5.
    # Without SP: 2 all-reduces forward and 2 backward per layer (2 (TP-1)/TP x act each), a
    # recomputed layer 2 more; the embedding and the output layer one each.
    if tp > 1:
        ring = (tp - 1) / tp
        if f.sequence_parallel:
            per_mb = (
                10 * (layers - moe_layers)
                + 5 * moe_layers
                + 4 * recomputed_layers
                + (3 if last else 0)
                + (2 if first else 0)
            )
            collective, formula = (
                "all-gather + reduce-scatter",
                "M x (10/layer + 4/recomputed layer + 3 output + 2 embedding) x (TP-1)/TP x b s/CP h x 2B",
            )
        else:
            per_mb = 2 * (
                4 * layers + 2 * recomputed_layers + (1 if last else 0) + (1 if first else 0)
            )
            collective, formula = (
                "all-reduce",
                "M x 2 x (4/layer + 2/recomputed layer + output + embedding) x (TP-1)/TP x b s/CP h x 2B",
            )
        add("tp", collective, micro_batches * per_mb * ring * act, tp, "tp_comm_overlap", formula)

    # CP. TE's ring attention passes each GPU's K/V chunk around the ring: forward sends it
    # CP-1 times; backward sends K/V again and dK/dV, 2 (CP-1) times; a recomputed forward
    # (full layer or core attention) sends it CP-1 more times.
    if cp > 1:
        kv = 2 * mbs * (seq // cp) * (dims.kv_width // tp) * _ACT_BYTES
        rounds = (3 * layers + (recomputed_layers + core * layers)) * (cp - 1)
        add(
            "cp",
            "K/V ring exchange (p2p)",
            micro_batches * rounds * kv,
            tp * cp,
            CP_RING,
            "M x (3 + recompute) x layers x (CP-1) x 2 b s/CP kv/TP x 2B",
        )

    # PP. Each micro-batch's activation goes forward and its gradient backward across every
    # stage boundary, once per model chunk: VPP chunks send VPP times as many messages. The
    # first stage's first chunk receives no gradient to send on and the last stage's last chunk
    # sends no activation. With SP the message is the SP shard (1/TP).
    if pp > 1:
        pp_msg = act / (tp if f.sequence_parallel else 1)
        sends = 2 * vpp - (1 if first else 0) - (1 if last else 0)
        add(
            "pp",
            "send/recv activations + grads",
            micro_batches * sends * pp_msg,
            world,
            "overlap_p2p_comm",
            "M x (2 VPP - edge) x b s/CP h/(TP if SP) x 2B",
        )

    # DP over DP x CP ranks (CP ranks hold the same weights). Distributed optimizer: grads
    # reduce-scattered ((n-1)/n x P x grad bytes: 4 in fp32, 2 in bf16) and bf16 params
    # all-gathered ((n-1)/n x P x 2B); otherwise one all-reduce (2 (n-1)/n x P x grad bytes).
    dense_params = 0.0
    expert_params = 0.0
    for is_moe, count in ((False, layers - moe_layers), (True, moe_layers)):
        d, e = dims.layer_params(tp_size=tp, moe=is_moe, ep_size=f.ep_size, etp_size=f.etp_size)
        dense_params += d * count
        expert_params += e * count
    dense_params = round(dense_params)
    expert_params = round(expert_params)
    if first:
        dense_params += dims.embedding_params(tp)
    if last:
        dense_params += dims.output_params(tp, pp_size=pp)
    grad_bytes = 4 if grad_reduce_in_fp32 else 2

    def data_parallel(mode: str, n: int, params: int, span: int) -> None:
        if n <= 1 or params == 0:
            return
        ring = (n - 1) / n
        if f.use_distributed_optimizer:
            add(
                mode,
                "reduce-scatter (grads)",
                ring * params * grad_bytes,
                span,
                "overlap_grad_reduce",
                f"(n-1)/n x params x {grad_bytes}B, n = {n}",
            )
            add(
                mode,
                "all-gather (params)",
                ring * params * _PARAM_BYTES,
                span,
                "overlap_param_gather",
                f"(n-1)/n x params x {_PARAM_BYTES}B, n = {n}",
            )
        else:
            add(
                mode,
                "all-reduce (grads)",
                2 * ring * params * grad_bytes,
                span,
                "overlap_grad_reduce",
                f"2 (n-1)/n x params x {grad_bytes}B, n = {n}",
            )

    data_parallel("dp", dp * cp, dense_params, tp * cp * dp)
    etp = f.etp_size
    if f.model.moe:
        edp = f.expert_data_parallel_size or world // (etp * f.ep_size * pp)
        data_parallel("dp-expert", edp, expert_params, etp * f.ep_size * edp)

    # EP. Each MoE layer dispatches every token to its top-k experts and combines the results:
    # forward and backward, 4 all-to-alls of tokens x topk x h x 2B, of which (EP-1)/EP leaves
    # the GPU under uniform routing; a recomputed layer adds its 2 forward ones.
    if f.model.moe and f.ep_size > 1:
        local_tokens = mbs * seq // (cp * (tp if f.sequence_parallel else 1))
        a2a = local_tokens * f.model.moe_router_topk * f.model.hidden_size * _ACT_BYTES
        count = 4 * moe_layers + 2 * full * moe_layers
        add(
            "ep",
            "all-to-all dispatch + combine",
            micro_batches * count * (f.ep_size - 1) / f.ep_size * a2a,
            etp * f.ep_size,
            "overlap_moe_expert_parallel_comm",
            "M x 4/MoE layer x (EP-1)/EP x tokens x topk x h x 2B",
        )

    assumptions.extend(
        [
            "times are lower bounds: bytes / peak per-direction link bandwidth and FLOPs / peak "
            f"dense {'FP8' if fp8 else 'BF16'} tensor-core FLOP/s ({gpu.name}: "
            f"{gpu.peak_tflops(fp8=fp8):.0f} TFLOP/s, NVLink {gpu.nvlink_gb_per_s:.0f} GB/s, "
            f"network {gpu.network_gb_per_s:.0f} GB/s per GPU); no latency, no congestion",
            f"ring collectives: each GPU sends (n-1)/n of the tensor; NVLink domain of {domain} "
            "consecutive ranks (megatron-core rank order tp-cp-dp-pp, experts tp-ep-dp-pp); a "
            "group spanning more crosses the network",
            f"global batch {gbs} ({micro_batches} micro-batches of {mbs} per DP rank)"
            + ("" if global_batch_size is not None else ": default micro-batch x DP x PP"),
            f"busiest pipeline stage = rank {rank} ({layers} transformer layers"
            + (", logits" if last else "")
            + (", embedding" if first else "")
            + ")",
            "activations on the wire in bf16 (FP8 all-gathers not modelled); params gathered in "
            f"bf16; grads reduced in {'fp32' if grad_reduce_in_fp32 else 'bf16'}",
            "CP's K/V ring exchange is overlapped by the attention kernels themselves (TE ring "
            "attention), whatever the overlap knobs say",
            "model FLOPs: Megatron's definition (no norms, softmax, router or loss); "
            "recomputed forwards count only in compute_seconds_at_peak",
        ]
    )
    if f.model.moe:
        assumptions.append(
            "MoE: uniform routing (no imbalance, no dropped tokens); MoE layers spread evenly "
            "over stages; expert-TP traffic not modelled"
        )
    average = tokens * dims.flops_per_token(tp) / world
    return Estimate(
        model_flops_per_token=dims.flops_per_token(tp),
        step=step,
        communication=tuple(entries),
        assumptions=tuple(assumptions),
        executed_flops_per_gpu=executed,
        average_flops_per_gpu=average,
        dense_params_per_gpu=dense_params,
        expert_params_per_gpu=expert_params,
        pipeline_rank=rank,
        knobs_off=tuple(knobs_off),
    )
