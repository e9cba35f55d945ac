"""The GPT-3 recipe under the name upstream Megatron-Bridge exports it.

The name is the shipped recipe itself (same keywords, same ``ConfigContainer``). Name from
upstream's ``src/megatron/bridge/recipes/gpt/__init__.py``, for the model shipped here.
"""

from __future__ import annotations

from megatron.bridge.recipes.gpt3_175b import gpt3_175b as gpt3_175b_pretrain_config

__all__ = ["gpt3_175b_pretrain_config"]
