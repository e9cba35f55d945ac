"""``bridge-overlap search``: which layouts of a model fit a GPU, and which is fastest.

Given a model (a recipe, or the model flags ``explain`` takes), a GPU, a precision, one or more
world sizes and a global batch size, the search enumerates the layouts megatron-core accepts
(TP, PP, VPP, CP, EP, ETP, micro-batch size, recompute, distributed optimizer or Megatron-FSDP,
uneven first and last pipeline stages), keeps those that fit by the memory estimate, plans
their overlap as ``explain`` does (with and without TP and EP overlap) and ranks them by
predicted tokens/s/GPU, in bands of the estimate's measured error, the simpler layout first
within a band.

The parts, one file each:

- ``space``: the layouts (:func:`~.space.layouts`), checked by the project's layout rules;
- ``overlap``: the overlap choices tried on each layout (TP overlap, EP overlap);
- ``fit``: the memory of a planned layout and the cheap floors before planning;
- ``bound``: an upper bound on a layout's predicted throughput, to skip what cannot rank;
- ``candidate``: one costed layout (:class:`Candidate`);
- ``rank``: the order of the rows: bands of the estimate's measured error, the simpler layout
  first within a band;
- ``engine``: the search itself (:func:`search`, :class:`SearchResult`);
- ``report``: the text and the JSON document of a result;
- ``plot``: the picture, predicted throughput against memory per GPU (the ``plot`` extra).

Pure arithmetic: importing it loads neither torch nor megatron-core.
"""

from megatron.bridge.search.candidate import Candidate
from megatron.bridge.search.engine import SearchResult, search

__all__ = ["Candidate", "SearchResult", "search"]
