"""FLOPs, memory-bound bytes and parameters of a model, read from its :class:`ModelDescription`.

:class:`ModelCost` owns the per-token FLOPs definition behind "Model TFLOP/s/GPU" (upstream
Megatron-Bridge's ``training/utils/flop_utils.py`` ``num_floating_point_operations``, for
transformers and hybrid Mamba models), the bytes per token its layers' memory-bound kernels move
(:meth:`ModelCost.elementwise_bytes_per_token`) and the parameters one GPU holds of a layer, the
embedding and the output layer; it knows nothing of the step, the pipeline stage or the links.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from megatron.bridge.training.job import ModelDescription
from megatron.bridge.training.megatron_core_support import DSV4_HYBRID
from megatron.bridge.training.model_rules import check_moe_layer_pattern

__all__ = ["HybridPattern", "ModelCost", "parse_hybrid_pattern"]


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
        check_moe_layer_pattern(self.model)

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
        """MoE layers of the decoder (MTP layers excluded): from moe_layer_freq, or the ``E``
        symbols of a hybrid model's pattern; 0 for a dense model."""
        if self.model.hybrid_layer_pattern is not None:
            return parse_hybrid_pattern(self.model.hybrid_layer_pattern).main.count(_MOE)
        return sum(self.model.moe_layer_pattern) if self.model.moe else 0

    @property
    def num_mamba_layers(self) -> int:
        """Mamba layers of the decoder: the ``M`` symbols of a hybrid model's pattern (0 for a
        transformer)."""
        return self._layer_counts()[1]

    @property
    def mtp_layers(self) -> int:
        """Multi-token-prediction layers: mtp_num_layers, or for a hybrid model that leaves it
        unset, the MTP depths its pattern spells (upstream's ``num_floating_point_operations``)."""
        if self.model.mtp_num_layers is not None:
            return self.model.mtp_num_layers
        if self.model.hybrid_layer_pattern is not None:
            return parse_hybrid_pattern(self.model.hybrid_layer_pattern).mtp_depths
        return 0

    def padded_vocab(self, tp_size: int) -> int:
        """The vocabulary megatron-core allocates: padded to make_vocab_size_divisible_by x TP."""
        multiple = self.model.make_vocab_size_divisible_by * tp_size
        return math.ceil(self.model.vocab_size / multiple) * multiple

    @property
    def _mlp_matrices(self) -> int:
        return 3 if self.model.gated_linear_unit else 2

    # --- FLOPs -------------------------------------------------------------------------------
    #
    # Upstream's definition: Megatron-Bridge ``src/megatron/bridge/training/utils/flop_utils.py``
    # ``num_floating_point_operations`` (``transformer_flops`` for a transformer,
    # ``hybrid_flops`` for a model with a hybrid layer pattern), at a fixed sequence length.
    # Upstream counts the FLOPs of a batch, every term a multiple of batch x seq_length tokens;
    # each method here is that figure divided by the tokens. A GEMM of (m x k) by (k x n) costs
    # 2 m k n FLOPs and the backward pass twice the forward, hence the factor 3 x 2 = 6 per
    # weight and token.

    def _uses_window(self, index: int) -> bool:
        """Whether layer ``index`` (0-based, decoder then MTP layers) uses the sliding window.

        Upstream ``transformer_flops``: every layer when window_attn_skip_freq is None; with an
        int N every layer but each N-th; with the list form, the entries that are 1.
        """
        if self.model.window_size is None:
            return False
        skip = self.model.window_attn_skip_freq
        if skip is None:
            return True
        if isinstance(skip, int):
            return (index + 1) % skip != 0
        return index < len(skip) and bool(skip[index])

    def _window_context(self) -> float:
        """Mean keys a query attends to in a causal sliding window, over the sequence.

        Upstream ``calculate_swa_context``: a (left, right) window covers left + right + 1
        tokens W; W - W (W - 1) / 2s when W < s, else s / 2 (the causal half).
        """
        left, right = self.model.window_size
        window, s = left + right + 1, self.model.seq_length
        return window - window * (window - 1) / (2 * s) if window < s else s / 2

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
        window = index is not None and self._uses_window(index)
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
                if symbol not in (_MLP, _MOE)
            )
            return mixers / layers
        return sum(self._attention_layer_flops(i) for i in range(layers)) / layers

    def core_attention_flops_per_token(self) -> float:
        """Training FLOPs per token of the mean decoder layer's core attention: the part of
        :meth:`attention_flops_per_token` that attention kernels run, not GEMMs (a hybrid
        model's attention layers spread over all its layers)."""
        self._check_attention_variant()
        layers = self.model.num_layers
        if self.model.hybrid_layer_pattern is not None:
            main = parse_hybrid_pattern(self.model.hybrid_layer_pattern).main
            indices = [i for i, symbol in enumerate(main) if symbol == _ATTENTION]
        else:
            indices = list(range(layers))
        return sum(self._core_flops(i) for i in indices) / layers

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
            if symbol == _ATTENTION:
                return flops - self._core_flops(index)
            if symbol == _MAMBA:
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

    def _check_attention_variant(self) -> None:
        variant = self.model.experimental_attention_variant
        if variant == _DSV4_HYBRID and self.model.hybrid_layer_pattern is None:
            self._check_dsv4_fields()
            return
        if variant is not None and self.model.hybrid_layer_pattern is None:
            raise ValueError(
                f"The FLOPs of experimental_attention_variant={variant!r} need settings the job "
                "description does not hold (the gated delta net's head dimensions, the DSA "
                "indexer's loss); the estimate covers MLA, DeepSeek-V4's dsv4_hybrid, GQA/MHA, "
                "sliding windows and hybrid layer patterns. Leave the variant unset to count "
                "the layers as the plain attention they replace."
            )

    # --- DeepSeek-V4 hybrid attention (upstream ``transformer_flops``, its dsv4_hybrid branch) --
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

    @property
    def dsv4_hybrid(self) -> bool:
        """Whether the model runs DeepSeek-V4's hybrid attention (the variant on a transformer,
        not inside a hybrid layer pattern)."""
        return (
            self.model.experimental_attention_variant == _DSV4_HYBRID
            and self.model.hybrid_layer_pattern is None
        )

    def _check_dsv4_fields(self) -> None:
        """``ValueError`` naming the field when a DeepSeek-V4 attention field the FLOPs read is
        missing or out of range (upstream raises for the same ones)."""
        m = self.model
        if not m.multi_latent_attention:
            raise ValueError(
                f"experimental_attention_variant={_DSV4_HYBRID!r} is a multi-latent attention "
                "variant: set multi_latent_attention=True (--multi-latent-attention)."
            )
        for name in ("q_lora_rank", "o_lora_rank", "csa_compress_ratios"):
            if getattr(m, name) is None:
                raise ValueError(
                    f"experimental_attention_variant={_DSV4_HYBRID!r} needs {name}; set it in "
                    "the job description."
                )
        ratios = m.csa_compress_ratios
        expected = m.num_layers + self.mtp_layers
        if len(ratios) != expected:
            raise ValueError(
                f"csa_compress_ratios has {len(ratios)} entries; it needs one per layer, "
                f"num_layers + MTP layers = {expected}."
            )
        unknown = sorted(set(ratios) - set(_DSV4_RATIOS))
        if unknown:
            raise ValueError(
                f"csa_compress_ratios holds {unknown}; each entry is one of {list(_DSV4_RATIOS)}."
            )
        if _CSA in ratios:
            for name in ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk"):
                if getattr(m, name) is None:
                    raise ValueError(
                        f"csa_compress_ratios has ratio-{_CSA} layers, which run the DSA "
                        f"indexer: set {name}."
                    )

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
        if ratio == _HCA:
            return q + kv + out + 2 * h * v
        if ratio == _CSA:
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
        if ratio == _HCA:
            return grouped_out + 2 * h * v
        if ratio == _CSA:
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
        if ratio == _HCA:
            return 6 * (2 * n * window * v + s * n * v / _HCA)
        if ratio == _CSA:
            topk = min(m.dsa_indexer_topk, s // _CSA)
            compressed = topk * (1 - topk * _CSA / (2 * s))
            scoring = s * m.dsa_indexer_n_heads * m.dsa_indexer_head_dim / _CSA
            return 6 * (2 * n * (window + compressed) * v + scoring)
        return 6 * 2 * n * window * v

    # --- hybrid models (upstream ``hybrid_flops``) ---------------------------------------------

    def _hybrid_layer_flops(self, symbol: str, number: int | None) -> float:
        """Training FLOPs per token of one hybrid layer, by its pattern symbol.

        ``number`` is the layer's 1-based place in the main pattern (None for an MTP layer),
        which decides whether an attention layer uses the sliding window. Upstream's
        ``hybrid_flops`` counts Mamba, attention, MLP, MoE and gated-delta-net layers; it
        counts nothing for the MLA (``+``) and DSA (``D``) symbols, and neither does this.
        """
        m = self.model
        h = m.hidden_size
        if symbol == _ATTENTION:
            q, kv = self.query_width, self.kv_width
            return 3 * 4 * (q * h + kv * h) + self._core_flops(
                None if number is None else number - 1
            )
        if symbol == _MAMBA:
            # d_inner = 2h (megatron-core's MambaMixer expand=2); 7 d_inner x state for the scan.
            d_in = 2 * h
            heads = m.mamba_num_heads or d_in // m.mamba_head_dim
            in_proj = 2 * h * (2 * d_in + 2 * m.mamba_num_groups * m.mamba_state_dim + heads)
            return 3 * (in_proj + 2 * d_in * h) + self._scan_flops()
        if symbol == _GDN:
            # megatron-core's TransformerConfig defaults for the gated delta net (linear_*).
            qk, v = _GDN_QK_HEAD_DIM * _GDN_QK_HEADS, _GDN_V_HEAD_DIM * _GDN_V_HEADS
            fwd = h * (2 * qk + 2 * v + 2 * _GDN_V_HEADS) + _GDN_CONV_KERNEL * (2 * qk + v)
            fwd += _GDN_V_HEADS * _GDN_V_HEAD_DIM**2 * 4 + h * v
            return 3 * 2 * fwd
        if symbol == _MLP:
            return self.dense_mlp_flops_per_token()
        if symbol == _MOE:
            return self.moe_mlp_flops_per_token()
        return 0.0

    # --- memory-bound (elementwise) bytes -------------------------------------------------------
    #
    # What a layer runs besides its GEMMs and core attention's math: norms, rotary embeddings,
    # the attention kernel's reads of Q, K, V and write of its output, activations, the router's
    # scores, token permutation, the Mamba conv1d and scan I/O, residual adds. These kernels are
    # bound by HBM bandwidth, not tensor cores: their cost is bytes, ~ hidden per token, where the
    # GEMMs' FLOPs grow with hidden^2. Each helper below counts one block's forward elements per
    # token (reads plus writes); activations are 16-bit (_ACTIVATION_BYTES); the backward of an
    # elementwise kernel reads the saved input and the output gradient and writes the input
    # gradient, twice the forward's traffic (_FORWARD_AND_BACKWARD = 1 + 2). Each count is an
    # _Elements: the hidden-wide tensors (norms, residual adds, MLA latents, the router and the
    # token permutation) every TP rank holds whole unless sequence parallelism splits the tokens,
    # and the head-, FFN- and channel-wide ones TP splits (megatron-core's column-parallel
    # outputs: Q, K, V, the attention output, fc1's activation, the Mamba mixer's channels).

    def _norm(self) -> _Elements:
        """A block's pre-norm: reads the block input and writes the normalized copy its first
        GEMM reads (TE's LayerNormLinear / LayerNormMLP norm output, or a separate norm)."""
        return _Elements(whole=2 * self.model.hidden_size)

    def _norm_and_residual(self) -> _Elements:
        """A block's pre-norm (:meth:`_norm`) and its residual add (megatron-core's
        bias-dropout-add reads the block output and the residual and writes their sum)."""
        return self._norm() + _Elements(
            whole=_RESIDUAL_ADD_READS_AND_WRITE * self.model.hidden_size
        )

    def _attention_elements(self) -> _Elements:
        """Forward elements per token of an attention block's memory-bound kernels.

        Pre-norm and residual add; rotary embedding (``apply_rotary_pos_emb``) reads and writes Q
        and K when position_embedding_type is rope, yarn or mrope; the core-attention kernel
        reads Q, K, V and writes its output; with attention_output_gate the sigmoid gate reads
        the output and the gate and writes the gated output. GQA: Q and the output are heads x
        head_dim wide, K and V groups x head_dim each. MLA: Q and K are heads x (qk_head_dim +
        qk_pos_emb_head_dim) as core attention reads them (the rotary step writes them whole:
        megatron-core's fused MLA rope kernel, or apply_rotary_pos_emb and the concatenation of
        the rotary and non-rotary parts), V and the output heads x v_head_dim; its latent norms
        (q_layernorm over q_lora_rank, kv_layernorm over kv_lora_rank) read and write their
        latents.
        """
        m = self.model
        if m.multi_latent_attention:
            # The latent norms and the rotary step run in MLA's up-projection.
            return (
                self._norm_and_residual()
                + self._mla_up_projection_elements()
                + self._core_attention_elements()
            )
        query, key, _, output = self._attention_widths()
        rotary = 2 * (query + key) if m.position_embedding_type in _ROTARY else 0
        gate = 3 * output if m.attention_output_gate else 0
        return (
            self._norm_and_residual()
            + _Elements(split=rotary + gate)
            + self._core_attention_elements()
        )

    def _attention_widths(self) -> tuple[int, int, int, int]:
        """(query, key, value, output) widths per token as core attention reads and writes them:
        GQA's heads x head_dim and groups x head_dim; MLA's heads x (qk_head_dim +
        qk_pos_emb_head_dim) for Q and K, heads x v_head_dim for V and the output."""
        m = self.model
        if m.multi_latent_attention:
            n = m.num_attention_heads
            qk = n * (m.qk_head_dim + m.qk_pos_emb_head_dim)
            return qk, qk, n * m.v_head_dim, n * m.v_head_dim
        return self.query_width, self.kv_width, self.kv_width, self.query_width

    def _core_attention_elements(self) -> _Elements:
        """Forward elements per token of the core-attention kernel: it reads Q, K, V and writes
        its output (:meth:`_attention_widths`)."""
        return _Elements(split=sum(self._attention_widths()))

    def _mla_up_projection_elements(self) -> _Elements:
        """Forward elements per token of MLA's up-projection step besides its GEMMs: the latent
        norms (q_layernorm over q_lora_rank, kv_layernorm over kv_lora_rank) read and write their
        latents, and the rotary step writes Q and K whole (megatron-core's fused MLA rope kernel,
        or apply_rotary_pos_emb and the concatenation of the rotary and non-rotary parts), when
        position_embedding_type rotates. 0 without multi_latent_attention."""
        m = self.model
        if not m.multi_latent_attention:
            return _Elements()
        query, key, _, _ = self._attention_widths()
        rotary = 2 * (query + key) if m.position_embedding_type in _ROTARY else 0
        latent_norms = 2 * ((m.q_lora_rank or 0) + m.kv_lora_rank)
        return _Elements(whole=latent_norms, split=rotary)

    def _activation_elements(self, width: int) -> int:
        """The MLP activation over ``width`` (megatron-core's GLU activation, bias_swiglu /
        bias_geglu, reads both fc1 halves and writes one; a plain activation reads and writes
        one)."""
        return (3 if self.model.gated_linear_unit else 2) * width

    def _dense_mlp_elements(self) -> _Elements:
        """Forward elements per token of a dense MLP block: pre-norm, activation, residual add."""
        return self._norm_and_residual() + self._dense_activation_elements()

    def _dense_activation_elements(self) -> _Elements:
        """The dense MLP's activation over ffn_hidden_size (TP splits it)."""
        return _Elements(split=self._activation_elements(self.model.ffn_size))

    def _moe_mlp_elements(self) -> _Elements:
        """Forward elements per token of an MoE block's memory-bound kernels.

        Pre-norm; the router's scores, fp32 over the experts, read and written (4 x experts
        16-bit element-equivalents); ``moe_utils.permute`` reads the token and writes topk
        copies; each routed copy's activation over moe_ffn_hidden_size; ``moe_utils.unpermute``
        reads the topk copies and writes the combined token; the shared experts' activation;
        the residual add. With moe_latent_size the dispatcher moves latent-wide tokens (the
        latent projections run before dispatch and after combine).
        """
        return self._norm_and_residual() + self._moe_layer_elements()

    def _moe_layer_elements(self) -> _Elements:
        """Forward elements per token of megatron-core's ``MoELayer`` (moe_layer.py), the MoE
        block without its pre-norm and residual add: router scores, permute, the routed
        experts' and shared experts' activations, unpermute (:meth:`_moe_mlp_elements`)."""
        m = self.model
        k = m.moe_router_topk
        token = m.moe_latent_size or m.hidden_size
        router = 4 * (m.num_moe_experts or 0)
        permute = (1 + k) * token
        unpermute = (k + 1) * token
        return (
            _Elements(whole=router + permute + unpermute)
            + self._routed_activation_elements()
            + self._shared_activation_elements()
        )

    def _routed_activation_elements(self) -> _Elements:
        """The routed experts' activation: each of the topk copies over moe_ffn_hidden_size."""
        m = self.model
        width = m.moe_ffn_hidden_size or m.ffn_size
        return _Elements(split=m.moe_router_topk * self._activation_elements(width))

    def _shared_activation_elements(self) -> _Elements:
        """The shared experts' activation over moe_shared_expert_intermediate_size."""
        width = self.model.moe_shared_expert_intermediate_size or 0
        return _Elements(split=self._activation_elements(width))

    def _mamba_elements(self) -> _Elements:
        """Forward elements per token of a Mamba layer's memory-bound kernels (MambaMixer).

        Pre-norm; the causal conv1d over x, B and C (d_inner + 2 x groups x state) read and
        written; the scan reads x, B, C and dt (one per head) and writes y; the gated norm reads
        y and z and writes its output; the residual add. d_inner = 2h and the heads as
        :meth:`_hybrid_layer_flops` takes them.
        """
        m = self.model
        d_in = 2 * m.hidden_size
        heads = m.mamba_num_heads or d_in // m.mamba_head_dim
        bc = 2 * m.mamba_num_groups * m.mamba_state_dim
        conv = 2 * (d_in + bc)
        scan = d_in + bc + heads + d_in
        gated_norm = 3 * d_in
        return self._norm_and_residual() + _Elements(split=conv + scan + gated_norm)

    def _hyper_connection_elements(self) -> _Elements:
        """Elements per token, forward and backward together, that hyper-connections add to one
        block (attention, MLP or MoE) beyond the residual add :meth:`_norm_and_residual`
        counts; nothing without enable_hyper_connections.

        With n residual streams (num_residual_streams) of hidden width C, each block has a
        megatron-core ``HyperConnectionModule`` (transformer_layer.py
        ``HyperConnectionTransformerLayer``: self_attention_hyper_connection and
        mlp_hyper_connection). On Blackwell it runs megatron-core's fused kernels
        (``fusions/fused_mhc_kernels.py``; Megatron-Bridge's DeepSeek-V4 recipes set
        use_fused_mhc on compute capability 10), counted kernel by kernel from their loads and
        stores rather than as twice the forward:

        - forward, 4nC + 2C: ``proj_rms`` reads the n streams (nC) for the mapping projection
          and its RMS norm; ``h_aggregate`` reads them again (nC) and writes the block input
          (C); ``h_post_bda`` reads the n-stream residual (nC) and the block output (C) and
          writes the mixed streams (nC);
        - backward, 13nC + 3C: ``h_aggregate`` reads the input gradient (C) and the streams
          (nC) and writes their gradient (nC); ``h_post_bda`` reads the output gradient (nC),
          the residual (nC) and the block output (C) and writes the residual's (nC) and the
          block output's (C) gradients; ``proj_rms`` reads the streams (nC) and writes their
          gradient (nC); autograd sums the three gradients of the streams (two adds, each
          reading two and writing one: 6nC).

        That replaces the plain residual add's 3C forward and 6C backward. The mapping logits
        and Sinkhorn's n x n matrices (n^2 + 2n per token) are left out: under 0.1 % of it at
        n = 4.
        """
        m = self.model
        if not m.enable_hyper_connections:
            return _Elements()
        if m.hybrid_layer_pattern is not None:
            raise ValueError(
                "enable_hyper_connections wraps transformer layers (megatron-core's "
                "HyperConnectionTransformerLayer); a hybrid_layer_pattern model has none: set "
                "enable_hyper_connections=False or leave hybrid_layer_pattern unset."
            )
        width, streams = m.hidden_size, m.num_residual_streams * m.hidden_size
        forward = 4 * streams + 2 * width
        backward = 13 * streams + 3 * width
        residual_add = _FORWARD_AND_BACKWARD * _RESIDUAL_ADD_READS_AND_WRITE * width
        return _Elements(whole=forward + backward - residual_add)

    def elementwise_bytes_per_token(
        self, *, tp_size: int = 1, sequence_parallel: bool = False
    ) -> float:
        """Bytes per token the mean decoder layer moves through HBM in its memory-bound kernels,
        forward and backward (the backward twice the forward; hyper-connections' fused kernels
        counted kernel by kernel, :meth:`_hyper_connection_elements`), 16-bit activations, on one of
        ``tp_size`` TP ranks: TP splits the head-, FFN- and channel-wide tensors, and the
        hidden-wide ones only with ``sequence_parallel`` (without it every TP rank normalizes,
        adds and routes every token).

        A transformer layer is an attention block and a dense or MoE MLP block (by
        moe_layer_pattern); a hybrid model's attention, Mamba, MLP and MoE layers are spread over
        its layers as :meth:`decoder_flops_per_token` does (its gated-delta-net, DSA and MLA
        layers are not priced). MTP layers and the output layer are not counted.
        """
        self._check_attention_variant()
        attention, mamba, dense, moe = self._layer_counts()
        elements = (
            attention * self._attention_elements()
            + dense * self._dense_mlp_elements()
            + moe * self._moe_mlp_elements()
        )
        if mamba:
            elements += mamba * self._mamba_elements()
        streams = (attention + dense + moe) * self._hyper_connection_elements()
        return (
            _FORWARD_AND_BACKWARD * _bytes_on_rank(elements, tp_size, sequence_parallel)
            + _bytes_on_rank(streams, tp_size, sequence_parallel)
        ) / self.model.num_layers

    def _layer_counts(self) -> tuple[int, int, int, int]:
        """(attention, Mamba, dense MLP, MoE) blocks among the decoder layers: a transformer
        layer is an attention block and a dense or MoE MLP block by moe_layer_pattern; a hybrid
        model counts its pattern's attention (``*``), Mamba (``M``), MLP (``-``) and MoE (``E``)
        symbols (its gated-delta-net, DSA and MLA layers are not priced)."""
        m = self.model
        if m.hybrid_layer_pattern is not None:
            main = parse_hybrid_pattern(m.hybrid_layer_pattern).main
            return main.count(_ATTENTION), main.count(_MAMBA), main.count(_MLP), main.count(_MOE)
        moe = self.num_moe_layers
        return m.num_layers, 0, m.num_layers - moe, moe

    # --- selective recompute ------------------------------------------------------------------
    #
    # megatron-core's selective recompute (recompute_granularity="selective") drops a module's
    # forward outputs and runs its forward again in the backward, once per forward. Each module
    # name (TransformerConfig.recompute_modules) re-executes the forward third of one piece of
    # the layer's training FLOPs and moves its forward elements again.

    def _separate_norms(self) -> int:
        """Norms per decoder layer sum that run as their own module, which "layernorm" recompute
        reaches (transformer_layer.py: a norm that is an IdentityOp is not recomputed). In
        megatron-core's Transformer Engine spec (gpt_layer_specs.py) the input norm of GQA
        attention is fused into linear_qkv and a dense MLP's into linear_fc1; MLA's input norm
        (without mla_down_proj_fusion) and an MoE layer's pre-MLP norm are separate."""
        attention, _, _, moe = self._layer_counts()
        mla = self.model.multi_latent_attention and self.model.hybrid_layer_pattern is None
        return (attention if mla else 0) + moe

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

    def recompute_elementwise_bytes_per_token(
        self, module: str, *, tp_size: int = 1, sequence_parallel: bool = False
    ) -> float:
        """HBM bytes per token of the mean decoder layer that selective recompute of ``module``
        moves again in memory-bound kernels on one of ``tp_size`` TP ranks (split as
        :meth:`elementwise_bytes_per_token` splits them; forward elements only).

        ``core_attn``: the attention kernel's Q, K, V reads and output write. ``layernorm``: the
        norms that run as their own module (:meth:`_separate_norms`; transformer_layer.py
        ``recompute_input_layernorm`` / ``recompute_pre_mlp_layernorm``). ``moe_act``: the routed
        experts' activation (moe/experts.py ``activation_recompute``). ``mla_up_proj``: MLA's
        latent norms and rotary step. ``mlp``: a dense MLP with its fused pre-norm and its
        activation. ``moe``: the MoE layer's router, permutation and activations.
        ``shared_experts``: the shared experts' activation. ``gdn_norm_out``: 0 (gated-delta-net
        layers are not priced in bytes).
        """
        self._check_attention_variant()
        attention, _, dense, moe = self._layer_counts()
        elements = {
            "core_attn": attention * self._core_attention_elements(),
            "layernorm": self._separate_norms() * self._norm(),
            "moe_act": moe * self._routed_activation_elements(),
            "mla_up_proj": attention * self._mla_up_projection_elements(),
            "mlp": dense * (self._norm() + self._dense_activation_elements()),
            "moe": moe * self._moe_layer_elements(),
            "shared_experts": moe * self._shared_activation_elements(),
        }.get(module, _Elements())
        return _bytes_on_rank(elements, tp_size, sequence_parallel) / self.model.num_layers

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

    # --- layers by block, for the memory estimate -----------------------------------------------

    def layer_blocks(self) -> tuple[str, ...]:
        """The blocks of each decoder layer, one string per layer, in hybrid-pattern symbols.

        A transformer layer is its attention (``*``, or ``+`` with multi_latent_attention) and
        its MLP (``-``) or MoE (``E``) by moe_layer_pattern; a hybrid model's layer is its
        pattern symbol (megatron-core's HybridModel builds one block a layer).
        """
        m = self.model
        if m.hybrid_layer_pattern is not None:
            return tuple(parse_hybrid_pattern(m.hybrid_layer_pattern).main)
        attention = _MLA if m.multi_latent_attention else _ATTENTION
        return tuple(attention + (_MOE if moe else _MLP) for moe in m.moe_layer_pattern)

    def mtp_blocks(self) -> str:
        """The blocks of one multi-token-prediction layer: a hybrid model's MTP pattern, or a
        transformer layer whose MLP is MoE when the last decoder layer's is (megatron-core's
        ``get_gpt_mtp_block_spec`` reuses the last layer's spec); empty without MTP."""
        m = self.model
        if self.mtp_layers == 0:
            return ""
        if m.hybrid_layer_pattern is not None:
            return parse_hybrid_pattern(m.hybrid_layer_pattern).mtp or _ATTENTION + _MLP
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
        if symbol in (_ATTENTION, "D"):
            q, kv = self.query_width, self.kv_width
            qkv_bias = 1 if m.attention_bias else 0
            gate = q * h // tp if m.attention_output_gate else 0
            return norm + (q + 2 * kv) * (h + qkv_bias) // tp + q * h // tp + bias * h + gate, 0
        if symbol == _MLA:
            n, rope = m.num_attention_heads, m.qk_pos_emb_head_dim
            qk = m.qk_head_dim + rope
            if m.q_lora_rank is None:
                query = h * n * qk // tp
            else:
                query = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * qk // tp
            kv = h * (m.kv_lora_rank + rope) + m.kv_lora_rank
            kv += m.kv_lora_rank * n * (m.qk_head_dim + m.v_head_dim) // tp
            return norm + query + kv + n * m.v_head_dim * h // tp + bias * h, 0
        if symbol == _MAMBA:
            d_in = self.mamba_inner
            heads = d_in // m.mamba_head_dim
            bc = 2 * m.mamba_num_groups * m.mamba_state_dim
            in_proj = h * (2 * d_in + bc + heads) // tp
            conv = (d_in + bc) * (_MAMBA_CONV_KERNEL + 1) // tp
            return norm + in_proj + conv + 3 * heads // tp + d_in // tp + d_in * h // tp, 0
        if symbol == _GDN:
            qk, v = _GDN_QK_HEAD_DIM * _GDN_QK_HEADS, _GDN_V_HEAD_DIM * _GDN_V_HEADS
            in_proj = h * (2 * qk + 2 * v + 2 * _GDN_V_HEADS) // tp
            conv = _GDN_CONV_KERNEL * (2 * qk + v) // tp
            return norm + in_proj + conv + v * h // tp + 2 * _GDN_V_HEADS // tp, 0
        if symbol == _MLP:
            ffn = m.ffn_size
            return norm + ffn * (self._mlp_matrices - 1) * (h + bias) // tp + ffn * h // tp + (
                bias * h
            ), 0
        if symbol == _MOE:
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
        raise ValueError(
            f"unknown layer block {symbol!r}; expected one of {sorted(_LAYER_SYMBOLS)}"
        )

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

    # --- the whole hybrid model's elements ----------------------------------------------------

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
        if symbol == _MAMBA:
            heads = m.mamba_num_heads or 2 * h // m.mamba_head_dim
            d_inner = heads * m.mamba_head_dim
            conv_channels = d_inner + 2 * m.mamba_num_groups * m.mamba_state_dim
            in_proj = h * (d_inner + conv_channels + heads)
            conv = conv_channels * (_MAMBA_CONV_KERNEL + 1)
            return norm + in_proj + conv + 3 * heads + d_inner + d_inner * h
        if symbol == _ATTENTION:
            q, kv = self.query_width, self.kv_width
            return norm + (q + 2 * kv) * (h + bias) + q * h + bias * h
        if symbol == _MLP:
            return norm + self._mlp_elements(h, m.ffn_size, bias)
        if symbol == _MOE:
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


