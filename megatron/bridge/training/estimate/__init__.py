"""What one training step costs: model FLOPs, communication bytes per parallelism, lower-bound times.

:func:`estimate_step` reads an :class:`~megatron.bridge.training.comm_overlap.OverlapPlan` (its
job description and overlap decisions) and returns an :class:`Estimate` for one GPU of the busiest pipeline stage:

- **model FLOPs** with the definition Megatron-LM and Megatron-Bridge use for "Model
  TFLOP/s/GPU" (see :meth:`ModelCost.flops_per_token`), and the FLOPs executed once activation
  recomputation is counted;
- **communication bytes** each GPU sends per step for TP, CP, PP, DP and EP, each with its
  formula (see :mod:`.comm`), the link it crosses (NVLink inside the NVLink domain, the
  network NIC otherwise), and the time at that link's peak bandwidth;
- **what the plan hides**: the overlap knob that takes each transfer off the critical path,
  when the plan turned it on.

Times are lower bounds: bytes over peak bandwidth, FLOPs over peak dense tensor-core
throughput. :attr:`Estimate.assumptions` lists what the numbers leave out.

The parts, lowest first: ``model_cost`` (:class:`ModelCost`: FLOPs, memory-bound bytes and
parameters of a model, made of ``model_flops``, ``model_bytes`` and ``model_params`` on
``model_shape``'s widths and layer counts; ``hybrid_pattern`` parses hybrid layer patterns),
``accuracy`` (how sure the estimate is: the error measured on published rows of the model's
family, read from ``accuracy.json``), ``result`` (:class:`StepCost`, :class:`CommEntry`,
:class:`Estimate` and their rendering), ``stage`` (the busiest pipeline stage), ``comm``
(bytes per parallelism and their link times), ``compute`` (one GPU of a stage's compute: FLOPs at the achievable fraction,
memory-bound bytes, the MoE and hybrid kernels' terms), ``step`` (:func:`estimate_step`, with
``step_assumptions`` stating what it assumes); ``memory`` (:func:`estimate_memory`: memory per GPU
of the busiest pipeline rank by part, against the GPU's capacity, and the cheapest fixes when
it does not fit; one file a part: ``report``, ``activations``, ``parts``, ``fixes``). Pure
arithmetic: importing it loads no torch.
"""

from megatron.bridge.training.estimate.memory import MemoryEstimate, estimate_memory
from megatron.bridge.training.estimate.model_cost import ModelCost
from megatron.bridge.training.estimate.result import CP_RING as CP_RING
from megatron.bridge.training.estimate.result import CommEntry, Estimate, Link, StepCost
from megatron.bridge.training.estimate.step import estimate_step

__all__ = [
    "CommEntry",
    "Estimate",
    "Link",
    "MemoryEstimate",
    "ModelCost",
    "StepCost",
    "estimate_memory",
    "estimate_step",
]
