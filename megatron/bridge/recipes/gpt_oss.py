"""The gpt-oss recipe under the name upstream Megatron-Bridge exports it.

The name is the shipped recipe itself (same keywords, same ``ConfigContainer``). Name from
upstream's ``src/megatron/bridge/recipes/gpt_oss/__init__.py``, for the model shipped here.
"""

from __future__ import annotations

from megatron.bridge.recipes.gpt_oss_120b import gpt_oss_120b as gpt_oss_120b_pretrain_config

__all__ = ["gpt_oss_120b_pretrain_config"]
