"""The model in a job description: :class:`ModelDescription`, with megatron-core's field names.

Every field is named and defaulted as megatron-core's ``TransformerConfig`` (and the GPT
provider's ``seq_length``, ``vocab_size``, embeddings) names it; shape fields left None are
unknown. Derived model facts (the MoE layer pattern, head and MLP widths, the training precision
and its preset family) are properties. The value names some fields take
(:data:`PositionEmbeddingType`, :data:`ActivationName`, :data:`PrecisionName`) and the defaults of
the fields that keep layers in 16 bits (:data:`BF16_LAYER_DEFAULTS`) live here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from megatron.bridge.training.precisions import (
    PRECISIONS,
    ComputeDtype,
    PresetFamily,
    compute_dtype_of,
)

__all__ = [
    "BF16_LAYER_DEFAULTS",
    "ActivationName",
    "ModelDescription",
    "PositionEmbeddingType",
    "PrecisionName",
    "SoftmaxType",
]

PositionEmbeddingType = Literal["learned_absolute", "rope", "mrope", "yarn", "none"]
"""Position embeddings megatron-core's GPT model takes (``position_embedding_type``)."""

ActivationName = Literal["gelu", "silu", "relu", "quick_gelu", "squared_relu"]
"""MLP activations by the name of megatron-core's function."""

SoftmaxType = Literal["vanilla", "off-by-one", "learnable"]
"""Attention softmaxes megatron-core's ``softmax_type`` takes."""

PrecisionName = PresetFamily
"""Training precision as the userbuffers presets name it (bf16, fp16, fp8)."""


