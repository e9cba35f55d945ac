"""The one description of a training job: plain values, megatron-core's field names, no torch.

A :class:`JobDescription` says what the overlap plan, the layout checks, the launch environment
and the step estimate read about a job: the model (:class:`ModelDescription`, every field named
and defaulted as megatron-core's ``TransformerConfig`` / the GPT provider name it), the world
size, the GPU, the batch sizes, the optimizer sharding and where Transformer Engine stands.

Every route builds one, through one function each way:

- from megatron-core configs: ``megatron.bridge.training.job_configs.describe_configs``;
- onto a megatron-core model config: ``megatron.bridge.training.job_configs.write_model``;
- from a recipe (``RecipeSpec.job``) and from ``bridge-overlap explain`` flags
  (``megatron.bridge.cli.flags``), which change fields of a recipe's description by name.

Derived layout facts (data-parallel size, interleaving, expert data parallelism, the precision
name) are properties, computed from the fields and never stored twice. A new model field is one
field here plus the rules that read it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from megatron.bridge.training.parallel_layout import data_parallel_size, micro_batches_per_step
from megatron.bridge.training.pipeline_layout import parse_layout
from megatron.bridge.training.precisions import (
    PRECISIONS,
    ComputeDtype,
    PresetFamily,
    compute_dtype_of,
)
from megatron.bridge.training.validators import LIMITS, LimitError, check_limit

__all__ = [
    "OUTER_DP_SHARDING_STRATEGIES",
    "ActivationName",
    "ConfigName",
    "JobDescription",
    "ModelDescription",
    "PositionEmbeddingType",
    "PrecisionName",
    "check_limits",
    "check_micro_batch_chunks",
]

ConfigName = Literal["model", "ddp", "optimizer"]
"""A megatron-core config of the job, by its ``ConfigContainer`` attribute: TransformerConfig,
DistributedDataParallelConfig or OptimizerConfig (``cfg.model``, ``cfg.ddp``, ``cfg.optimizer``)."""

PositionEmbeddingType = Literal["learned_absolute", "rope", "mrope", "yarn", "none"]
"""Position embeddings megatron-core's GPT model takes (``position_embedding_type``)."""

ActivationName = Literal["gelu", "silu", "relu", "quick_gelu", "squared_relu"]
"""MLP activations by the name of megatron-core's function."""

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

OUTER_DP_SHARDING_STRATEGIES = ("no_shard", "optim")
"""The values of the DDP config's ``outer_dp_sharding_strategy`` (Megatron-LM's
``--outer-dp-sharding-strategy`` choices)."""


