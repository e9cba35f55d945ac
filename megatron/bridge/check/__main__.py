"""``python -m megatron.bridge.check``: the ``bridge-overlap-check`` command."""

import sys

from megatron.bridge.check.cli import main

sys.exit(main())