@dataclass(frozen=True, kw_only=True)
class ModelDescription:
    """The model fields the plan, the checks and the estimate read.

    Names and defaults are megatron-core's ``TransformerConfig`` (and the GPT provider's
    ``seq_length``, ``vocab_size``, embeddings); shape fields left None are unknown, and the
    rules that need them are skipped.
    """

    # --- parallel layout (megatron-core's ModelParallelConfig) ------------------------------
    tensor_model_parallel_size: int = 1
    """Tensor-parallel size."""
    pipeline_model_parallel_size: int = 1
    """Pipeline-parallel size."""
    virtual_pipeline_model_parallel_size: int | None = None
    """Model chunks per pipeline rank (None or 1: no interleaving)."""
    context_parallel_size: int = 1
    """Context-parallel size."""
    cp_comm_type: str | tuple[str, ...] | None = None
    """How attention exchanges its sequence under CP (Transformer Engine's ``cp_comm_type``):
    "p2p" (K/V ring, the default None), "all_gather" (K/V gathered), "a2a" (all-to-all of
    Q/K/V/O over heads, DeepSpeed-Ulysses style) or "a2a+p2p"; one for every layer or a tuple
    with one per layer."""
    expert_model_parallel_size: int = 1
    """Expert-parallel size."""
    expert_tensor_parallel_size: int | None = None
    """Expert tensor-parallel size (None: the tensor-parallel size)."""
    sequence_parallel: bool = False
    """Sequence parallelism (splits LayerNorm/dropout activations over TP ranks)."""
    account_for_embedding_in_pipeline_split: bool = False
    """Count the embedding as a layer when layers are split across pipeline stages."""
    account_for_loss_in_pipeline_split: bool = False
    """Count the loss as a layer when layers are split across pipeline stages."""
    pipeline_model_parallel_layout: str | tuple[tuple[str, ...], ...] | None = None
    """Custom placement of layers on (virtual) pipeline stages, as the user wrote it: a string
    (``"Et*4|(t*4|)*14tmL"``) or megatron-core's list form stored as a tuple of stages, each a
    tuple of layer names (``(("embedding", "decoder"), ("decoder", "loss"))``). Stage ``i`` is
    virtual stage ``i // PP`` of pipeline rank ``i % PP``; megatron-core takes VPP from it."""
    num_layers_in_first_pipeline_stage: int | None = None
    """Layers on the first pipeline rank (None: the even split)."""
    num_layers_in_last_pipeline_stage: int | None = None
    """Layers on the last pipeline rank (None: the even split)."""

    # --- shape --------------------------------------------------------------------------------
    num_layers: int | None = None
    """Transformer layers."""
    hidden_size: int | None = None
    """Model width."""
    num_attention_heads: int | None = None
    """Attention heads."""
    num_query_groups: int | None = None
    """Key/value heads of grouped-query attention (None: one per head)."""
    kv_channels: int | None = None
    """Head dimension (None: hidden_size / num_attention_heads)."""
    ffn_hidden_size: int | None = None
    """Dense MLP width (None: 4 x hidden_size)."""
    seq_length: int | None = None
    """Training sequence length."""
    vocab_size: int | None = None
    """Tokenizer vocabulary, before padding."""
    make_vocab_size_divisible_by: int = 128
    """The vocabulary is padded to a multiple of this times the TP size."""
    gated_linear_unit: bool = False
    """Gated MLP (SwiGLU / GeGLU): fc1 produces twice ffn_hidden_size."""
    activation_func: ActivationName = "gelu"
    """The MLP activation, by the name of megatron-core's function (its field holds the callable:
    ``torch.nn.functional.gelu``/``silu``/``relu``, ``megatron.core.fusions.fused_bias_geglu.
    quick_gelu``, ``megatron.core.activations.squared_relu``)."""
    bias_activation_fusion: bool = False
    """Fuse the fc1 bias with the activation."""
    glu_linear_offset: float = 0.0
    """Offset added to the linear half of a gated activation: act(x_gate) * (x_linear + offset)."""
    activation_func_clamp_value: float | None = None
    """quick_gelu's gated activation clamps the gate half above and the linear half on both sides
    at this value (None: no clamp)."""
    add_bias_linear: bool = True
    """Linear layers carry biases."""
    add_qkv_bias: bool = False
    """The QKV projection carries a bias even without add_bias_linear."""
    normalization: str = "LayerNorm"
    """LayerNorm (weight and bias) or RMSNorm (weight only)."""
    position_embedding_type: PositionEmbeddingType = "learned_absolute"
    """learned_absolute (an s x h table), rope, mrope, yarn or none."""
    share_embeddings_and_output_weights: bool = True
    """The output layer shares the input embedding's weight."""
    hidden_dropout: float = 0.1
    """Dropout after the attention and MLP blocks."""
    attention_dropout: float = 0.1
    """Dropout of the attention probabilities."""
    softmax_type: SoftmaxType = "vanilla"
    """Attention softmax: vanilla, off-by-one (one zero logit per row) or learnable (one learned
    sink logit per head)."""
    multi_latent_attention: bool = False
    """Multi-latent attention (DeepSeek's MLA); its dimensions are the five fields below."""
    q_lora_rank: int | None = 512
    """MLA: rank of the query down-projection (None: queries are projected at full rank)."""
    kv_lora_rank: int = 512
    """MLA: rank of the compressed key/value latent."""
    qk_head_dim: int = 128
    """MLA: query/key head dimension without the rotary part."""
    qk_pos_emb_head_dim: int = 64
    """MLA: the rotary (decoupled position) part of the query/key head dimension."""
    v_head_dim: int = 128
    """MLA: value head dimension."""
    window_size: tuple[int, int] | None = None
    """Sliding-window attention as (left, right) tokens; None: full attention in every layer."""
    window_attn_skip_freq: int | tuple[int, ...] | None = None
    """Which layers skip the window (full attention): every N-th layer, or a 0/1 entry per layer
    where 1 is sliding-window attention and 0 full attention (megatron-core's int or list form)."""
    attention_output_gate: bool = False
    """A sigmoid gate on the attention output (a query-width projection of its own)."""
    experimental_attention_variant: str | None = None
    """An attention variant megatron-core marks experimental (gated_delta_net, dsa) or
    Megatron-Bridge's DeepSeek-V4 hybrid attention (dsv4_hybrid, whose fields follow), or None."""
    dsa_indexer_n_heads: int | None = None
    """DSA lightning indexer: heads."""
    dsa_indexer_head_dim: int | None = None
    """DSA lightning indexer: head dimension."""
    dsa_indexer_topk: int | None = None
    """DSA lightning indexer: keys each query attends to."""
    o_lora_rank: int | None = None
    """DeepSeek-V4 attention: rank of the grouped low-rank output projection (None: none)."""
    o_groups: int = 1
    """DeepSeek-V4 attention: head groups of the low-rank output projection."""
    csa_compress_ratios: tuple[int, ...] | None = None
    """DeepSeek-V4 attention: one key/value compression ratio per layer, decoder then MTP
    layers (0: the sliding window alone, 4: compressed sparse attention with the DSA indexer,
    128: heavily compressed attention)."""
    csa_window_size: int = 128
    """DeepSeek-V4 attention: the sliding window every layer attends over, in tokens."""
    enable_hyper_connections: bool = False
    """Hyper-connections: several residual streams mixed by learned weights around each block."""
    num_residual_streams: int = 1
    """Hyper-connections: residual streams (Hugging Face's hc_mult)."""

    # --- hybrid Mamba models (megatron-core's HybridModel) -------------------------------------
    hybrid_layer_pattern: str | None = None
    """The layer sequence of a hybrid model, one symbol a layer as megatron-core's HybridModel
    spells it (``hybrid_layer_allocation.Symbols``: ``M`` Mamba, ``G`` gated delta net, ``*``
    attention, ``D`` DSA attention, ``+`` MLA, ``-`` MLP, ``E`` MoE; ``|`` a pipeline-stage
    boundary, ``/`` before each MTP layer's pattern); None: a transformer, every layer attention
    plus MLP or MoE."""
    mamba_state_dim: int = 128
    """Mamba: SSM state dimension."""
    mamba_head_dim: int = 64
    """Mamba: head dimension."""
    mamba_num_groups: int = 8
    """Mamba: groups of the B/C projections."""
    mamba_num_heads: int | None = None
    """Mamba: heads (None: 2 x hidden_size / mamba_head_dim)."""

    # --- precision ------------------------------------------------------------------------------
    bf16: bool = False
    """bf16 training."""
    fp16: bool = False
    """fp16 training."""
    fp8: str | None = None
    """FP8 format (e4m3, hybrid) or None."""
    fp8_recipe: str = "delayed"
    """FP8 scaling recipe (delayed, tensorwise, mxfp8, blockwise)."""
    fp4: str | None = None
    """FP4 format (e2m1) or None; exclusive with fp8."""
    fp4_recipe: str | None = "nvfp4"
    """FP4 scaling recipe (nvfp4: NVFP4 block scaling)."""
    fp8_dot_product_attention: bool = False
    """Core attention's dot products in FP8 too; without it they stay in BF16/FP16 whatever the
    GEMMs' precision (megatron-core hands attention to TE's fused or flash kernels unquantized)."""
    first_last_layers_bf16: bool = False
    """Keep the first num_layers_at_start_in_bf16 and the last num_layers_at_end_in_bf16 decoder
    layers out of the FP8/FP4 recipe: their GEMMs run in 16 bits (megatron-core's
    ``fp8_utils.get_fp8_context`` and ``fp4_utils.get_fp4_context`` by global layer index; the
    MTP layers stay quantized)."""
    num_layers_at_start_in_bf16: int = 1
    """Decoder layers at the start kept in 16 bits with first_last_layers_bf16."""
    num_layers_at_end_in_bf16: int = 1
    """Decoder layers at the end kept in 16 bits with first_last_layers_bf16."""

    # --- mixture of experts ----------------------------------------------------------------------
    num_moe_experts: int | None = None
    """Routed experts (None: dense model)."""
    moe_router_topk: int = 2
    """Experts each token is routed to."""
    moe_router_score_function: str = "softmax"
    """Router scores: softmax, sigmoid or sqrtsoftplus."""
    moe_router_pre_softmax: bool = False
    """Softmax before the top-k choice (top-1 routing needs it with softmax scores)."""
    moe_router_load_balancing_type: str = "aux_loss"
    """Load balancing: aux_loss, seq_aux_loss, global_aux_loss, sinkhorn or none."""
    moe_router_enable_expert_bias: bool = False
    """Top-k choice with a per-expert bias updated from the load (aux-loss-free balancing)."""
    moe_router_topk_scaling_factor: float | None = None
    """Factor on the chosen experts' routing weights (None: 1)."""
    moe_n_hash_layers: int = 0
    """The first layers route by a fixed token-to-expert hash instead of the router
    (DeepSeek-V4)."""
    moe_grouped_gemm: bool = False
    """The local experts run as one grouped GEMM."""
    moe_expert_capacity_factor: float | None = None
    """Tokens an expert takes, as a factor of its even share (None: dropless)."""
    moe_pad_expert_input_to_capacity: bool = False
    """Pad each expert's input to its capacity (drop-and-pad MoE)."""
    moe_router_padding_for_quantization: bool = False
    """Pad the routing map so each expert's token count suits FP8/FP4 GEMMs (needs fp8 or fp4)."""
    moe_router_padding_for_fp8: bool = False
    """megatron-core's older name of moe_router_padding_for_quantization: it turns that on, and
    with the alltoall dispatcher it keeps the MoE preprocess step out of CUDA graphs."""
    moe_ffn_hidden_size: int | None = None
    """Width of one routed expert (None: ffn_hidden_size)."""
    moe_shared_expert_intermediate_size: int | None = None
    """Total width of the shared experts (None: none)."""
    moe_layer_freq: int | tuple[int, ...] = 1
    """Which layers are MoE layers: every N-th layer from layer 0, or one 0/1 entry per layer
    (megatron-core's list form, e.g. three dense layers then 58 MoE layers)."""
    moe_latent_size: int | None = None
    """Latent width the routed experts compute in (a down- and up-projection around them);
    None: the experts take the hidden size."""
    moe_token_dispatcher_type: str = "allgather"
    """Token dispatcher: allgather, alltoall or flex."""
    moe_flex_dispatcher_backend: str = "deepep"
    """Backend of the flex dispatcher (read only with flex dispatch)."""
    moe_shared_expert_overlap: bool = False
    """The shared expert's compute overlaps the dispatcher."""

    # --- recompute, MTP, graphs and other model-side overlap settings ---------------------------
    recompute_granularity: str | None = None
    """Activation recompute: None, full or selective."""
    recompute_method: str | None = None
    """Full recompute method: uniform or block."""
    recompute_num_layers: int | None = None
    """Layers recomputed per stage (full recompute)."""
    recompute_modules: tuple[str, ...] | None = None
    """Modules recomputed under selective recompute (None: megatron-core's core_attn)."""
    mtp_num_layers: int | None = None
    """Multi-token-prediction layers."""
    mtp_use_repeated_layer: bool = False
    """One MTP layer's weights run for every MTP depth (mtp_num_layers passes)."""
    cpu_offloading: bool = False
    """Offload the activations (and with cpu_offloading_weights the weights) of the first
    cpu_offloading_num_layers layers to the CPU (megatron-core's ModelParallelConfig)."""
    cpu_offloading_num_layers: int = 0
    """Layers whose activations are offloaded with cpu_offloading."""
    cpu_offloading_activations: bool = True
    """cpu_offloading moves the layers' activations."""
    cpu_offloading_weights: bool = False
    """cpu_offloading moves the layers' weights."""
    fine_grained_activation_offloading: bool = False
    """Move the large tensors the offload_modules save for the backward to the host after each
    layer's forward and bring them back ahead of its backward (megatron-core's fine-grained
    activation offloading; not with cpu_offloading)."""
    offload_modules: tuple[str, ...] = ()
    """Modules whose saved tensors fine-grained offloading moves: attn_norm, qkv_linear,
    core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, fused_group_mlp."""
    min_offloaded_tensor_size: int = 1024 * 1024
    """Fine-grained offloading moves a saved tensor only from this many elements up."""
    activation_offload_fraction: float = 1.0
    """Share of each chunk's offloadable groups fine-grained offloading moves (the later groups
    of the forward stay on the GPU)."""
    fine_grained_offloading_max_inflight_offloads: int | None = None
    """Offloads of one module name the main stream lets run unfinished before it waits (None:
    it never waits); full_iteration CUDA graphs need a count."""
    use_transformer_engine_op_fuser: bool = False
    """MoE experts run in Transformer Engine's operation fuser (offload module fused_group_mlp
    needs it)."""
    use_fused_weighted_squared_relu: bool = False
    """The squared-ReLU activation runs fused with the router-probability weighting
    (megatron-core's weighted_squared_relu_impl); the op fuser needs it for squared-ReLU
    experts."""
    cross_entropy_loss_fusion: bool = False
    """The loss runs in a fused cross-entropy kernel (cross_entropy_fusion_impl's)."""
    cross_entropy_fusion_impl: str = "native"
    """The fused cross entropy: native (megatron-core's, fp32) or te (Transformer Engine's,
    which writes its gradient into the 16-bit logits)."""
    gradient_accumulation_fusion: bool = False
    """Weight-gradient GEMMs accumulate into main_grad directly."""
    cuda_graph_impl: str = "none"
    """CUDA graph implementation: none, local, transformer_engine, full_iteration."""
    cuda_graph_modules: tuple[str, ...] = ()
    """Per-layer CUDA graph capture regions (attn, mlp, moe, moe_router, ...); empty: whole layer."""
    overlap_dispatch_backward_with_experts_wgrad: bool = False
    """megatron-core's alternative to EP overlap: the dispatch backward overlaps expert wgrad."""
    ep_overlap_early_attn_memory_release: bool = False
    """Release attention memory early under EP overlap."""
    overlap_p2p_comm_warmup_flush: bool = False
    """Overlap pipeline p2p also in warmup and flush."""

    # --- derived views ----------------------------------------------------------------------------

    @property
    def moe(self) -> bool:
        """Whether the model has routed experts."""
        return bool(self.num_moe_experts)

    @property
    def moe_layer_pattern(self) -> tuple[int, ...]:
        """One entry per layer, 1 for an MoE layer and 0 for a dense one, from moe_layer_freq.

        An int N marks every N-th layer from layer 0 (megatron-core's
        ``gpt_layer_specs.get_gpt_decoder_layer_specs``); the list form is taken
        as it is. A model without routed experts has no MoE layer.
        """
        if not self.moe or self.num_layers is None:
            return (0,) * (self.num_layers or 0)
        if isinstance(self.moe_layer_freq, int):
            return tuple(int(i % self.moe_layer_freq == 0) for i in range(self.num_layers))
        return tuple(self.moe_layer_freq)

    def uses_window(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) attends through the sliding window: megatron-core's
        ``transformer/utils.py`` ``is_layer_window_attention`` (every layer when
        ``window_attn_skip_freq`` is None; with an int N every layer but each N-th; with the
        list form, the entries that are 1), as upstream's ``transformer_flops`` counts it."""
        if not self.window_size:
            return False
        skip = self.window_attn_skip_freq
        if skip is None:
            return True
        if isinstance(skip, int):
            return (index + 1) % skip != 0
        return index < len(skip) and bool(skip[index])

    @property
    def sliding_window(self) -> bool:
        """The window limits what a query sees: Transformer Engine's test for sliding-window
        attention (``attn_forward_func_with_cp``: a window other than (-1, 0) and (-1, -1))."""
        return bool(self.window_size) and tuple(self.window_size) not in ((-1, 0), (-1, -1))

    @property
    def cp_comm_types(self) -> tuple[str, ...]:
        """One entry per layer: the layer's CP exchange, "p2p" where ``cp_comm_type`` is None
        (megatron-core passes None to Transformer Engine, whose default is "p2p")."""
        kind = self.cp_comm_type
        if isinstance(kind, tuple):
            return tuple("p2p" if k is None else k for k in kind)
        return ("p2p" if kind is None else kind,) * (self.num_layers or 0)

    @property
    def cp_splits_heads(self) -> bool:
        """Some layer exchanges its sequence by CP's all-to-all over heads ("a2a", also inside
        "a2a+p2p"): each CP rank then holds 1 / CP of a TP rank's heads and query groups."""
        return bool({"a2a", "a2a+p2p"} & set(self.cp_comm_types))

    @property
    def head_dim(self) -> int:
        """Attention head dimension."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def query_groups(self) -> int:
        """Key/value heads (the attention heads without grouped-query attention)."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def ffn_size(self) -> int:
        """Dense MLP width, megatron-core's default (4 x hidden) when not given."""
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def token_dispatcher(self) -> str | None:
        """The MoE token dispatcher (None for a dense model)."""
        return self.moe_token_dispatcher_type if self.moe else None

    @property
    def flex_backend(self) -> str | None:
        """The flex dispatcher's backend, None unless the model dispatches with flex."""
        return self.moe_flex_dispatcher_backend if self.token_dispatcher == "flex" else None

    @property
    def attention_bias(self) -> bool:
        """Whether the attention projections carry biases."""
        return self.add_bias_linear or self.add_qkv_bias

    @property
    def compute_dtype(self) -> ComputeDtype | None:
        """The training precision the precision fields make (bf16, fp16, fp8_ds, fp8_cs, fp8_sc,
        fp8_mx, nvfp4); None for megatron-core's ``custom`` quantization recipes."""
        return compute_dtype_of(
            fp16=self.fp16,
            fp8=self.fp8,
            fp8_recipe=self.fp8_recipe,
            fp4=self.fp4,
            fp4_recipe=self.fp4_recipe,
        )

    @property
    def precision(self) -> PrecisionName:
        """The userbuffers preset family of the precision: bf16, fp16, or fp8 for every FP8
        recipe and NVFP4 (``PrecisionSetting.preset_family``)."""
        dtype = self.compute_dtype
        return "fp8" if dtype is None else PRECISIONS[dtype].preset_family


#: The fields that keep decoder layers out of the FP8/FP4 recipe (megatron-core's
#: ``first_last_layers_bf16`` and its two counts), with the description's defaults, which are
#: megatron-core's.
BF16_LAYER_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        f.name: f.default
        for f in dataclasses.fields(ModelDescription)
        if f.name
        in ("first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")
    }
)
