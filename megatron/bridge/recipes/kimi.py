"""The Kimi K2 recipe under the name upstream Megatron-Bridge exports it.

The name is the shipped recipe itself (same keywords, same ``ConfigContainer``). Name from
upstream's ``src/megatron/bridge/recipes/kimi/__init__.py``, for the model shipped here.
"""

from __future__ import annotations

from megatron.bridge.recipes.kimi_k2 import kimi_k2 as kimi_k2_pretrain_config

__all__ = ["kimi_k2_pretrain_config"]