@dataclass(frozen=True, kw_only=True)
class JobDescription:
    """One training job: the model, the world it runs on, batches, optimizer sharding, TE.

    The parallel sizes are the model's (``model.tensor_model_parallel_size`` ...); the properties
    below give them short names and derive the data-parallel layout from ``world_size``.
    """

    model: ModelDescription
    """The model, as megatron-core's TransformerConfig names it."""
    world_size: int = 1
    """GPUs in the job."""
    gpu: str | None = None
    """GPU model (a name from the GPU catalogue); None when unknown."""
    micro_batch_size: int | None = None
    """Samples per micro-batch."""
    global_batch_size: int | None = None
    """Samples per optimizer step (None: micro-batch x DP x PP)."""
    use_distributed_optimizer: bool = False
    """The distributed optimizer shards optimizer state over data-parallel ranks."""
    megatron_ddp: bool = True
    """DDP is megatron-core's DistributedDataParallel (the DP knobs are written only then)."""
    use_megatron_fsdp: bool = False
    """The DDP config's ``use_megatron_fsdp``: megatron-core wraps the model in Megatron-FSDP,
    which reads the DP knobs its own way (the plan says which do nothing there)."""
    num_distributed_optimizer_instances: int = 1
    """The DDP config's ``num_distributed_optimizer_instances``: the DP x CP ranks (and the
    expert-DP ranks) split into this many consecutive groups (megatron-core's intra partial
    data-parallel groups); the distributed optimizer, or Megatron-FSDP, shards within a group,
    and the groups reduce gradients among themselves once per step (with Megatron-FSDP, hybrid
    sharding: HSDP)."""
    outer_dp_sharding_strategy: str = "no_shard"  # one of OUTER_DP_SHARDING_STRATEGIES
    """The DDP config's ``outer_dp_sharding_strategy`` under HSDP: ``"optim"`` shards the
    optimizer state over the groups as well; ``"no_shard"`` replicates it in each group."""
    num_buckets: int | None = None
    """DDP bucket count set on the DDP config (exclusive with bucket_size in megatron-core)."""
    grad_reduce_in_fp32: bool = False
    """Gradients are reduced in fp32 (the main-gradient buffer is fp32; else the parameters'
    16-bit dtype)."""
    fp8_param_gather: bool = False
    """Parameters are kept in FP8 (DDP config's ``fp8_param_gather``: Transformer Engine's FP8
    primary weights, gathered in FP8); else in 16 bits, with FP8 copies cast for the GEMMs."""
    fp4_param_gather: bool = False
    """Parameters are kept in FP4 (DDP config's ``fp4_param_gather``, NVFP4 primary weights)."""
    optimizer_cpu_offload: bool = False
    """The optimizer's fp32 state and main weights live partly in CPU memory (OptimizerConfig's
    ``optimizer_cpu_offload``)."""
    optimizer_offload_fraction: float = 0.0
    """Share of the optimizer state offloaded to the CPU with ``optimizer_cpu_offload``
    (OptimizerConfig's ``optimizer_offload_fraction``)."""
    te_available: bool = True
    """Transformer Engine imports where the job runs."""
    te_reason: str = ""
    """Why Transformer Engine is not available (empty when it is)."""
    te_version: str | None = None
    """Transformer Engine version, when known."""
    direct_settings: tuple[tuple[ConfigName, str, Any], ...] = ()
    """Overlap knobs set straight on a megatron-core config, as (config, knob, value)."""
    distributed_optimizer_turned_on: ConfigName | None = None
    """The config (ddp or optimizer) whose use_distributed_optimizer the job turns on to match
    the other one's True (megatron-core reads both); None when they agree."""

    # --- the layout, by short name ------------------------------------------------------------

    @property
    def tp_size(self) -> int:
        """Tensor-parallel size."""
        return self.model.tensor_model_parallel_size

    @property
    def pp_size(self) -> int:
        """Pipeline-parallel size."""
        return self.model.pipeline_model_parallel_size

    @property
    def vpp_size(self) -> int | None:
        """Model chunks per pipeline rank, None without interleaving (megatron-core's "off").

        With a custom ``pipeline_model_parallel_layout``, megatron-core takes it from the layout:
        its stage count over the pipeline size.
        """
        vpp = self.model.virtual_pipeline_model_parallel_size
        layout = self.model.pipeline_model_parallel_layout
        if vpp is None and layout is not None and self.pp_size > 0:
            vpp = len(parse_layout(layout)) // self.pp_size
        return None if vpp in (None, 1) else vpp

    @property
    def cp_size(self) -> int:
        """Context-parallel size."""
        return self.model.context_parallel_size

    @property
    def ep_size(self) -> int:
        """Expert-parallel size."""
        return self.model.expert_model_parallel_size

    @property
    def etp_size(self) -> int:
        """Expert tensor-parallel size (megatron-core's default: the tensor-parallel size)."""
        etp = self.model.expert_tensor_parallel_size
        return self.tp_size if etp is None else etp

    @property
    def sequence_parallel(self) -> bool:
        """Whether sequence parallelism is on."""
        return self.model.sequence_parallel

    @property
    def interleaved(self) -> bool:
        """An interleaved (virtual) pipeline: PP > 1 and more than one chunk per rank."""
        return self.pp_size > 1 and self.vpp_size is not None

    @property
    def interleaved_schedule(self) -> bool:
        """Whether megatron-core runs its interleaved schedule: PP > 1 and a VPP size set, 1 too.

        ``get_forward_backward_func`` picks the interleaved schedule whenever the VPP size is not
        None, so ``virtual_pipeline_model_parallel_size=1`` runs it with one model chunk per rank
        (:attr:`interleaved` is False there: nothing is interleaved). A custom pipeline layout
        sets the size only with more than one stage per rank (``TransformerConfig.__post_init__``).
        """
        explicit = self.model.virtual_pipeline_model_parallel_size is not None
        return self.pp_size > 1 and (explicit or self.vpp_size is not None)

    # Cached on the frozen instance (the rules read it many times per plan); an error is not.
    @functools.cached_property
    def dp_size(self) -> int:
        """Data-parallel size: world / (TP x CP x PP); ``ValueError`` when that does not divide."""
        return data_parallel_size(
            num_gpus=self.world_size,
            tp_size=self.tp_size,
            cp_size=self.cp_size,
            pp_size=self.pp_size,
        )

    @property
    def micro_batches(self) -> int | None:
        """Micro-batches per replica and step (None without a micro-batch size); ``ValueError``
        where megatron-core cannot split or schedule the global batch
        (``parallel_layout.micro_batches_per_step``)."""
        if self.micro_batch_size is None:
            return None
        gbs = self.global_batch_size
        if gbs is None:
            gbs = self.micro_batch_size * self.dp_size * self.pp_size
        return micro_batches_per_step(
            global_batch_size=gbs,
            micro_batch_size=self.micro_batch_size,
            dp_size=self.dp_size,
            pp_size=self.pp_size,
            interleaved=self.interleaved_schedule,
        )

    @property
    def hsdp_outer_shard(self) -> bool:
        """Megatron-FSDP shards the optimizer state over the distributed-optimizer groups too:
        HSDP (more than one group) with an ``outer_dp_sharding_strategy`` other than
        ``"no_shard"`` (``mcore_fsdp_adapter``'s ``hsdp_outer_dp_shard``)."""
        return (
            self.use_megatron_fsdp
            and self.num_distributed_optimizer_instances > 1
            and self.outer_dp_sharding_strategy != "no_shard"
        )

    @property
    def optimizer_shards(self) -> tuple[int, int]:
        """Ranks the distributed optimizer (or Megatron-FSDP) shards over within one instance:
        (dense DP x CP ranks, expert-DP ranks) over ``num_distributed_optimizer_instances``
        (megatron-core's intra partial data-parallel groups; experts: 1 for a dense model)."""
        instances = self.num_distributed_optimizer_instances
        experts = self.expert_data_parallel_size or instances
        return self.dp_size * self.cp_size // instances, max(1, experts // instances)

    @property
    def expert_data_parallel_size(self) -> int | None:
        """Replicas of each expert: world / (ETP x EP x PP); None for a dense model.

        Expert gradients are reduced (and, with the distributed optimizer, expert parameters
        gathered) over this group, not over the dense data-parallel group.
        """
        if not self.model.moe:
            return None
        return self.world_size // (self.etp_size * self.ep_size * self.pp_size)

    @property
    def precision(self) -> PrecisionName:
        """The userbuffers preset family of the model's precision: bf16, fp16 or fp8."""
        return self.model.precision

    @property
    def compute_dtype(self) -> ComputeDtype | None:
        """The model's training precision (``ModelDescription.compute_dtype``)."""
        return self.model.compute_dtype

    @property
    def distributed_optimizer_note(self) -> str | None:
        """The sentence saying which config's ``use_distributed_optimizer`` the job turns on."""
        target = self.distributed_optimizer_turned_on
        if target is None:
            return None
        source = "optimizer" if target == "ddp" else "ddp"
        return (
            f"cfg.{source}.use_distributed_optimizer=True but cfg.{target}."
            f"use_distributed_optimizer=False: cfg.{target}.use_distributed_optimizer is set to "
            "True to match (megatron-core reads both)."
        )

    def direct_setting(self, knob: str) -> tuple[str, Any] | None:
        """``(config, value)`` when the user set ``knob`` straight on a megatron-core config."""
        for config, name, value in self.direct_settings:
            if name == knob:
                return config, value
        return None

    def replace(self, **changes: Any) -> JobDescription:
        """This job with fields changed; ``model.<field>`` keys change model fields."""
        model = {k.removeprefix("model."): v for k, v in changes.items() if k.startswith("model.")}
        top = {k: v for k, v in changes.items() if not k.startswith("model.")}
        if model:
            top["model"] = dataclasses.replace(top.get("model", self.model), **model)
        return dataclasses.replace(self, **top)

    # --- JSON ---------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The description as JSON-ready values (tuples as lists)."""
        return _jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobDescription:
        """Rebuild a description from :meth:`to_dict` output."""
        fields = dict(data)
        model = dict(fields.pop("model"))
        for name in (
            "recompute_modules",
            "offload_modules",
            "cuda_graph_modules",
            "csa_compress_ratios",
        ):
            if model.get(name) is not None:
                model[name] = tuple(model[name])
        layout = model.get("pipeline_model_parallel_layout")
        if isinstance(layout, list):
            model["pipeline_model_parallel_layout"] = tuple(tuple(stage) for stage in layout)
        fields["direct_settings"] = tuple(tuple(t) for t in fields.get("direct_settings", ()))
        return cls(model=ModelDescription(**model), **fields)