@dataclass(frozen=True)
class _Elements:
    """Forward elements per token of memory-bound kernels: ``whole`` on hidden-wide tensors
    (split over TP only with sequence parallelism), ``split`` on tensors TP splits."""

    whole: int = 0
    split: int = 0

    def __add__(self, other: _Elements) -> _Elements:
        return _Elements(self.whole + other.whole, self.split + other.split)

    def __mul__(self, count: int) -> _Elements:
        return _Elements(self.whole * count, self.split * count)

    __rmul__ = __mul__


def _bytes_on_rank(elements: _Elements, tp_size: int, sequence_parallel: bool) -> float:
    """16-bit bytes of ``elements`` on one of ``tp_size`` TP ranks: TP splits the split part,
    and the hidden-wide part only with sequence parallelism."""
    whole = elements.whole / (tp_size if sequence_parallel else 1)
    return _ACTIVATION_BYTES * (elements.split / tp_size + whole)


# Bytes of one activation element (bf16/fp16: activations stay 16-bit whatever the GEMMs'
# format), and an elementwise kernel's traffic over forward and backward, in forwards.
_ACTIVATION_BYTES = 2
_FORWARD_AND_BACKWARD = 3
# A residual add reads the block output and the residual and writes their sum, hidden-wide.
_RESIDUAL_ADD_READS_AND_WRITE = 3
# Position embeddings megatron-core applies as a rotation of Q and K (apply_rotary_pos_emb).
_ROTARY = frozenset({"rope", "yarn", "mrope"})

