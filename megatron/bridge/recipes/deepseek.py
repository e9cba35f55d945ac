"""The DeepSeek recipes under the names upstream Megatron-Bridge exports them.

Each name is the shipped recipe itself (same keywords, same ``ConfigContainer``). Names from
upstream's ``src/megatron/bridge/recipes/deepseek/__init__.py``, for the models shipped here.
"""

from __future__ import annotations

from megatron.bridge.recipes.deepseek_v3 import deepseek_v3 as deepseek_v3_pretrain_config
from megatron.bridge.recipes.deepseek_v4_flash import (
    deepseek_v4_flash as deepseek_v4_flash_pretrain_config,
)

__all__ = ["deepseek_v3_pretrain_config", "deepseek_v4_flash_pretrain_config"]
