"""Model descriptions and request knobs the tests share.

A test that needs a realistic transformer takes a recipe's model and states what it changes,
so the architecture facts live once, in the recipe, and a test's model says how it differs.
The property tests draw a request's optional boolean knobs from :data:`bool_knob_requests`.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from megatron.bridge.recipes import recipe_spec
from megatron.bridge.training.job import ModelDescription


def recipe_job_model(name: str, *, precision: str = "bf16", **changes) -> ModelDescription:
    """Recipe ``name``'s model in ``precision`` (default BF16); ``changes`` replace model fields."""
    model = recipe_spec(name, precision=precision).job.model
    return dataclasses.replace(model, **changes)


def dense_model(**changes) -> ModelDescription:
    """A generic dense transformer: the Llama-3 8B recipe's model in BF16 at sequence 4096.

    32 layers, hidden 4096, 32 heads in 8 query groups, SwiGLU FFN 14336, RMSNorm, RoPE, no
    linear bias, untied embeddings, TP1; ``changes`` replace model fields (a size, the layout).
    """
    return recipe_job_model("llama3_8b", seq_length=4096, **changes)


def model_defaults(*names: str) -> dict:
    """The :class:`ModelDescription` defaults of the fields ``names`` (megatron-core's), to
    put fields back to them with ``dataclasses.replace``."""
    fields = {f.name: f for f in dataclasses.fields(ModelDescription)}
    return {name: fields[name].default for name in names}


#: Upstream ``CommOverlapConfig``'s optional boolean knobs (None: the rules decide), in its
#: order (Megatron-Bridge src/megatron/bridge/training/comm_overlap.py:387-398 at 067f987).
OPTIONAL_BOOL_KNOBS = (
    "overlap_p2p_comm",
    "batch_p2p_comm",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "overlap_param_gather_with_optimizer_step",
    "align_param_gather",
    "defer_embedding_wgrad_compute",
    "overlap_moe_expert_parallel_comm",
    "delay_wgrad_compute",
)

#: Keyword arguments of a request: each of :data:`OPTIONAL_BOOL_KNOBS` unset, on or off.
bool_knob_requests = st.fixed_dictionaries(
    {name: st.sampled_from([None, True, False]) for name in OPTIONAL_BOOL_KNOBS}
)
