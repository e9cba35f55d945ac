"""Model providers: megatron-core configs that build their model."""

from megatron.bridge.models.gpt_provider import GPTModelProvider

__all__ = ["GPTModelProvider"]
