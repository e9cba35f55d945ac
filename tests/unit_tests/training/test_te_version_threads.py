"""``megatron_core_sees`` on several threads at once (comm_overlap/te.py): megatron-core's TE
version cache is one per process, so each block reads its own version and the cache ends as it
began, however the threads interleave; ``runtime_config_update`` on threads likewise."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from megatron.core import utils as mcore_utils

from megatron.bridge.recipes import get_recipe, recipe_spec
from megatron.bridge.training.comm_overlap import te_status
from megatron.bridge.training.comm_overlap.te import megatron_core_sees
from megatron.bridge.training.config import runtime_config_update

_THREADS = 8


def test_each_threads_block_reads_its_own_version_and_the_cache_ends_as_it_began():
    installed = mcore_utils.get_te_version()
    start = threading.Barrier(_THREADS)

    def block(minor: int) -> tuple[str, str]:
        version = f"2.{minor}"
        start.wait()  # every thread enters at once
        with megatron_core_sees(te_status("assume", version=version)):
            first = str(mcore_utils.get_te_version())
            time.sleep(0.02)  # long enough for every other thread to try its own block
            return first, str(mcore_utils.get_te_version())

    with ThreadPoolExecutor(_THREADS) as pool:
        seen = list(pool.map(block, range(_THREADS)))
    assert seen == [(f"2.{minor}", f"2.{minor}") for minor in range(_THREADS)]
    assert mcore_utils.get_te_version() == installed


def test_concurrent_runtime_config_updates_leave_the_installed_version():
    installed = mcore_utils.get_te_version()
    world = recipe_spec("qwen3_30b_a3b").num_gpus
    configs = [get_recipe("qwen3_30b_a3b") for _ in range(4)]
    start = threading.Barrier(len(configs))

    def update(cfg):
        start.wait()
        return runtime_config_update(cfg, world, te="assume")

    with ThreadPoolExecutor(len(configs)) as pool:
        plans = list(pool.map(update, configs))
    assert all(plan is not None for plan in plans)
    assert mcore_utils.get_te_version() == installed