# DeepSeek-V4's hybrid attention: its variant name and the compression ratios upstream's
# ``transformer_flops`` knows (0: window only, 4: compressed sparse, 128: heavily compressed).
_DSV4_HYBRID = DSV4_HYBRID
_CSA, _HCA = 4, 128
_DSV4_RATIOS = (0, _CSA, _HCA)

# Layer symbols of megatron-core's hybrid pattern (``hybrid_layer_allocation.Symbols``).
_MAMBA, _GDN, _ATTENTION, _MLP, _MOE, _MLA = "M", "G", "*", "-", "E", "+"
# megatron-core MambaMixer's conv1d kernel (d_conv default 4).
_MAMBA_CONV_KERNEL = 4
_LAYER_SYMBOLS = frozenset("MG*D+-E")
_PIPE, _MTP_SEPARATOR = "|", "/"
# megatron-core's MambaMixer d_conv default: the causal conv1d's kernel width.
_MAMBA_CONV_KERNEL = 4

# Gated delta net dimensions: megatron-core TransformerConfig's linear_* defaults, which
# upstream's ``hybrid_flops`` falls back to as well.
_GDN_QK_HEAD_DIM, _GDN_V_HEAD_DIM, _GDN_QK_HEADS, _GDN_V_HEADS, _GDN_CONV_KERNEL = (
    128,
    128,
    16,
    32,
    4,
)


