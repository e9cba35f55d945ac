"""Tell megatron-core refusing a configuration apart from any other exception.

megatron-core validates its configs in ``TransformerConfig.__post_init__`` (which a provider's
``finalize`` re-runs), ``ModelParallelConfig.__post_init__`` and their siblings, with ``assert``
as often as with ``raise ValueError``. Such an error is about the configuration the user gave,
not a bug of ours, so a command reports it as invalid input, quoting megatron-core.

Imports nothing of megatron-core: it reads the exception's traceback only.
"""

from __future__ import annotations

import linecache
import traceback

__all__ = ["megatron_core_rejection"]

#: The exception types megatron-core's config validation raises. ZeroDivisionError is a size the
#: user set to 0 reaching megatron-core's arithmetic (``num_layers=0`` in
#: ``TransformerConfig.__post_init__``'s ``scaled_init_method_normal``).
_REJECTION_TYPES = (AssertionError, ValueError, TypeError, RuntimeError, ZeroDivisionError)


def _is_megatron_core(module: str) -> bool:
    return module == "megatron.core" or module.startswith("megatron.core.")


def megatron_core_rejection(exc: BaseException) -> str | None:
    """megatron-core's message when ``exc`` is megatron-core refusing a configuration, else None.

    ``exc`` counts as such when it is an ``AssertionError``, ``ValueError``, ``TypeError``,
    ``RuntimeError`` or ``ZeroDivisionError`` raised by code in a ``megatron.core`` module (the innermost frame of its
    traceback). The text is megatron-core's message followed by the exception type and the
    module; a bare ``assert`` without a message is quoted by its source line instead.
    """
    if not isinstance(exc, _REJECTION_TYPES) or exc.__traceback__ is None:
        return None
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = str(tb.tb_frame.f_globals.get("__name__", ""))
    if not _is_megatron_core(module):
        return None
    message = str(exc).strip()
    if not message:
        # A multi-line ``assert (...)`` spans several lines; the frame summary knows its end.
        summary = traceback.extract_tb(tb, limit=1)[-1]
        first = summary.lineno or tb.tb_lineno
        last = summary.end_lineno or first
        filename = tb.tb_frame.f_code.co_filename
        source = " ".join(
            linecache.getline(filename, n).strip() for n in range(first, last + 1)
        ).strip()
        message = f"failed check `{source}`" if source else f"failed check at line {first}"
    return f"{message} ({type(exc).__name__} in {module})"
