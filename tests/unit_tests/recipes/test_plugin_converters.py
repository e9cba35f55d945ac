"""Script-args converters of the NeMo-Run plugins (megatron/bridge/recipes/run_plugins/).

Converters follow upstream Megatron-Bridge's convention: called once with the plugin's
``*ScriptArgs`` dataclass, returning the list of script arguments.
"""

import nemo_run as run
import pytest

from megatron.bridge.recipes.run_plugins import (
    NsysPlugin,
    NsysPluginScriptArgs,
    PerfEnvPlugin,
    PerfEnvPluginScriptArgs,
)


def _script(args=None):
    return run.Script(path="/opt/megatron/pretrain.py", entrypoint="python", args=list(args or []))


def upstream_perf_env_converter(args: PerfEnvPluginScriptArgs) -> list[str]:
    """Written for upstream Megatron-Bridge: reads the dataclass's attributes."""
    out = ["--manual-gc"] if args.enable_manual_gc else []
    return [*out, "--manual-gc-interval", str(args.manual_gc_interval)]


def upstream_nsys_converter(args: NsysPluginScriptArgs) -> list[str]:
    """Written for upstream Megatron-Bridge: reads the dataclass's four upstream attributes."""
    return [
        "--profile",
        "--profile-step-start",
        str(args.profile_step_start),
        "--profile-step-end",
        str(args.profile_step_end),
        "--profile-ranks",
        *[str(r) for r in args.profile_ranks],
        *(["--record-shapes"] if args.record_shapes else []),
    ]


def _recording(convert):
    """``convert`` wrapped to record every dataclass it is called with: (wrapper, calls)."""
    seen = []

    def converter(args):
        seen.append(args)
        return convert(args)

    return converter, seen


def test_upstream_converter_works_for_perf_env_plugin():
    converter, seen = _recording(upstream_perf_env_converter)
    task = _script()
    PerfEnvPlugin(manual_gc_interval=25, script_args_converter_fn=converter).setup(
        task, run.LocalExecutor()
    )
    # Called once, with the dataclass.
    assert seen == [PerfEnvPluginScriptArgs(enable_manual_gc=True, manual_gc_interval=25)]
    assert task.args == ["--manual-gc", "--manual-gc-interval", "25"]


def test_upstream_converter_works_for_nsys_plugin():
    converter, seen = _recording(upstream_nsys_converter)
    task = _script()
    NsysPlugin(
        profile_step_start=3,
        profile_step_end=5,
        profile_ranks=[0, 4],
        record_shapes=True,
        script_args_converter_fn=converter,
    ).setup(task, run.LocalExecutor())
    assert len(seen) == 1 and isinstance(seen[0], NsysPluginScriptArgs)
    assert (seen[0].profile_ranks, seen[0].record_shapes) == ([0, 4], True)
    assert task.args == [
        "--profile",
        "--profile-step-start",
        "3",
        "--profile-step-end",
        "5",
        "--profile-ranks",
        "0",
        "4",
        "--record-shapes",
    ]


def test_nsys_record_shapes_unset_reaches_an_upstream_converter_as_false():
    converter, seen = _recording(lambda args: [])
    NsysPlugin(
        profile_step_start=1,
        profile_step_end=2,
        script_args_converter_fn=converter,
    ).setup(_script(), run.LocalExecutor())
    assert seen[0].record_shapes is False and seen[0].record_shapes_set is False


def test_default_converters_keep_hydra_overrides():
    perf, nsys = _script(), _script()
    PerfEnvPlugin(manual_gc_interval=7).setup(perf, run.LocalExecutor())
    NsysPlugin(profile_step_start=10, profile_step_end=12, record_memory_history=True).setup(
        nsys, run.LocalExecutor()
    )
    assert perf.args == ["train.manual_gc=true", "train.manual_gc_interval=7"]
    assert nsys.args == [
        "profiling.use_nsys_profiler=true",
        "profiling.profile_step_start=10",
        "profiling.profile_step_end=12",
        "profiling.profile_ranks=[0]",
        "profiling.record_memory_history=true",
    ]


def test_argument_already_on_the_script_wins_with_its_value():
    task = _script(["--manual-gc-interval", "5"])
    PerfEnvPlugin(script_args_converter_fn=upstream_perf_env_converter).setup(
        task, run.LocalExecutor()
    )
    assert task.args == ["--manual-gc-interval", "5", "--manual-gc"]


@pytest.mark.parametrize("plugin_cls", [PerfEnvPlugin, NsysPlugin])
@pytest.mark.parametrize(
    ("returned", "shown"),
    [
        ("train.manual_gc=true", r"got 'train\.manual_gc=true'"),
        (("a=1",), r"got \('a=1',\)"),
        (["a=1", 2], r"got \['a=1', 2\]"),
        (None, "got None"),
    ],
)
def test_converter_returning_wrong_type_is_a_clear_type_error(plugin_cls, returned, shown):
    kwargs = {"profile_step_start": 1, "profile_step_end": 2} if plugin_cls is NsysPlugin else {}
    plugin = plugin_cls(script_args_converter_fn=lambda args: returned, **kwargs)
    with pytest.raises(
        TypeError,
        match=rf"{plugin_cls.__name__}\.script_args_converter_fn must return a list of str, {shown}",
    ):
        plugin.setup(_script(), run.LocalExecutor())
