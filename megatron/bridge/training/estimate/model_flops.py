"""Training FLOPs per token of a model's layers: upstream's definition of "Model TFLOP/s/GPU".

:class:`ModelFlops` counts what upstream Megatron-Bridge's ``training/utils/flop_utils.py``
``num_floating_point_operations`` counts (``transformer_flops`` for a transformer, its
dsv4_hybrid branch for DeepSeek-V4's attention, ``hybrid_flops`` for a model with a hybrid
layer pattern), at a fixed sequence length, per layer kind: attention (GQA/MHA, MLA, sliding
windows, DeepSeek-V4), core attention, dense and MoE MLPs, Mamba, gated delta nets, MTP layers
and the output layer; and the forward FLOPs selective recompute runs again.

Upstream counts the FLOPs of a batch, every term a multiple of batch x seq_length tokens; each
method here is that figure divided by the tokens. A GEMM of (m x k) by (k x n) costs 2 m k n
FLOPs and the backward pass twice the forward, hence the factor 3 x 2 = 6 per weight and token.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron.bridge.training.estimate.hybrid_pattern import (
    ATTENTION,
    GATED_DELTA_NET,
    GDN,
    MAMBA,
    MLP,
    MOE,
    parse_hybrid_pattern,
)
from megatron.bridge.training.estimate.model_shape import CSA_RATIO, HCA_RATIO, ModelShape

__all__ = ["ModelFlops", "window_context", "window_keys"]


def window_keys(window_size: tuple[int, int], seq_length: int) -> int:
    """Keys one query's kernel call sees in a sliding window: left + right + 1, at most the
    sequence."""
    left, right = window_size
    return min(seq_length, left + right + 1)


def window_context(window_size: tuple[int, int], seq_length: int) -> float:
    """Mean keys a query attends to in a causal sliding window, over the sequence.

    Upstream ``calculate_swa_context``: a (left, right) window covers left + right + 1 tokens
    W; W - W (W - 1) / 2s when W < s, else s / 2 (the causal half).
    """
    window = window_keys(window_size, seq_length)
    return (
        window - window * (window - 1) / (2 * seq_length) if window < seq_length else seq_length / 2
    )


@dataclass(frozen=True)
class ModelFlops(ModelShape):
    """Training FLOPs per token of a model, read from its description."""

    def _window_context(self) -> float:
        """Mean keys a query attends to in the model's sliding window (:func:`window_context`)."""
        return window_context(self.model.window_size, self.model.seq_length)

    def _attention_layer_flops(self, index: int) -> float:
        """Training FLOPs per token of the attention block of transformer layer ``index``.

        Upstream ``transformer_flops``. MLA: the query projection (down to q_lora_rank, its
        norm, and up; or one full-rank projection), the key/value down-projection to
        kv_lora_rank with its norm and up-projection, the rotary key projection, the output
        projection, and causal core attention over qk_head_dim + qk_pos_emb_head_dim (QK^T) and
        v_head_dim (AV). Otherwise: Q, K, V (GQA: groups x head_dim), the output gate (a
        query-width projection) when attention_output_gate, the output projection, and core
        attention over the causal half of the sequence or the sliding window's mean context.
        """
        m = self.model
        h, n = m.hidden_size, m.num_attention_heads
        if self.dsv4_hybrid:
            return 6 * self._dsv4_projection_weights(index) + self._core_flops(index)
        if m.multi_latent_attention:
            # The down-projections (none for full-rank queries), the up-projections with their
            # latent norms, the rotary key projection and the output projection.
            down = (m.q_lora_rank or 0) * h + m.kv_lora_rank * h + h * m.qk_pos_emb_head_dim
            up = self._mla_up_projection_weights()
            return 6 * (down + up + n * m.v_head_dim * h) + self._core_flops(index)
        q, kv = self.query_width, self.kv_width
        gate = q if m.attention_output_gate else 0
        projections = h * (q + 2 * kv + gate) + q * h
        return 6 * projections + self._core_flops(index)

    def _mla_up_projection_weights(self) -> int:
        """Weights per token of MLA's up-projections (the FLOPs are 6 x these per token).

        The query up-projection from q_lora_rank with its norm (the + 1), or the full-rank query
        projection without a q_lora_rank, and the key/value up-projection from kv_lora_rank
        with its norm: what megatron-core's ``MLASelfAttention.qkv_up_proj_and_rope_apply``
        (multi_latent_attention.py) runs. 0 without multi_latent_attention.
        """
        m = self.model
        if not m.multi_latent_attention:
            return 0
        h, n = m.hidden_size, m.num_attention_heads
        qk = m.qk_head_dim + m.qk_pos_emb_head_dim
        q_up = h * n * qk if m.q_lora_rank is None else m.q_lora_rank * (n * qk + 1)
        if self.dsv4_hybrid:
            return q_up  # one key/value head projected straight from the hidden state
        return q_up + m.kv_lora_rank * (n * (m.qk_head_dim + m.v_head_dim) + 1)

    def _core_flops(self, index: int | None) -> float:
        """Training FLOPs per token of core attention (softmax(QK^T)V) in layer ``index``
        (None: an MTP layer, never windowed).

        MLA: the causal half over qk_head_dim + qk_pos_emb_head_dim (QK^T) and v_head_dim (AV);
        otherwise the query width over the causal half of the sequence, or over the sliding
        window's mean context (upstream ``transformer_flops`` and ``hybrid_flops``).
        """
        m = self.model
        s = m.seq_length
        if self.dsv4_hybrid:
            return self._dsv4_core_flops(index)
        if m.multi_latent_attention:
            n = m.num_attention_heads
            return 6 * (
                s * n * (m.qk_head_dim + m.qk_pos_emb_head_dim) / 2 + s * n * m.v_head_dim / 2
            )
        window = index is not None and self.model.uses_window(index)
        return 6 * self.query_width * (2 * self._window_context() if window else s)

    def _mlp_layer_flops(self, moe: bool) -> float:
        return self.moe_mlp_flops_per_token() if moe else self.dense_mlp_flops_per_token()

    def attention_flops_per_token(self) -> float:
        """Training FLOPs per token of the mean decoder layer's token mixer.

        A transformer's attention block (MLA or GQA, sliding windows averaged over the layers);
        a hybrid model's attention, Mamba and gated-delta-net layers summed and spread over all
        its layers. MTP layers are :meth:`mtp_flops_per_token`'s.
        """
        self._check_attention_variant()
        layers = self.model.num_layers
        if self.model.hybrid_layer_pattern is not None:
            main = parse_hybrid_pattern(self.model.hybrid_layer_pattern).main
            mixers = sum(
                self._hybrid_layer_flops(symbol, number)
                for number, symbol in enumerate(main, start=1)
                if symbol not in (MLP, MOE)
            )
            return mixers / layers
        return sum(self._attention_layer_flops(i) for i in range(layers)) / layers

    def core_attention_flops_per_token(self) -> float:
        """Training FLOPs per token of the mean decoder layer's core attention: the part of
        :meth:`attention_flops_per_token` that attention kernels run, not GEMMs (a hybrid
        model's attention layers spread over all its layers)."""
        return sum(self._core_flops(i) for i in self._attention_layers()) / self.model.num_layers

    def _attention_layers(self) -> list[int]:
        """Indices of the decoder layers with core attention: every layer, or a hybrid layer
        pattern's attention layers."""
        self._check_attention_variant()
        if self.model.hybrid_layer_pattern is not None:
            main = parse_hybrid_pattern(self.model.hybrid_layer_pattern).main
            return [i for i, symbol in enumerate(main) if symbol == ATTENTION]
        return list(range(self.model.num_layers))

    def core_attention_by_keys(self) -> dict[int, float]:
        """:meth:`core_attention_flops_per_token` split by the keys a query's kernel call sees:
        the sequence length for full layers (and MTP's), the window (left + right + 1, at most
        the sequence) for sliding-window layers."""
        layers = self.model.num_layers
        s = self.model.seq_length
        out: dict[int, float] = {}
        for i in self._attention_layers():
            keys = s
            if self.model.window_size is not None and self.model.uses_window(i):
                keys = window_keys(self.model.window_size, s)
            out[keys] = out.get(keys, 0.0) + self._core_flops(i) / layers
        return out

    def _scan_flops(self) -> float:
        """Training FLOPs per token of one Mamba layer's selective scan: 3 x 7 x d_inner x state
        (upstream ``hybrid_flops``; d_inner = 2h)."""
        return 3 * 7 * 2 * self.model.hidden_size * self.model.mamba_state_dim

    def scan_flops_per_token(self) -> float:
        """Training FLOPs per token of the mean decoder layer's Mamba scans: the part of a hybrid
        model's mixers that the SSM kernels run, not the linear layers' GEMMs (0 without a
        hybrid layer pattern)."""
        _, mamba, _, _ = self._layer_counts()
        return mamba * self._scan_flops() / self.model.num_layers if mamba else 0.0

    def dense_mlp_flops_per_token(self) -> float:
        """Training FLOPs of one dense MLP per token: 6 x h x ffn x (3 gated, else 2)."""
        return 6 * self.model.hidden_size * self.model.ffn_size * self._mlp_matrices

    def moe_mlp_flops_per_token(self) -> float:
        """Training FLOPs of one MoE MLP per token: the top-k routed experts and the shared ones.

        6 x h x (moe_ffn x topk + shared) x (3 gated, else 2). With moe_latent_size L the
        routed experts compute in L wide: 6 x (L x moe_ffn x topk x (3 or 2) + 2 x h x L), the
        second term the down- and up-projection around them (upstream ``transformer_flops``).
        The router GEMM is not counted, as upstream does not. 0 for a model without MoE layers.
        """
        m = self.model
        if not m.moe and self.num_moe_layers == 0:
            return 0.0
        h, factor = m.hidden_size, self._mlp_matrices
        routed = (m.moe_ffn_hidden_size or m.ffn_size) * m.moe_router_topk * factor
        if m.moe_latent_size is not None:
            routed = routed * m.moe_latent_size / h + 2 * m.moe_latent_size
        return 6 * h * routed + self.shared_expert_flops_per_token()

    def shared_expert_flops_per_token(self) -> float:
        """Training FLOPs per token of one MoE layer's shared experts: 6 x h x
        moe_shared_expert_intermediate_size x (3 gated, else 2); 0 without shared experts."""
        m = self.model
        return 6 * m.hidden_size * (m.moe_shared_expert_intermediate_size or 0) * self._mlp_matrices

    def logit_flops_per_token(self, tp_size: int = 1) -> float:
        """Training FLOPs of the output layer per token: 6 x h x padded vocabulary.

        The main head only; each MTP layer's head is :meth:`mtp_flops_per_token`'s.
        """
        return 6 * self.model.hidden_size * self.padded_vocab(tp_size)

    def decoder_flops_per_token(self) -> float:
        """Training FLOPs per token of the decoder layers (no MTP layer, no logits)."""
        self._check_attention_variant()
        if self.model.hybrid_layer_pattern is not None:
            main = parse_hybrid_pattern(self.model.hybrid_layer_pattern).main
            return sum(self._hybrid_layer_flops(sym, n) for n, sym in enumerate(main, start=1))
        pattern = self.model.moe_layer_pattern
        return sum(
            self._attention_layer_flops(i) + self._mlp_layer_flops(bool(pattern[i]))
            for i in range(self.model.num_layers)
        )

    def layer_gemm_flops_per_token(self, index: int) -> float:
        """Training FLOPs per token of decoder layer ``index`` (0-based) that its linear layers
        run: the layer's FLOPs less its core attention and Mamba scan (the kernels
        :meth:`core_attention_flops_per_token` and :meth:`scan_flops_per_token` count)."""
        self._check_attention_variant()
        if self.model.hybrid_layer_pattern is not None:
            symbol = parse_hybrid_pattern(self.model.hybrid_layer_pattern).main[index]
            flops = self._hybrid_layer_flops(symbol, index + 1)
            if symbol == ATTENTION:
                return flops - self._core_flops(index)
            if symbol == MAMBA:
                return flops - self._scan_flops()
            return flops
        moe = bool(self.model.moe_layer_pattern[index])
        return (
            self._attention_layer_flops(index)
            + self._mlp_layer_flops(moe)
            - self._core_flops(index)
        )

    def layer_flops_per_token(self) -> float:
        """Training FLOPs per token of the mean decoder layer (:meth:`decoder_flops_per_token`
        over num_layers)."""
        return self.decoder_flops_per_token() / self.model.num_layers

    def mtp_flops_per_token(self, tp_size: int = 1) -> float:
        """Training FLOPs per token the multi-token-prediction layers add.

        Upstream ``transformer_flops``: each MTP layer is one more transformer layer whose MLP
        is MoE when the last decoder layer's is, plus its norms (3 h) and the h x 2h projection
        of the concatenated embedding and hidden state, plus one more output head. Upstream
        ``hybrid_flops``: the pattern's MTP layers and one output head per MTP layer.
        """
        self._check_attention_variant()
        mtp, h = self.mtp_layers, self.model.hidden_size
        if self.model.hybrid_layer_pattern is not None:
            parsed = parse_hybrid_pattern(self.model.hybrid_layer_pattern)
            layers = parsed.mtp_depths * sum(
                self._hybrid_layer_flops(symbol, None) for symbol in parsed.mtp
            )
            return layers + mtp * self.logit_flops_per_token(tp_size)
        if mtp == 0:
            return 0.0
        last_is_moe = bool(self.model.moe_layer_pattern[-1])
        layers = sum(
            self._attention_layer_flops(i) + self._mlp_layer_flops(last_is_moe)
            for i in range(self.model.num_layers, self.model.num_layers + mtp)
        )
        return layers + 6 * mtp * (3 * h + 2 * h * h) + mtp * self.logit_flops_per_token(tp_size)

    def flops_per_token(self, tp_size: int = 1) -> float:
        """Model FLOPs per token of one training step (forward + backward), recompute excluded.

        The definition behind Megatron-Bridge's "Model TFLOP/s/GPU": upstream
        ``src/megatron/bridge/training/utils/flop_utils.py`` ``num_floating_point_operations``
        divided by the batch's tokens: the decoder layers (:meth:`decoder_flops_per_token`),
        the multi-token-prediction layers (:meth:`mtp_flops_per_token`) and the output layer
        over the vocabulary padded for ``tp_size`` (:meth:`logit_flops_per_token`). Norms,
        softmax, activations, the router and the loss are not counted; nor are recomputed
        forward passes (the step counts them apart: ``Stage.recompute_flops_per_token``).
        """
        return (
            self.decoder_flops_per_token()
            + self.mtp_flops_per_token(tp_size)
            + self.logit_flops_per_token(tp_size)
        )

    # DeepSeek-V4 hybrid attention (upstream ``transformer_flops``, its dsv4_hybrid branch).
    #
    # Every layer projects queries through q_lora_rank (with its norm), one key/value head of
    # v_head_dim straight from the hidden state (with its norm), and the output through a
    # grouped low-rank projection: heads x v_head_dim -> o_lora_rank, then o_groups x
    # o_lora_rank -> hidden. Its core attention depends on the layer's compression ratio
    # (csa_compress_ratios, decoder then MTP layers): 0 attends over the sliding window
    # (csa_window_size) alone; 128 adds the keys compressed 128-fold, a compressor projection
    # (hidden -> v_head_dim) and a core term growing with the sequence (heads x v_head_dim / 128
    # per key); 4 adds the top-k of the keys compressed 4-fold that the DSA indexer picks, a
    # compressor projection (hidden -> 2 v_head_dim), the indexer's projections and its dense
    # scoring over the compressed keys. Each is a forward multiply-add count per token; training
    # FLOPs are 3 x 2 times it.

    def _dsv4_ratio(self, index: int | None) -> int:
        """The compression ratio of layer ``index`` (decoder then MTP layers)."""
        return self.model.csa_compress_ratios[index]

    def _dsv4_projection_weights(self, index: int) -> float:
        """Forward multiply-adds per token of layer ``index``'s attention GEMMs: the query,
        key/value and grouped output projections, the compressor and the DSA indexer's."""
        m = self.model
        h, n, v = m.hidden_size, m.num_attention_heads, m.v_head_dim
        q = m.q_lora_rank * (h + n * (m.qk_head_dim + m.qk_pos_emb_head_dim) + 1)
        kv = h * v + v
        out = n * v * m.o_lora_rank + m.o_groups * m.o_lora_rank * h
        ratio = self._dsv4_ratio(index)
        if ratio == HCA_RATIO:
            return q + kv + out + 2 * h * v
        if ratio == CSA_RATIO:
            heads, dim = m.dsa_indexer_n_heads, m.dsa_indexer_head_dim
            indexer = 2 * h * 2 * dim + m.q_lora_rank * heads * dim + h * heads
            return q + kv + out + 2 * h * 2 * v + indexer
        return q + kv + out

    def _dsv4_unquantized_weights(self, index: int) -> float:
        """Forward multiply-adds per token of the part of :meth:`_dsv4_projection_weights` that
        runs in 16 bits whatever the FP8/FP4 recipe: the grouped output projection's first half
        (heads x v_head_dim -> o_lora_rank per group, a ``torch.einsum`` over a plain parameter:
        megatron-core ``deepseek_v4_hybrid_attention.py``), the compressors' projections
        (``csa.py`` ``Compressor._forward_sbhd``, under ``get_fp8_disabled_context``) and the
        DSA indexer's head-weight projection (``CSAIndexer``'s ``linear_weights_proj``, the
        same)."""
        m = self.model
        h, v = m.hidden_size, m.v_head_dim
        grouped_out = m.num_attention_heads * v * m.o_lora_rank
        ratio = self._dsv4_ratio(index)
        if ratio == HCA_RATIO:
            return grouped_out + 2 * h * v
        if ratio == CSA_RATIO:
            indexer = 2 * h * 2 * m.dsa_indexer_head_dim + h * m.dsa_indexer_n_heads
            return grouped_out + 2 * h * 2 * v + indexer
        return grouped_out

    def unquantized_gemm_flops_per_token(self, index: int) -> float:
        """Training FLOPs per token of layer ``index``'s linear layers (decoder then MTP layers,
        0-based) that megatron-core runs in 16 bits under any FP8/FP4 recipe: DeepSeek-V4's
        (:meth:`_dsv4_unquantized_weights`); 0 for every other model."""
        if not self.dsv4_hybrid:
            return 0.0
        return 6 * self._dsv4_unquantized_weights(index)

    def _dsv4_core_flops(self, index: int | None) -> float:
        """Training FLOPs per token of layer ``index``'s sparse attention: the sliding window,
        the compressed keys it attends to (ratio 4: the indexer's top-k, at most a quarter of
        the sequence, averaged over the causal positions; ratio 128: every compressed key) and
        the indexer's dense scoring (ratio 4)."""
        m = self.model
        s, n, v, window = m.seq_length, m.num_attention_heads, m.v_head_dim, m.csa_window_size
        ratio = self._dsv4_ratio(index)
        if ratio == HCA_RATIO:
            return 6 * (2 * n * window * v + s * n * v / HCA_RATIO)
        if ratio == CSA_RATIO:
            topk = min(m.dsa_indexer_topk, s // CSA_RATIO)
            compressed = topk * (1 - topk * CSA_RATIO / (2 * s))
            scoring = s * m.dsa_indexer_n_heads * m.dsa_indexer_head_dim / CSA_RATIO
            return 6 * (2 * n * (window + compressed) * v + scoring)
        return 6 * 2 * n * window * v

    # Hybrid models (upstream ``hybrid_flops``).

    def _hybrid_layer_flops(self, symbol: str, number: int | None) -> float:
        """Training FLOPs per token of one hybrid layer, by its pattern symbol.

        ``number`` is the layer's 1-based place in the main pattern (None for an MTP layer),
        which decides whether an attention layer uses the sliding window. Upstream's
        ``hybrid_flops`` counts Mamba, attention, MLP, MoE and gated-delta-net layers; it
        counts nothing for the MLA (``+``) and DSA (``D``) symbols, and neither does this.
        """
        m = self.model
        h = m.hidden_size
        if symbol == ATTENTION:
            q, kv = self.query_width, self.kv_width
            return 3 * 4 * (q * h + kv * h) + self._core_flops(
                None if number is None else number - 1
            )
        if symbol == MAMBA:
            # d_inner = 2h (megatron-core's MambaMixer expand=2); 7 d_inner x state for the scan.
            d_in = 2 * h
            heads = m.mamba_num_heads or d_in // m.mamba_head_dim
            in_proj = 2 * h * (2 * d_in + 2 * m.mamba_num_groups * m.mamba_state_dim + heads)
            return 3 * (in_proj + 2 * d_in * h) + self._scan_flops()
        if symbol == GDN:
            # megatron-core's TransformerConfig defaults for the gated delta net (linear_*).
            gdn = GATED_DELTA_NET
            qk, v = gdn.key_width, gdn.value_width
            heads, kernel = gdn.linear_num_value_heads, gdn.linear_conv_kernel_dim
            fwd = h * (2 * qk + 2 * v + 2 * heads) + kernel * (2 * qk + v)
            fwd += heads * gdn.linear_value_head_dim**2 * 4 + h * v
            return 3 * 2 * fwd
        if symbol == MLP:
            return self.dense_mlp_flops_per_token()
        if symbol == MOE:
            return self.moe_mlp_flops_per_token()
        return 0.0

    # megatron-core's selective recompute (recompute_granularity="selective") drops a module's
    # forward outputs and runs its forward again in the backward, once per forward. Each module
    # name (TransformerConfig.recompute_modules) re-executes the forward third of one piece of
    # the layer's training FLOPs.

    def recompute_flops_per_token(self, module: str) -> float:
        """Forward FLOPs per token of the mean decoder layer that selective recompute of
        ``module`` (a TransformerConfig.recompute_modules name) executes again.

        ``core_attn``: core attention (attention.py ``_checkpointed_attention_forward``).
        ``mla_up_proj``: MLA's up-projections (multi_latent_attention.py
        ``qkv_up_proj_and_rope_apply``). ``mlp``: the dense MLP of a dense layer
        (transformer_layer.py ``recompute_mlp``, not on MoE layers). ``moe``: the whole MoE
        layer (moe_layer.py ``moe_layer_recompute``). ``shared_experts``: the shared experts
        (moe_layer.py ``shared_experts_recompute``). ``layernorm``, ``moe_act`` and
        ``gdn_norm_out`` recompute no GEMM: 0. Each is the forward third of the training
        FLOPs that :meth:`decoder_flops_per_token` counts for it, spread over num_layers.
        """
        self._check_attention_variant()
        attention, _, dense, moe = self._layer_counts()
        training = {
            "core_attn": self.core_attention_flops_per_token() * self.model.num_layers,
            "mla_up_proj": 6 * self._mla_up_projection_weights() * attention,
            "mlp": self.dense_mlp_flops_per_token() * dense,
            "moe": self.moe_mlp_flops_per_token() * moe,
            "shared_experts": self.shared_expert_flops_per_token() * moe,
        }.get(module, 0.0)
        return training / 3 / self.model.num_layers
