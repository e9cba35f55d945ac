"""The Nemotron 3 recipes under the names upstream Megatron-Bridge exports them.

Each name is the shipped recipe itself (same keywords, same ``ConfigContainer``). Names from
upstream's ``src/megatron/bridge/recipes/nemotronh/__init__.py``, for the models shipped here
(upstream has no Nemotron 3.5 Lightning recipe: use ``nemotron_3_5_lightning`` by its name).
"""

from __future__ import annotations

from megatron.bridge.recipes.nemotron_3_nano import (
    nemotron_3_nano as nemotron_3_nano_pretrain_config,
)
from megatron.bridge.recipes.nemotron_3_super import (
    nemotron_3_super as nemotron_3_super_pretrain_config,
)
from megatron.bridge.recipes.nemotron_3_ultra import (
    nemotron_3_ultra as nemotron_3_ultra_pretrain_config,
)

__all__ = [
    "nemotron_3_nano_pretrain_config",
    "nemotron_3_super_pretrain_config",
    "nemotron_3_ultra_pretrain_config",
]
