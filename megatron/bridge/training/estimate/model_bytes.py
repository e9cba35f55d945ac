"""HBM bytes per token a model's memory-bound (elementwise) kernels move, by layer kind.

What a layer runs besides its GEMMs and core attention's math: norms, rotary embeddings, the
attention kernel's reads of Q, K, V and write of its output, activations, the router's scores,
token permutation, the Mamba conv1d and scan I/O, residual adds, hyper-connections. These
kernels are bound by HBM bandwidth, not tensor cores: their cost is bytes, ~ hidden per token,
where the GEMMs' FLOPs grow with hidden^2. :class:`ModelBytes` counts one block's forward
elements per token (reads plus writes); activations are 16-bit (``_ACTIVATION_BYTES``); the
backward of an elementwise kernel reads the saved input and the output gradient and writes the
input gradient, twice the forward's traffic (``_FORWARD_AND_BACKWARD`` = 1 + 2). Each count is
an ``_Elements``: the hidden-wide tensors (norms, residual adds, MLA latents, the router and the
token permutation) every TP rank holds whole unless sequence parallelism splits the tokens, and
the head-, FFN- and channel-wide ones TP splits (megatron-core's column-parallel outputs: Q, K,
V, the attention output, fc1's activation, the Mamba mixer's channels).
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron.bridge.training.estimate.model_shape import ModelShape
from megatron.bridge.training.model_rules import fused_grouped_mlp

__all__ = ["ModelBytes"]

# Bytes of one activation element (bf16/fp16: activations stay 16-bit whatever the GEMMs'
# format), and an elementwise kernel's traffic over forward and backward, in forwards.
_ACTIVATION_BYTES = 2
_FORWARD_AND_BACKWARD = 3
# A residual add reads the block output and the residual and writes their sum, hidden-wide.
_RESIDUAL_ADD_READS_AND_WRITE = 3
# Position embeddings megatron-core applies as a rotation of Q and K (apply_rotary_pos_emb).
_ROTARY = frozenset({"rope", "yarn", "mrope"})


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


@dataclass(frozen=True)
class ModelBytes(ModelShape):
    """Memory-bound bytes per token of a model's layers, read from its description."""

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

    def _unfused_grouped_experts(self) -> bool:
        """The routed experts are megatron-core's ``TEGroupedMLP`` (grouped-GEMM experts) outside
        Transformer Engine's fused grouped MLP: its bias and activation run as PyTorch kernels
        of their own."""
        m = self.model
        return bool(m.num_moe_experts and m.moe_grouped_gemm) and not fused_grouped_mlp(m)

    def _expert_bias_elements(self) -> _Elements:
        """Elements per token, forward and backward together, of the routed experts' fc2 bias
        in the grouped-GEMM experts outside the fused grouped MLP; nothing without
        add_bias_linear, without grouped-GEMM experts (``SequentialMLP`` adds each expert's bias
        in its own MLP) or with Transformer Engine's fused grouped MLP (which scales the bias
        inside its GroupedLinear).

        megatron-core's ``TEGroupedMLP`` builds fc2 with ``skip_bias_add=True`` and adds each
        expert's bias, scaled by each token's routing probability, in ``_apply_bias``
        (moe/experts.py): per local expert ``t + b * p``, then ``torch.cat`` of the experts'
        outputs, each over the hidden-wide output of every routed copy (H). Forward, 6H:
        ``b * p`` writes H, the add reads 2H and writes H, the concatenation reads H and writes
        H. Backward, 8H: the split of fc2's output gathers the experts' gradients into one tensor
        (reads H, writes H); the bias gradient ``(g * p).sum(0)`` and the probability gradient
        ``(g * b).sum(-1)`` each write a product and read it back besides reading the gradient
        (3H each).
        """
        m = self.model
        if not (m.add_bias_linear and self._unfused_grouped_experts()):
            return _Elements()
        per_copy = 6 + 8
        return _Elements(whole=per_copy * m.moe_router_topk * m.hidden_size)

    def _expert_clamp_elements(self) -> tuple[_Elements, _Elements]:
        """(forward, backward) elements per token of the clamp megatron-core applies to the
        routed experts' gated activation outside its fused kernel: nothing without
        activation_func_clamp_value or a gated unit, without grouped-GEMM experts, or with
        Transformer Engine's fused grouped MLP (whose activation op takes the clamp as its
        ``limit``, moe/experts.py ``_make_fused_ops``).

        Over each routed copy's fc1 output, two halves of W = moe_ffn_hidden_size:

        - forward: ``x_glu.clamp`` and ``x_linear.clamp`` each read and write W (4W); under
          bias_activation_fusion ``weighted_bias_quick_geglu_impl`` (fusions/fused_bias_geglu.py)
          then concatenates the clamped halves for its fused kernel (reads and writes 2W, 4W),
          where the eager ``glu`` of ``TEGroupedMLP`` (moe/experts.py) uses them as they are;
        - backward: each clamp's gradient reads the output gradient and the saved input and
          writes its gradient (6W), and the gradient of ``chunk`` gathers the two halves into
          one fc1-wide tensor (4W).
        """
        m = self.model
        clamped = m.activation_func_clamp_value is not None and m.gated_linear_unit
        if not (clamped and self._unfused_grouped_experts()):
            return _Elements(), _Elements()
        width = m.moe_router_topk * (m.moe_ffn_hidden_size or m.ffn_size)
        forward = (4 + (4 if m.bias_activation_fusion else 0)) * width
        return _Elements(split=forward), _Elements(split=10 * width)

    def _local_expert_sort_elements(self, ep_size: int) -> _Elements:
        """Forward elements per token of the all-to-all dispatcher's second permutation, which
        sorts the received tokens by local expert and restores their order before the combine
        (token_dispatcher.py ``MoEAlltoAllTokenDispatcher``, ``sort_chunks_by_idxs``, or its
        transpose under drop-and-pad): each reads and writes every routed copy (2 x topk x
        the token's width each). Nothing for another dispatcher or with one local expert per
        rank (num_moe_experts / ``ep_size``). A permutation's gradient is the inverse
        permutation, as many bytes as its forward."""
        m = self.model
        local = (m.num_moe_experts or 0) // max(1, ep_size)
        if m.moe_token_dispatcher_type != "alltoall" or local <= 1:
            return _Elements()
        return _Elements(whole=4 * m.moe_router_topk * (m.moe_latent_size or m.hidden_size))

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
        self, *, tp_size: int = 1, sequence_parallel: bool = False, ep_size: int = 1
    ) -> float:
        """Bytes per token the mean decoder layer moves through HBM in its memory-bound kernels,
        forward and backward (the backward twice the forward; hyper-connections' fused kernels,
        the experts' fc2 bias and activation clamp and the all-to-all dispatcher's sort by local
        expert counted kernel by kernel, :meth:`_hyper_connection_elements`,
        :meth:`_expert_bias_elements`, :meth:`_expert_clamp_elements`,
        :meth:`_local_expert_sort_elements` over ``ep_size``), 16-bit activations, on one of
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
        # Counted forward and backward together, kernel by kernel.
        counted = (attention + dense + moe) * self._hyper_connection_elements()
        clamp_forward, clamp_backward = self._expert_clamp_elements()
        sort = self._local_expert_sort_elements(ep_size)
        counted += moe * (self._expert_bias_elements() + clamp_forward + clamp_backward + 2 * sort)
        return (
            _FORWARD_AND_BACKWARD * _bytes_on_rank(elements, tp_size, sequence_parallel)
            + _bytes_on_rank(counted, tp_size, sequence_parallel)
        ) / self.model.num_layers

    # Selective recompute (recompute_granularity="selective") runs a module's forward again in
    # the backward, once per forward: it moves that module's forward elements again.

    def _separate_norms(self) -> int:
        """Norms per decoder layer sum that run as their own module, which "layernorm" recompute
        reaches (transformer_layer.py: a norm that is an IdentityOp is not recomputed). In
        megatron-core's Transformer Engine spec (gpt_layer_specs.py) the input norm of GQA
        attention is fused into linear_qkv and a dense MLP's into linear_fc1; MLA's input norm
        (without mla_down_proj_fusion) and an MoE layer's pre-MLP norm are separate."""
        attention, _, _, moe = self._layer_counts()
        mla = self.model.multi_latent_attention and self.model.hybrid_layer_pattern is None
        return (attention if mla else 0) + moe

    def recompute_elementwise_bytes_per_token(
        self, module: str, *, tp_size: int = 1, sequence_parallel: bool = False, ep_size: int = 1
    ) -> float:
        """HBM bytes per token of the mean decoder layer that selective recompute of ``module``
        moves again in memory-bound kernels on one of ``tp_size`` TP ranks (split as
        :meth:`elementwise_bytes_per_token` splits them; forward elements only).

        ``core_attn``: the attention kernel's Q, K, V reads and output write. ``layernorm``: the
        norms that run as their own module (:meth:`_separate_norms`; transformer_layer.py
        ``recompute_input_layernorm`` / ``recompute_pre_mlp_layernorm``). ``moe_act``: the routed
        experts' activation and its clamp (moe/experts.py ``activation_recompute``, which
        checkpoints ``bias_act_func``). ``mla_up_proj``: MLA's latent norms and rotary step.
        ``mlp``: a dense MLP with its fused pre-norm and its activation. ``moe``: the MoE layer's
        router, permutations (the sort by local expert over ``ep_size`` included) and
        activations.
        ``shared_experts``: the shared experts' activation. ``gdn_norm_out``: 0 (gated-delta-net
        layers are not priced in bytes).
        """
        self._check_attention_variant()
        attention, _, dense, moe = self._layer_counts()
        clamp_forward, _ = self._expert_clamp_elements()
        elements = {
            "core_attn": attention * self._core_attention_elements(),
            "layernorm": self._separate_norms() * self._norm(),
            "moe_act": moe * (self._routed_activation_elements() + clamp_forward),
            "mla_up_proj": attention * self._mla_up_projection_elements(),
            "mlp": dense * (self._norm() + self._dense_activation_elements()),
            "moe": moe
            * (
                self._moe_layer_elements()
                + clamp_forward
                + self._local_expert_sort_elements(ep_size)
            ),
            "shared_experts": moe * self._shared_activation_elements(),
        }.get(module, _Elements())
        return _bytes_on_rank(elements, tp_size, sequence_parallel) / self.model.num_layers
