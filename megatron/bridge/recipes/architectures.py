"""The provider of the mixture-of-experts and hybrid recipes.

Every recipe of a model NVIDIA publishes (``deepseek_v3``, ``kimi_k2``, ``qwen3_*``,
``gpt_oss_120b``, ``nemotron_3_*``) describes its model with megatron-core's field names (its
entry of ``models.json``, which starts from the shared ``moe_transformer`` fields where the
model is one; :mod:`megatron.bridge.recipes.models`) and names :func:`model_provider` as its
provider. :meth:`RecipeSpec.build` writes the whole
description over the provider's ``GPTModelProvider``, so the container holds the architecture
as the description gives it. Building the model itself follows megatron-core: a GPT model with
the description's layers; multi-latent attention needs megatron-core's ``MLATransformerConfig``
and a hybrid layer pattern its ``HybridModel``, which ``GPTModelProvider.provide`` does not
build (plan those recipes without torch, and build their model with upstream's provider).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from megatron.bridge.models.gpt_provider import GPTModelProvider

__all__ = ["MODEL_PROVIDER", "model_provider"]

MODEL_PROVIDER = "megatron.bridge.recipes.architectures:model_provider"
"""Target of :func:`model_provider`, as a recipe spec names it."""


def model_provider(**fields: Any) -> GPTModelProvider:
    """A ``GPTModelProvider`` for a recipe to write its description over.

    ``fields`` set provider fields; a name the provider does not declare (one megatron-core reads
    off the config by name, such as ``yarn_rotary_scaling_factor``) goes to its
    ``config_attributes``. A recipe writes its whole job description over the result
    (``job_configs.write_model``). Imports torch and megatron-core when called.
    """
    from megatron.bridge.models.gpt_provider import GPTModelProvider

    declared = {f.name for f in dataclasses.fields(GPTModelProvider)}
    return GPTModelProvider(
        **{k: v for k, v in fields.items() if k in declared},
        config_attributes={k: v for k, v in fields.items() if k not in declared},
    )
