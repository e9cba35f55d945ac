"""``bridge-overlap``: read the overlap plan of a layout before launching it.

``bridge-overlap explain`` prints, for plain parallel sizes (or a recipe), every overlap
decision with its source and reason, the userbuffers preset and whether it fits the model, the
launch environment the NeMo-Run plugin would set, what each overlap hides in a step, and the
warnings with their fixes. It needs no GPU and no cluster, and imports neither torch,
megatron-core nor Transformer Engine (only a recipe that builds a container, or KEY=VALUE
overrides, need megatron-core).

Flags and recipes reach the same plan: flags become a :class:`RecipeSpec` (:func:`flags_spec`),
a shipped recipe has one, and ``RecipeSpec.plan`` checks the layout (the errors megatron-core
would raise at cluster start) and runs the rules; a recipe that builds a container is resolved
the way ``runtime_config_update`` resolves it. The launch environment comes from one function
for all of them.

The parts, one file each:

- ``parser``: the command line, its subcommands and their flags' bounds (:func:`build_parser`);
- ``job_arguments``: the flags that describe the job, shared by ``explain`` and ``search``;
- ``argument_types``: the argparse types of the flags that take more than a number;
- ``flags``: the job the flags describe (:data:`FLAG_FIELDS`, :data:`REFERENCE`,
  :func:`flags_spec`);
- ``recipes``: ``bridge-overlap recipes`` (:func:`list_recipes`);
- ``planning``: ``bridge-overlap explain`` (:func:`explain`);
- ``container``: a recipe's ``ConfigContainer`` with KEY=VALUE overrides (the only part that
  imports megatron-core; ``planning`` imports it only for overrides, after their text is
  checked, and ``gpu=``/``mixed_precision=`` are ``--gpu``/``--precision``:
  :func:`~megatron.bridge.cli.flags.overrides_as_flags`);
- ``quiet_import``: the warnings torch and megatron-core print while imported, kept off the
  screen;
- ``json_document``: the ``--json`` document (:func:`document`, :data:`JSON_SCHEMA_VERSION`);
- ``render``: the text ``explain`` prints;
- ``errors``: the exit codes and the message of each failure;
- ``entry``: :func:`main`, which the console script (:mod:`megatron.bridge.console`) runs.
"""

from megatron.bridge.cli.entry import main
from megatron.bridge.cli.errors import UsageError
from megatron.bridge.cli.flags import FLAG_FIELDS, REFERENCE, flag_changes, flags_spec
from megatron.bridge.cli.json_document import JSON_SCHEMA_VERSION, document
from megatron.bridge.cli.parser import build_parser
from megatron.bridge.cli.planning import explain
from megatron.bridge.cli.recipes import list_recipes
from megatron.bridge.exit_codes import (
    EXIT_BROKEN_PIPE,
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_REFUSED,
)

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_CODES",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_OUTPUT",
    "EXIT_REFUSED",
    "FLAG_FIELDS",
    "JSON_SCHEMA_VERSION",
    "REFERENCE",
    "UsageError",
    "build_parser",
    "document",
    "explain",
    "flag_changes",
    "flags_spec",
    "list_recipes",
    "main",
]
