"""The Qwen3 MoE recipes under the names upstream Megatron-Bridge exports them.

Each name is the shipped recipe itself (same keywords, same ``ConfigContainer``). Names from
upstream's ``src/megatron/bridge/recipes/qwen/__init__.py``, for the models shipped here.
"""

from __future__ import annotations

from megatron.bridge.recipes.qwen3_30b_a3b import qwen3_30b_a3b as qwen3_30b_a3b_pretrain_config
from megatron.bridge.recipes.qwen3_235b_a22b import (
    qwen3_235b_a22b as qwen3_235b_a22b_pretrain_config,
)

__all__ = ["qwen3_30b_a3b_pretrain_config", "qwen3_235b_a22b_pretrain_config"]
