"""The Llama recipes under the names upstream Megatron-Bridge exports them.

Code written for upstream runs unchanged: ``from megatron.bridge.recipes.llama import
llama3_70b_pretrain_config`` is the ``llama3_70b`` recipe (one function, not a copy), taking the
same keywords (``gpu``, ``precision``, ``tp_size``, ...) and returning its ``ConfigContainer``.
Names from upstream's ``src/megatron/bridge/recipes/llama/__init__.py``, for the models shipped
here. The Llama-3 provider the recipes share is :mod:`megatron.bridge.recipes.llama_provider`
(still importable from here).
"""

from __future__ import annotations

from megatron.bridge.recipes.llama3_8b import llama3_8b as llama3_8b_pretrain_config
from megatron.bridge.recipes.llama3_70b import llama3_70b as llama3_70b_pretrain_config
from megatron.bridge.recipes.llama31_405b import llama31_405b as llama31_405b_pretrain_config
from megatron.bridge.recipes.llama_provider import LLAMA3_PROVIDER, llama3_provider

__all__ = [
    "LLAMA3_PROVIDER",
    "llama3_8b_pretrain_config",
    "llama3_70b_pretrain_config",
    "llama3_provider",
    "llama31_405b_pretrain_config",
]
