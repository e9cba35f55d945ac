"""Embedding wgrad deferral: ``defer_embedding_wgrad_compute`` and ``wgrad_deferral_limit``."""

from __future__ import annotations

from megatron.bridge.training.comm_overlap.rules.planner import Planner

__all__ = ["decide_wgrad_deferral"]


def decide_wgrad_deferral(planner: Planner) -> None:
    """Decide embedding wgrad deferral and its limit."""
    f, user = planner.job, planner.user
    defer, limit = user.defer_embedding_wgrad_compute, user.wgrad_deferral_limit
    if defer:
        if f.pp_size == 1:
            raise ValueError(
                "defer_embedding_wgrad_compute=True needs pipeline parallelism (it hides the "
                "embedding wgrad in the pipeline flush); drop it or set PP > 1."
            )
        if not f.model.gradient_accumulation_fusion:
            raise ValueError(
                "defer_embedding_wgrad_compute=True needs gradient_accumulation_fusion=True on the model config."
            )
        if limit is not None and limit < 0:
            raise ValueError(
                "wgrad_deferral_limit must be >= 0 when defer_embedding_wgrad_compute=True "
                "(0 defers every micro-batch)."
            )
        planner.set("defer_embedding_wgrad_compute", True, "user", "set in CommOverlapConfig")
        if limit is None:
            planner.set(
                "wgrad_deferral_limit", 0, "derived", "deferral on: 0 defers every micro-batch"
            )
        else:
            planner.set("wgrad_deferral_limit", limit, "user", "set in CommOverlapConfig")
        return
    planner.set(
        "defer_embedding_wgrad_compute",
        False,
        "user" if defer is False else "default",
        "set in CommOverlapConfig" if defer is False else "off unless requested",
    )
    if limit is not None and limit != -1:
        planner.warnings.append(
            f"wgrad_deferral_limit={limit} has no effect without defer_embedding_wgrad_compute=True."
        )
    planner.set(
        "wgrad_deferral_limit",
        -1 if limit is None else limit,
        "default" if limit is None else "user",
        "deferral is off",
    )