@dataclass(frozen=True)
class HybridPattern:
    """A hybrid layer pattern split into the decoder's layers and the MTP layers."""

    main: str
    """The decoder layers' symbols, pipe separators removed."""
    mtp: str
    """One MTP depth's symbols (empty without MTP)."""
    mtp_depths: int
    """MTP depths the pattern spells."""


@functools.lru_cache(maxsize=64)
def parse_hybrid_pattern(pattern: str) -> HybridPattern:
    """Split a hybrid layer pattern as megatron-core's ``parse_hybrid_pattern`` does.

    ``<main>/<mtp>/<mtp>...``: the main pattern may hold ``|`` stage boundaries; every MTP part
    must be the same. ``ValueError`` names the field for a symbol megatron-core does not know
    or MTP parts that differ (megatron-core refuses both).
    """
    main, *mtp_parts = pattern.split(_MTP_SEPARATOR)
    main = main.replace(_PIPE, "")
    mtp_parts = mtp_parts if any(mtp_parts) else []
    if len(set(mtp_parts)) > 1:
        raise ValueError(
            f"hybrid_layer_pattern={pattern!r}: every MTP part after '/' must be the same "
            f"pattern (megatron-core's parse_hybrid_pattern); found {sorted(set(mtp_parts))}."
        )
    mtp = mtp_parts[0] if mtp_parts else ""
    unknown = sorted(set(main + mtp) - _LAYER_SYMBOLS)
    if unknown:
        raise ValueError(
            f"hybrid_layer_pattern={pattern!r} holds {unknown}, which are not layer symbols; "
            f"use {''.join(sorted(_LAYER_SYMBOLS))} ('|' between pipeline stages, '/' before "
            "each MTP depth)."
        )
    return HybridPattern(main=main, mtp=mtp, mtp_depths=len(mtp_parts))
