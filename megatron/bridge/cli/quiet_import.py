"""What torch, megatron-core, Transformer Engine and NeMo-Run print while they are imported,
held off the command line's output (:func:`quiet_third_party_import`).

Imported on a machine without a GPU, they warn that CUDA, TE or Apex are missing and fall back
(megatron-core's ``optimizer/__init__.py``, ``models/backends.py``: "Transformer Engine and Apex
are not installed"; torch's ``utils/cpp_extension.py``: "No CUDA runtime is found"), and
megatron-core 0.19 compiles a docstring with an invalid escape (a ``SyntaxWarning``). The plan
describes the job where it runs, so those lines say nothing about it; a warning raised from a
file of this package is still shown.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator

__all__ = ["quiet_third_party_import"]

#: This package's folder (``megatron/bridge``): a warning raised from a file under it is ours.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ours(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE + os.sep)


@contextlib.contextmanager
def quiet_third_party_import() -> Iterator[None]:
    """Import heavy dependencies inside this block: their warnings and their log records of
    level WARNING and below are dropped; warnings raised from this package's files are shown
    afterwards, through the warning filters in force. The logging state is restored on exit
    (``logging.disable`` as it was; no logger or handler is touched).
    """
    disabled = logging.root.manager.disable
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logging.disable(max(disabled, logging.WARNING))
        try:
            yield
        finally:
            logging.disable(disabled)
    for warning in caught:
        if _ours(warning.filename):
            warnings.warn_explicit(
                warning.message,
                warning.category,
                warning.filename,
                warning.lineno,
                source=warning.source,
            )
