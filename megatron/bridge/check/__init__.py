"""``bridge-overlap-check``: the overlap plan of a recipe on a real multi-process world.

``bridge-overlap explain`` plans a layout on paper; this command runs it. Launched by torchrun::

    torchrun --standalone --nproc-per-node 4 -m megatron.bridge.check --recipe gpt3_175b --tiny

every rank builds the recipe's config, initializes megatron-core's model-parallel state for its
layout, resolves the config with ``runtime_config_update`` and builds its model chunks with the
recipe's own provider (``build_model``). The ranks then all-gather their overlap plans, launch
environments and per-chunk parameter counts, and rank 0 prints the plan, a table of every
rank's chunks and any disagreement. Without torchrun it runs as a one-process world.

``--tiny`` keeps the shape of the recipe's parallelism but fits it to the world: every split
the recipe uses (TP, PP with VPP, CP, then EP) becomes 2 while the world has room for it, the
rest is data parallel, and the model shrinks (``tiny``) to about one layer per pipeline chunk
with small widths, its pipeline split (custom layout, first/last stage sizes, embedding and
loss counted as layers), experts, MLA and hybrid pattern still valid on that layout, so it
builds on a laptop. ``--tp/--pp/--vpp/--cp`` set a size exactly. ``--gpu`` and ``--precision``
change the recipe as ``bridge-overlap explain``'s flags do (the same choices; its preset,
precision and launch environment follow); without ``--gpu`` the visible GPU is used.
``--gpus-per-node`` and ``--nvlink-domain`` name a cluster other than the GPU catalogue's, as
``explain``'s do (whether a TP group stays in one NVLink domain, HybridEP's domain); without
``--gpus-per-node`` a world over several nodes takes torchrun's ranks per node
(``LOCAL_WORLD_SIZE``).

Without a GPU the ranks talk over gloo and build on the CPU with megatron-core's local layer
spec (Transformer Engine needs CUDA). That spec's torch norm layers support neither sequence
parallelism nor a zero-centred gamma, and megatron-core copies tied embeddings between pipeline
stages with a CUDA all-reduce, so those settings are turned off and the report says so (TP comm
overlap needs sequence parallelism, so it is refused on such a run). With CUDA the ranks use
NCCL, TE userbuffers are initialized when TP overlap survives, and a few forward/backward steps
on mock data time the plan's overlap against all overlap off. Variables such as
``CUDA_DEVICE_MAX_CONNECTIONS`` only act when set before CUDA starts: put the launch
environment the report shows on the launcher (``PerfEnvPlugin`` does); the build warns when the
live one differs.

Exit codes, the same on every rank: 0 all ranks agree; 1 they disagree; 2 an error on any rank
(each rank catches its own, the ranks all-gather their status, then all exit; a command line
argparse rejects exits 2 before any group is joined). torchrun exits 0 when every worker does
and 1 otherwise; the check's code is the last line of rank 0's report (``exit_code`` with
``--json``) and each worker's is in torchrun's failure summary.

The parts, lowest first: ``layout`` (the layout fitted to the world), ``tiny`` (the tiny model),
``config`` (the recipe's config as the check runs it), ``compare`` (the ranks' reports compared),
``cuda`` (step timings against all overlap off), ``ranks`` (one rank's report, the all-gather),
``render`` (the report as text), ``cli`` (the command and its exit codes).
"""

from megatron.bridge.check.cli import (
    EXIT_DISAGREE,
    EXIT_ERROR,
    EXIT_OK,
    JSON_SCHEMA_VERSION,
    build_parser,
    main,
)
from megatron.bridge.check.compare import SHARED_KEYS, compare_reports
from megatron.bridge.check.config import build_check_config
from megatron.bridge.check.cuda import CUDA_STEPS, OVERLAP_FIELDS, overlap_off_request
from megatron.bridge.check.layout import Layout, check_overrides_fit, fit_layout
from megatron.bridge.check.ranks import CUDA_SEED, gather_outcomes
from megatron.bridge.check.tiny import TINY_HEAD_DIM, TINY_VOCAB_SIZE, tiny_model

__all__ = [
    "CUDA_SEED",
    "CUDA_STEPS",
    "EXIT_DISAGREE",
    "EXIT_ERROR",
    "EXIT_OK",
    "JSON_SCHEMA_VERSION",
    "OVERLAP_FIELDS",
    "SHARED_KEYS",
    "TINY_HEAD_DIM",
    "TINY_VOCAB_SIZE",
    "Layout",
    "build_check_config",
    "build_parser",
    "check_overrides_fit",
    "compare_reports",
    "fit_layout",
    "gather_outcomes",
    "main",
    "overlap_off_request",
    "tiny_model",
]