_JOB_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(JobDescription))

# (bound's name, whether the field is the model's, field, maximum) of each bound of LIMITS a job
# field has, in LIMITS's order: every plan checks them, so the names are split once.
_BOUNDED_FIELDS = tuple(
    (name, bool(dot), field if dot else name, limit.maximum)
    for name, limit in LIMITS.items()
    for _, dot, field in (name.partition("."),)
    if dot or name in _JOB_FIELD_NAMES
)


def check_limits(job: JobDescription) -> None:
    """``LimitError`` naming the first field of ``job`` above its bound in :data:`LIMITS`.

    Runs before any planning (``check_job``): only the maxima, the layout and the batch split
    arithmetic are read, nothing is unrolled or simulated.
    """
    model = job.model
    for name, of_model, field, maximum in _BOUNDED_FIELDS:
        value = getattr(model, field, None) if of_model else getattr(job, field)
        # An int within its bound, the common case, needs no call; check_limit reads the rest.
        if value is not None and not (type(value) is int and value <= maximum):
            check_limit(name, value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def check_micro_batch_chunks(job: JobDescription) -> None:
    """``LimitError`` for a step whose estimate would lay out more micro-batch chunks than
    ``LIMITS["micro_batches_x_chunks"]``: run by the step estimate before it simulates (the plan
    itself has no such bound)."""
    try:
        micro_batches = job.micro_batches
        chunks = (job.vpp_size or 1) * (micro_batches or 1)
    except LimitError:
        raise
    except (ValueError, ZeroDivisionError, TypeError):
        return  # the layout check says why the batch does not split
    limit = LIMITS["micro_batches_x_chunks"]
    if chunks > limit.maximum:
        raise LimitError(
            f"global_batch_size={job.global_batch_size} with micro_batch_size="
            f"{job.micro_batch_size}, DP {job.dp_size} and VPP {job.vpp_size or 1} gives "
            f"{micro_batches} micro-batches x {job.vpp_size or 1} model chunks = {chunks} per "
            f"step, above the bound {limit.maximum} ({limit.why}). Lower the global batch size, "
            "or raise the micro-batch size or the data-parallel size."
        )
