"""Switching an MoE model to megatron-core's flex token dispatcher (DeepEP, HybridEP).

megatron-core reads ``moe_flex_dispatcher_backend`` only when ``moe_token_dispatcher_type`` is
``"flex"``: setting the backend alone dispatches as before. :func:`apply_flex_dispatcher_backend`
(upstream Megatron-Bridge's name and signature) sets both, as recipes written for
Megatron-Bridge expect.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, get_args

__all__ = ["FlexDispatcherBackend", "apply_flex_dispatcher_backend"]

logger = logging.getLogger(__name__)

FlexDispatcherBackend = Literal["deepep", "hybridep", "ncclep"]
"""The flex dispatcher's backends megatron-core's ``TransformerConfig`` accepts
(``moe_flex_dispatcher_backend``)."""


def apply_flex_dispatcher_backend(
    model_config: Any, moe_flex_dispatcher_backend: str | None = None
) -> None:
    """Make ``model_config`` (a megatron-core ``TransformerConfig``) dispatch through ``flex``.

    Sets ``moe_token_dispatcher_type="flex"`` and ``moe_flex_dispatcher_backend``, and turns
    ``moe_shared_expert_overlap`` off (EP all-to-all overlap, which the flex backends serve,
    refuses it), with a warning when it was on. A backend megatron-core does not know is a
    ``ValueError`` listing those it does; a model without experts is left as it is, with a
    warning (it has no tokens to dispatch). Nothing here reads the visible GPU (upstream's
    version checks it and falls back to alltoall on one a backend does not support): the job's
    GPU is ``cfg.gpu``, known where the container is resolved.
    """
    backends = get_args(FlexDispatcherBackend)
    if moe_flex_dispatcher_backend not in backends:
        raise ValueError(
            f"moe_flex_dispatcher_backend={moe_flex_dispatcher_backend!r} is not a flex "
            f"dispatcher backend; choose one of {list(backends)}."
        )
    if not model_config.num_moe_experts:
        logger.warning(
            "apply_flex_dispatcher_backend(%r): the model has no experts (num_moe_experts=%r), "
            "so there is nothing to dispatch; the model config is left as it is.",
            moe_flex_dispatcher_backend,
            model_config.num_moe_experts,
        )
        return
    if model_config.moe_shared_expert_overlap:
        logger.warning(
            "apply_flex_dispatcher_backend(%r): moe_shared_expert_overlap turned OFF; EP "
            "all-to-all overlap, which the flex backends serve, cannot run beside it.",
            moe_flex_dispatcher_backend,
        )
    model_config.moe_token_dispatcher_type = "flex"
    model_config.moe_flex_dispatcher_backend = moe_flex_dispatcher_backend
    model_config.moe_shared_expert_overlap = False
