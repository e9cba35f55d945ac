"""``python -m megatron.bridge.cli``: the ``bridge-overlap`` command."""

import sys

from megatron.bridge.cli.entry import main

sys.exit(main())
