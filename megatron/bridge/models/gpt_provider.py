"""GPT model provider: a megatron-core ``TransformerConfig`` that also knows how to build a GPT.

Recipe authors hold one of these as ``cfg.model``. It is a real ``TransformerConfig`` subclass,
so every megatron-core field is there, plus what a GPT needs on top (sequence length,
vocabulary, embeddings, the TE userbuffer preset).

A recipe builds it with the model's dimensions and then adjusts parallel sizes field by field::

    model = GPTModelProvider(num_layers=32, hidden_size=4096, num_attention_heads=32, ...)
    model.tensor_model_parallel_size = 4
    model.sequence_parallel = True

megatron-core validates (and derives fields such as ``ffn_hidden_size``) in
``TransformerConfig.__post_init__``, which would reject ``sequence_parallel=True`` while the TP
size is still 1. So construction validates nothing; :meth:`GPTModelProvider.finalize` runs
megatron-core's validation on the current values, and :meth:`GPTModelProvider.provide` builds
a megatron-core ``GPTModel`` from the finalized config.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from megatron.core.models.gpt.gpt_layer_specs import (
    get_gpt_layer_local_spec,
    get_gpt_layer_with_transformer_engine_spec,
)
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_config import TransformerConfig

from megatron.bridge.training import comm_overlap, write_record
from megatron.bridge.training.job import PositionEmbeddingType
from megatron.bridge.training.job_configs import describe_model
from megatron.bridge.training.megatron_core_support import check_buildable
from megatron.bridge.training.userbuffers import TransformerLayerTPOverlapCfg
from megatron.bridge.training.validators import check_choice, check_int

__all__ = ["GPTModelProvider", "PositionEmbeddingType"]

logger = logging.getLogger(__name__)

LayerSpecSource = ModuleSpec | Callable[["GPTModelProvider"], ModuleSpec]


@dataclass
class GPTModelProvider(TransformerConfig):
    """A megatron-core ``TransformerConfig`` for GPT models that builds the ``GPTModel``.

    Not validated at construction (see the module docstring); call :meth:`finalize` after the
    last field assignment, or let ``runtime_config_update`` do it.
    """

    seq_length: int = 1024
    """Training sequence length (also the learned position-embedding table size)."""
    vocab_size: int | None = None
    """Tokenizer vocabulary size; padded up in :meth:`provide` (see make_vocab_size_divisible_by)."""
    make_vocab_size_divisible_by: int = 128
    """Pad the vocabulary to a multiple of this times the TP size, for efficient GEMMs."""
    share_embeddings_and_output_weights: bool = True
    """Tie the input embedding and the output projection weights."""
    position_embedding_type: PositionEmbeddingType = "learned_absolute"
    """Position embedding: learned_absolute, rope, mrope, yarn or none."""
    rotary_percent: float = 1.0
    """Fraction of the head dimension rotated by RoPE (rope only)."""
    rotary_base: int = 10000
    """RoPE base period (rope only)."""
    rope_scaling: bool = False
    """Apply Llama-3.1-style RoPE frequency scaling (rope only)."""
    rope_scaling_factor: float = 8.0
    """RoPE scaling factor when rope_scaling is on."""
    seq_len_interpolation_factor: float | None = None
    """Linear RoPE position interpolation factor (> 1.0), or None."""
    fp16_lm_cross_entropy: bool = False
    """Compute the LM cross entropy in fp16 (fp16 training only)."""
    parallel_output: bool = True
    """Keep the logits split across TP ranks (the loss gathers them)."""
    scatter_embedding_sequence_parallel: bool = True
    """Scatter the embedding output across the sequence-parallel region."""
    tp_comm_overlap_cfg: (
        TransformerLayerTPOverlapCfg | Mapping[str, Any] | str | os.PathLike[str] | None
    ) = None
    """TE userbuffer config (written by comm-overlap setup): a preset, a plain dict, a YAML path, or None for TE defaults."""
    transformer_layer_spec: LayerSpecSource | None = None
    """Layer spec override (a ModuleSpec or a function of this provider); None picks TE or local."""
    # Dimensions megatron-core's MLATransformerConfig declares (read with multi_latent_attention)
    # and the layer pattern of its HybridModel, with their defaults: the job description holds
    # them, so a saved config keeps them.
    q_lora_rank: int | None = 512
    """MLA query down-projection rank (None: full-rank queries)."""
    kv_lora_rank: int = 512
    """MLA key/value latent rank."""
    qk_head_dim: int = 128
    """MLA query/key head dimension without the rotary part."""
    qk_pos_emb_head_dim: int = 64
    """MLA rotary part of the query/key head dimension."""
    v_head_dim: int = 128
    """MLA value head dimension."""
    hybrid_layer_pattern: str | None = None
    """A hybrid model's layer pattern (megatron-core's HybridModel symbols); None: a transformer."""
    # DeepSeek-V4's attention, hyper-connections and hash routing, as Megatron-Bridge's
    # DeepSeek-V4 provider names them (deepseek_v4_bridge.py), for the megatron-core that declares
    # them: the job description holds them, and finalize() refuses a model that needs them from a
    # megatron-core that lacks them (megatron_core_support).
    o_lora_rank: int | None = None
    """DeepSeek-V4: rank of the grouped low-rank output projection (None: none)."""
    o_groups: int = 1
    """DeepSeek-V4: head groups of the low-rank output projection."""
    csa_compress_ratios: list[int] | None = None
    """DeepSeek-V4: key/value compression ratio per layer (0, 4 or 128), decoder then MTP."""
    csa_window_size: int = 128
    """DeepSeek-V4: the sliding window every layer attends over."""
    enable_hyper_connections: bool = False
    """Hyper-connections around each block."""
    num_residual_streams: int = 1
    """Hyper-connections: residual streams."""
    moe_n_hash_layers: int = 0
    """The first layers route tokens by a fixed hash."""
    config_attributes: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Settings megatron-core reads off the config by name without declaring them, only where
    they apply (the YaRN rotary settings ``GPTModel`` passes to ``YarnRotaryEmbedding``; declared
    with a None default, its attention would read them everywhere): each is set as an attribute
    of this config at construction and at :meth:`finalize`, and a saved config keeps them here."""

    def __post_init__(self) -> None:
        # Deliberately not calling TransformerConfig.__post_init__: recipes set parallel sizes
        # after construction, and megatron-core's checks only make sense on the final values.
        # finalize() runs them, and records what they derived (write_record, writer "finalize").
        self._set_config_attributes()

    def _set_config_attributes(self) -> None:
        declared = {f.name for f in dataclasses.fields(self)}
        for name, value in self.config_attributes.items():
            if name in declared:
                raise ValueError(
                    f"GPTModelProvider.config_attributes[{name!r}]: {name} is a field of the "
                    f"provider; set cfg.model.{name} instead."
                )
            setattr(self, name, value)

    def finalize(self) -> None:
        """Run megatron-core's ``TransformerConfig`` validation and derivations on the current values.

        Idempotent: fields megatron-core derived at the previous finalize (``ffn_hidden_size``,
        ``kv_channels``, ``autocast_dtype``, init methods, ...) are put back to what they were
        before it, unless changed since, so they follow edits such as a new ``hidden_size``.
        """
        self.clear_derived()
        self._check_gpt_fields()
        self._set_config_attributes()
        names = [f.name for f in dataclasses.fields(TransformerConfig)]
        before = {name: getattr(self, name) for name in names}
        TransformerConfig.__post_init__(self)
        write_record.record(
            self,
            "finalize",
            {
                name: (getattr(self, name), before[name])
                for name in names
                if getattr(self, name) is not before[name]
            },
        )

    def clear_derived(self) -> None:
        """Undo the derivations of the last :meth:`finalize` (fields changed since are kept).

        Puts the config back to what the user wrote, so that code reading it before the next
        finalize (e.g. comm-overlap setup) sees the same values on every run.
        """
        for name, (after, before) in write_record.records(self, "finalize").items():
            if getattr(self, name) is after:
                setattr(self, name, before)
        write_record.forget(self, "finalize")

    def _check_gpt_fields(self) -> None:
        # Every bad value here, a wrong type included, is a ValueError (the contract).
        owner = "GPTModelProvider"
        check_int(owner, "seq_length", self.seq_length, type_error=ValueError)
        check_int(
            owner,
            "vocab_size",
            self.vocab_size,
            optional=True,
            unit="the tokenizer's size",
            type_error=ValueError,
        )
        check_int(
            owner,
            "make_vocab_size_divisible_by",
            self.make_vocab_size_divisible_by,
            type_error=ValueError,
        )
        check_choice(
            owner, "position_embedding_type", self.position_embedding_type, PositionEmbeddingType
        )
        check_buildable(
            describe_model(self), declared={f.name for f in dataclasses.fields(TransformerConfig)}
        )

    @property
    def padded_vocab_size(self) -> int:
        """``vocab_size`` rounded up to a multiple of ``make_vocab_size_divisible_by * TP size``."""
        if self.vocab_size is None:
            raise ValueError(
                "GPTModelProvider.vocab_size is not set: set it to the tokenizer's vocabulary size."
            )
        multiple = self.make_vocab_size_divisible_by * self.tensor_model_parallel_size
        return math.ceil(self.vocab_size / multiple) * multiple

    def layer_spec(self) -> ModuleSpec:
        """The transformer layer spec: the override if set, else TE's when TE works, else local."""
        spec = self.transformer_layer_spec
        if isinstance(spec, ModuleSpec):
            return spec
        if spec is not None:
            return spec(self)
        # Read at call time: HAVE_TE is what this process sees now, and may be set on the module.
        if comm_overlap.HAVE_TE:
            return get_gpt_layer_with_transformer_engine_spec(
                num_experts=self.num_moe_experts,
                moe_grouped_gemm=self.moe_grouped_gemm,
                qk_layernorm=self.qk_layernorm,
            )
        return get_gpt_layer_local_spec(
            num_experts=self.num_moe_experts,
            moe_grouped_gemm=self.moe_grouped_gemm,
            qk_layernorm=self.qk_layernorm,
            normalization=self.normalization,
        )

    def provide(
        self,
        pre_process: bool | None = None,
        post_process: bool | None = None,
        vp_stage: int | None = None,
    ) -> GPTModel:
        """Build the megatron-core ``GPTModel`` (one pipeline chunk) from this finalized config.

        ``pre_process`` / ``post_process`` (embedding / output layer on this chunk) default to
        whether this rank holds the first / last pipeline stage; ``vp_stage`` selects the
        virtual-pipeline chunk and is required when VPP > 1. megatron-core's model-parallel
        state must be initialized (``parallel_state.initialize_model_parallel``).
        """
        self.finalize()
        vpp = self.virtual_pipeline_model_parallel_size
        if vpp is not None and vpp > 1 and vp_stage is None:
            raise ValueError(
                f"virtual_pipeline_model_parallel_size={vpp}: pass provide(vp_stage=i) for each "
                f"chunk i in 0..{vpp - 1} (build_model does this)."
            )
        if pre_process is None:
            pre_process = self._holds_first_stage(vp_stage)
        if post_process is None:
            post_process = self._holds_last_stage(vp_stage)
        padded = self.padded_vocab_size
        if padded != self.vocab_size:
            logger.info(
                "GPT vocabulary padded from %d to %d (multiple of %d x TP %d).",
                self.vocab_size,
                padded,
                self.make_vocab_size_divisible_by,
                self.tensor_model_parallel_size,
            )
        return GPTModel(
            config=self,
            transformer_layer_spec=self.layer_spec(),
            vocab_size=padded,
            max_sequence_length=self.seq_length,
            pre_process=pre_process,
            post_process=post_process,
            fp16_lm_cross_entropy=self.fp16_lm_cross_entropy,
            parallel_output=self.parallel_output,
            share_embeddings_and_output_weights=self.share_embeddings_and_output_weights,
            position_embedding_type=self.position_embedding_type,
            rotary_percent=self.rotary_percent,
            rotary_base=self.rotary_base,
            rope_scaling=self.rope_scaling,
            rope_scaling_factor=self.rope_scaling_factor,
            scatter_embedding_sequence_parallel=self.scatter_embedding_sequence_parallel,
            seq_len_interpolation_factor=self.seq_len_interpolation_factor,
            vp_stage=vp_stage,
        )

    def _holds_first_stage(self, vp_stage: int | None) -> bool:
        from megatron.core import parallel_state

        if not parallel_state.model_parallel_is_initialized():
            return True
        first = parallel_state.is_pipeline_first_stage(ignore_virtual=True)
        vpp = self.virtual_pipeline_model_parallel_size
        return first and (vpp is None or vpp <= 1 or vp_stage == 0)

    def _holds_last_stage(self, vp_stage: int | None) -> bool:
        from megatron.core import parallel_state

        if not parallel_state.model_parallel_is_initialized():
            return True
        last = parallel_state.is_pipeline_last_stage(ignore_virtual=True)
        vpp = self.virtual_pipeline_model_parallel_size
        return last and (vpp is None or vpp <= 1 or vp_stage == vpp - 1)
