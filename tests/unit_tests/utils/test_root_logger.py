"""root_logger_preserved (megatron/bridge/utils/root_logger.py) around real NeMo-Run experiments."""

import gc
import logging
import weakref

import nemo_run as run
import pytest

from megatron.bridge.utils.root_logger import root_logger_preserved


def _make_and_drop_experiment(tmp_path) -> weakref.ref:
    exp = run.Experiment("logger-guard", executor=run.LocalExecutor(), base_dir=str(tmp_path))
    return weakref.ref(exp)


def test_experiment_replaces_root_handlers_without_the_guard(tmp_path):
    # The fault being guarded against, shown on the real object: creating an experiment drops
    # every root handler, and its finalizer removes whichever handler is first by then.
    root = logging.getLogger()
    marker = logging.NullHandler()
    saved_handlers, saved_level = list(root.handlers), root.level
    root.addHandler(marker)
    try:
        ref = _make_and_drop_experiment(tmp_path)
        assert marker not in root.handlers
        assert [type(h).__name__ for h in root.handlers] == ["RichHandler"]
        root.handlers.insert(0, marker)
        gc.collect()
        assert ref() is None
        assert marker not in root.handlers  # removed by Experiment.__del__
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)


def test_guard_restores_handlers_and_level_and_finalizes_inside(tmp_path):
    root = logging.getLogger()
    marker = logging.NullHandler()
    root.addHandler(marker)
    try:
        before, level = list(root.handlers), root.level
        with root_logger_preserved():
            ref = _make_and_drop_experiment(tmp_path)
            assert marker not in root.handlers
        assert ref() is None, "the experiment outlived the guard; its __del__ would run later"
        assert root.handlers == before
        assert all(a is b for a, b in zip(root.handlers, before, strict=True))
        assert root.level == level
        gc.collect()  # nothing left to finalize: the restored handlers stay
        assert root.handlers == before
    finally:
        root.removeHandler(marker)


def test_guard_restores_on_error():
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    with pytest.raises(RuntimeError, match="boom"), root_logger_preserved():
        logging.basicConfig(level=logging.DEBUG, handlers=[logging.NullHandler()], force=True)
        raise RuntimeError("boom")
    assert root.handlers == before
    assert root.level == level
