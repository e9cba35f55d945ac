"""FLOPs and parameter counts of a model, read from its :class:`ModelDescription`.

:class:`ModelCost` owns the per-token FLOPs definition behind "Model TFLOP/s/GPU" and the
parameters one GPU holds of a layer, the embedding and the output layer; it knows nothing of
the step, the pipeline stage or the links.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from megatron.bridge.training.job import ModelDescription

__all__ = ["ModelCost"]


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
        """MoE layers (from moe_layer_freq; 0 for a dense model)."""
        return sum(self.model.moe_layer_pattern) if self.model.moe else 0

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

        Recomputed forward passes are not model FLOPs (the step counts them apart:
        ``Stage.recompute_flops_per_token``).
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
