"""Parameters one GPU holds of a model's layers, embedding and output layer, and a hybrid
model's whole state.

:class:`ModelParams` counts a transformer layer (:meth:`~ModelParams.layer_params`), each block
of a layer by its hybrid-pattern symbol (:meth:`~ModelParams.block_params`: attention, MLA,
Mamba, gated delta net, dense MLP, MoE), an MTP layer, the embedding and the output layer, as
TP, EP and expert TP split them; the blocks each decoder and MTP layer is built of, for the
memory estimate; and the elements of a hybrid model's unsharded checkpoint
(:meth:`~ModelParams.hybrid_state_elements`).
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron.bridge.training.estimate.hybrid_pattern import (
    ATTENTION,
    GATED_DELTA_NET,
    GDN,
    LAYER_SYMBOLS,
    MAMBA,
    MAMBA_CONV_KERNEL,
    MLA,
    MLP,
    MOE,
    parse_hybrid_pattern,
)
from megatron.bridge.training.estimate.model_shape import ModelShape

__all__ = ["ModelParams"]


@dataclass(frozen=True)
class ModelParams(ModelShape):
    """Parameters of a model on one GPU, read from its description."""

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

    def layer_blocks(self) -> tuple[str, ...]:
        """The blocks of each decoder layer, one string per layer, in hybrid-pattern symbols.

        A transformer layer is its attention (``*``, or ``+`` with multi_latent_attention) and
        its MLP (``-``) or MoE (``E``) by moe_layer_pattern; a hybrid model's layer is its
        pattern symbol (megatron-core's HybridModel builds one block a layer).
        """
        m = self.model
        if m.hybrid_layer_pattern is not None:
            return tuple(parse_hybrid_pattern(m.hybrid_layer_pattern).main)
        attention = MLA if m.multi_latent_attention else ATTENTION
        return tuple(attention + (MOE if moe else MLP) for moe in m.moe_layer_pattern)

    def mtp_blocks(self) -> str:
        """The blocks of one multi-token-prediction layer: a hybrid model's MTP pattern, or a
        transformer layer whose MLP is MoE when the last decoder layer's is (megatron-core's
        ``get_gpt_mtp_block_spec`` reuses the last layer's spec); empty without MTP."""
        m = self.model
        if self.mtp_layers == 0:
            return ""
        if m.hybrid_layer_pattern is not None:
            return parse_hybrid_pattern(m.hybrid_layer_pattern).mtp or ATTENTION + MLP
        return self.layer_blocks()[-1]

    @property
    def mamba_inner(self) -> int:
        """Mamba: the mixer's inner width, heads x head_dim (default heads: 2h / head_dim)."""
        m = self.model
        heads = m.mamba_num_heads or 2 * m.hidden_size // m.mamba_head_dim
        return heads * m.mamba_head_dim

    def block_params(
        self, symbol: str, *, tp_size: int = 1, ep_size: int = 1, etp_size: int | None = None
    ) -> tuple[int, int]:
        """(dense, expert) parameters one GPU holds of one block, by its hybrid-pattern symbol.

        Each block counts its pre-norm. TP splits the column- and row-parallel weights (and the
        column-parallel biases); norms, row-parallel biases, the router and MLA's down-projections
        (megatron-core builds them ``duplicated``) are whole on every TP rank. Routed experts
        are split over EP (whole experts) and ETP. ``*`` and ``D`` are GQA/MHA attention (with
        the output gate when attention_output_gate); ``+`` MLA (megatron-core's
        ``MLASelfAttention``: the query down-projection to q_lora_rank with its norm and
        up-projection, or one full-rank query projection; the key/value down-projection to
        kv_lora_rank plus the rotary key, its norm and up-projection; the output projection);
        ``M`` a Mamba mixer (in_proj to z, x, B, C and dt; conv1d; A, D and dt bias per head;
        the gated norm; out_proj); ``G`` a gated delta net (megatron-core's linear_* defaults);
        ``-`` a dense MLP; ``E`` an MoE layer (router, routed and shared experts, the latent
        projections with moe_latent_size).
        """
        m = self.model
        h, tp = m.hidden_size, tp_size
        bias = 1 if m.add_bias_linear else 0
        norm = self._norm_params()
        if symbol in (ATTENTION, "D"):
            q, kv = self.query_width, self.kv_width
            qkv_bias = 1 if m.attention_bias else 0
            gate = q * h // tp if m.attention_output_gate else 0
            return norm + (q + 2 * kv) * (h + qkv_bias) // tp + q * h // tp + bias * h + gate, 0
        if symbol == MLA:
            n, rope = m.num_attention_heads, m.qk_pos_emb_head_dim
            qk = m.qk_head_dim + rope
            if m.q_lora_rank is None:
                query = h * n * qk // tp
            else:
                query = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * qk // tp
            kv = h * (m.kv_lora_rank + rope) + m.kv_lora_rank
            kv += m.kv_lora_rank * n * (m.qk_head_dim + m.v_head_dim) // tp
            return norm + query + kv + n * m.v_head_dim * h // tp + bias * h, 0
        if symbol == MAMBA:
            d_in = self.mamba_inner
            heads = d_in // m.mamba_head_dim
            bc = 2 * m.mamba_num_groups * m.mamba_state_dim
            in_proj = h * (2 * d_in + bc + heads) // tp
            conv = (d_in + bc) * (MAMBA_CONV_KERNEL + 1) // tp
            return norm + in_proj + conv + 3 * heads // tp + d_in // tp + d_in * h // tp, 0
        if symbol == GDN:
            gdn = GATED_DELTA_NET
            qk, v = gdn.key_width, gdn.value_width
            heads, kernel = gdn.linear_num_value_heads, gdn.linear_conv_kernel_dim
            in_proj = h * (2 * qk + 2 * v + 2 * heads) // tp
            conv = kernel * (2 * qk + v) // tp
            return norm + in_proj + conv + v * h // tp + 2 * heads // tp, 0
        if symbol == MLP:
            ffn = m.ffn_size
            return norm + ffn * (self._mlp_matrices - 1) * (h + bias) // tp + ffn * h // tp + (
                bias * h
            ), 0
        if symbol == MOE:
            etp = tp if etp_size is None else etp_size
            token = m.moe_latent_size or h
            width = m.moe_ffn_hidden_size or m.ffn_size
            one = width * (self._mlp_matrices - 1) * (token + bias) // etp + width * token // etp
            expert = (one + bias * token) * (m.num_moe_experts or 0) // ep_size
            dense = norm + h * (m.num_moe_experts or 0)  # router, replicated
            shared = m.moe_shared_expert_intermediate_size or 0
            dense += shared * (self._mlp_matrices - 1) * h // tp + shared * h // tp
            if m.moe_latent_size is not None:
                dense += 2 * h * m.moe_latent_size  # down- and up-projection, replicated
            return dense, expert
        raise ValueError(f"unknown layer block {symbol!r}; expected one of {sorted(LAYER_SYMBOLS)}")

    def mtp_params(
        self, tp_size: int = 1, *, ep_size: int = 1, etp_size: int | None = None
    ) -> tuple[int, int]:
        """(dense, expert) parameters of one multi-token-prediction layer on one GPU: its
        blocks (:meth:`mtp_blocks`), the norms of the embedding and the hidden state, the
        h x 2h projection of their concatenation (column-parallel) and its final norm
        (megatron-core's ``MultiTokenPredictionLayer``); it shares the embedding and the output
        layer."""
        dense = 3 * self._norm_params() + 2 * self.model.hidden_size**2 // tp_size
        expert = 0
        for symbol in self.mtp_blocks():
            d, e = self.block_params(symbol, tp_size=tp_size, ep_size=ep_size, etp_size=etp_size)
            dense, expert = dense + d, expert + e
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

    def hybrid_state_elements(self) -> int:
        """Elements of a hybrid model's unsharded state: its parameters and the routers'
        expert-bias buffers, what a checkpoint of megatron-core's ``HybridModel`` holds (the count
        Megatron-Bridge's model verification cards give).

        The embedding and, untied, the output layer over the vocabulary padded at TP 1, the
        final norm; each pattern symbol's layer (:meth:`_hybrid_layer_elements`); the MTP
        block: the embedding and hidden-state norms, their h x 2h projection, the MTP
        pattern's layers and a final norm, once per depth, or once in all with
        mtp_use_repeated_layer. ``ValueError`` without a hybrid layer pattern, or for a layer
        symbol whose parameters are not counted here (gated delta net, DSA, MLA).
        """
        m = self.model
        if m.hybrid_layer_pattern is None:
            raise ValueError(
                "hybrid_state_elements counts a hybrid model (hybrid_layer_pattern); this model "
                "has none."
            )
        parsed = parse_hybrid_pattern(m.hybrid_layer_pattern)
        h, vocab = m.hidden_size, self.padded_vocab(1)
        elements = vocab * h + self._norm_params()
        if not m.share_embeddings_and_output_weights:
            elements += vocab * h
        elements += sum(self._hybrid_layer_elements(symbol) for symbol in parsed.main)
        if parsed.mtp_depths:
            block = 3 * self._norm_params() + 2 * h * h
            block += sum(self._hybrid_layer_elements(symbol) for symbol in parsed.mtp)
            elements += block * (1 if m.mtp_use_repeated_layer else parsed.mtp_depths)
        return elements

    def _hybrid_layer_elements(self, symbol: str) -> int:
        """Elements of one hybrid layer, by its pattern symbol, with its pre-norm.

        ``M``: MambaMixer's in_proj (h to z and x of d_inner = heads x head_dim, B and C of
        groups x state, dt per head), the depthwise conv1d over x, B and C (kernel 4, with
        bias), dt_bias, A_log and D per head, the gated norm over d_inner and out_proj. ``*``:
        QKV and the output projection. ``-``: the dense MLP. ``E``: the router, its expert
        bias with moe_router_enable_expert_bias, the latent down- and up-projections with
        moe_latent_size, the routed experts (over the latent width when there is one) and the
        shared experts. Biases with add_bias_linear.
        """
        m = self.model
        h, bias = m.hidden_size, 1 if m.add_bias_linear else 0
        norm = self._norm_params()
        if symbol == MAMBA:
            heads = m.mamba_num_heads or 2 * h // m.mamba_head_dim
            d_inner = heads * m.mamba_head_dim
            conv_channels = d_inner + 2 * m.mamba_num_groups * m.mamba_state_dim
            in_proj = h * (d_inner + conv_channels + heads)
            conv = conv_channels * (MAMBA_CONV_KERNEL + 1)
            return norm + in_proj + conv + 3 * heads + d_inner + d_inner * h
        if symbol == ATTENTION:
            q, kv = self.query_width, self.kv_width
            return norm + (q + 2 * kv) * (h + bias) + q * h + bias * h
        if symbol == MLP:
            return norm + self._mlp_elements(h, m.ffn_size, bias)
        if symbol == MOE:
            experts = m.num_moe_experts or 0
            width = m.moe_ffn_hidden_size or m.ffn_size
            router = experts * h + (experts if m.moe_router_enable_expert_bias else 0)
            latent = m.moe_latent_size
            routed_in = latent or h
            projections = 2 * h * latent if latent else 0
            routed = experts * self._mlp_elements(routed_in, width, bias)
            shared = m.moe_shared_expert_intermediate_size or 0
            shared_elements = self._mlp_elements(h, shared, bias) if shared else 0
            return norm + router + projections + routed + shared_elements
        raise ValueError(
            f"hybrid layer symbol {symbol!r}: its parameters are not counted here (Mamba 'M', "
            "attention '*', MLP '-' and MoE 'E' are)."
        )

    def _mlp_elements(self, width_in: int, width: int, bias: int) -> int:
        """An MLP from ``width_in`` through ``width`` and back: fc1 (two halves when gated) and
        fc2, with biases when ``bias``."""
        fc1 = width * (self._mlp_matrices - 1) * (width_in + bias)
        return fc1 + width * width_in + bias * width_in
