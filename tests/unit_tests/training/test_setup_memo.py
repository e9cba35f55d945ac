"""A setup that changed nothing is remembered, and its plan reused only on the same inputs.

Covers megatron/bridge/training/comm_overlap/setup_memo.py and its use in
``CommOverlapConfig.setup`` (request.py) and ``apply_plan`` (megatron_io.py). Real megatron-core
configs of a shipped recipe (GPT-3 175B, TP overlap with its published preset); Transformer
Engine is given as a ``TEStatus`` argument, so nothing is patched.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import logging
import math
import pickle
from collections.abc import Callable, Iterator
from unittest import mock

import pytest
import torch
import yaml

from megatron.bridge.recipes import gpt3_175b
from megatron.bridge.training import write_record
from megatron.bridge.training.comm_overlap import request as request_module
from megatron.bridge.training.comm_overlap.megatron_io import apply_plan
from megatron.bridge.training.comm_overlap.setup_memo import remember
from megatron.bridge.training.comm_overlap.te import TEStatus

TE_2_12 = TEStatus(available=True, version="2.12.0", reason="")
RUN = {"data_parallel_size": 8, "micro_batch_size": 1, "te_status": TE_2_12}


def _planned(*, finalized: bool = False):
    """GPT-3 175B's request and configs after two setups: the second changed nothing.

    ``finalized``: the model config finalized first (megatron-core derives its init methods,
    ``functools.partial`` objects, and the autocast dtype).
    """
    request, configs = _built()
    if finalized:
        configs[0].pipeline_dtype = torch.bfloat16
        configs[0].finalize()
    request.setup(*configs, **RUN)
    request.setup(*configs, **RUN)
    return request, configs


def _built():
    """GPT-3 175B's request (TP overlap with its published preset) and configs, not set up."""
    spec = gpt3_175b.spec(pp_size=4, vpp_size=2).changed(world_size=128, tp_comm_overlap=True)
    request, cfg = spec.request(), spec.build()
    return request, (cfg.model, cfg.optimizer, cfg.ddp)


@pytest.fixture(scope="module", params=["built", "finalized"])
def planned_once(request):
    return _planned(finalized=request.param == "finalized")


def _copy(value):
    # A deep copy that keeps the write records' sentinel (a bare object(), equal only to itself).
    return copy.deepcopy(value, {id(write_record.NOTHING): write_record.NOTHING})


@pytest.fixture
def planned(planned_once):
    # A copy per test. A deep copy drops the memo (its objects are new): one more setup, which
    # repeats the previous call and changes nothing, takes it again.
    request, configs = _copy(planned_once)
    assert request._setup_memo is None
    request.setup(*configs, **RUN)
    assert request._setup_memo is not None
    return request, configs


def _comparable(value):
    # Two deep copies hold distinct partials (megatron-core's init methods), which compare by
    # identity: each is read as what it calls.
    if isinstance(value, functools.partial):
        return (value.func, _comparable(value.args), _comparable(value.keywords))
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_comparable(item) for item in value)
    return value


def _arguments(**changes):
    run = {**RUN, **changes}
    return (
        run["data_parallel_size"],
        run["micro_batch_size"],
        run.get("global_batch_size"),
        run["te_status"],
        run.get("gpu"),
    )


def test_a_repeated_setup_reuses_the_plan_and_writes_nothing(planned):
    request, configs = planned
    assert request._setup_memo is not None
    before = [_copy(vars(config)) for config in configs]
    plan = request.resolved_plan
    with mock.patch.object(
        request_module, "setup_configs", wraps=request_module.setup_configs
    ) as resolve:
        again = request.setup(*configs, **RUN)
    assert resolve.call_count == 0
    assert again is plan
    assert [_comparable(vars(config)) for config in configs] == [_comparable(v) for v in before]


def test_the_reused_plan_logs_what_the_resolved_one_logged(planned, caplog):
    request, configs = planned
    request.overlap_param_gather_with_optimizer_step = True  # a plan with a warning
    request.setup(*configs, **RUN)
    with caplog.at_level(logging.INFO, logger="megatron.bridge.training.comm_overlap"):
        caplog.clear()
        request.setup(*configs, **RUN)  # resolved: it repeats the previous call, so remembered
        resolved = [r.getMessage() for r in caplog.records]
        caplog.clear()
        request.setup(*configs, **RUN)
        reused = [r.getMessage() for r in caplog.records]
    assert request._setup_memo is not None
    assert len(resolved) == 1 and reused == resolved


def test_only_a_setup_that_repeats_the_previous_call_is_remembered():
    spec = gpt3_175b.spec(pp_size=4, vpp_size=2).changed(world_size=128, tp_comm_overlap=True)
    request, cfg = spec.request(), spec.build()
    configs = (cfg.model, cfg.optimizer, cfg.ddp)
    assert request.setup(*configs, **RUN) is not None
    assert request._setup_memo is None  # the first setup wrote the plan
    for dp in (16, 8, 16, 8):  # each call's arguments differ from the previous one's
        request.setup(*configs, **{**RUN, "data_parallel_size": dp})
        assert request._setup_memo is None
    request.setup(*configs, **RUN)
    assert request._setup_memo is not None


def test_apply_plan_says_whether_it_changed_a_config(planned):
    request, configs = planned
    assert apply_plan(request.resolved_plan, *configs) is False
    configs[2].overlap_grad_reduce = False  # the user's own setting since
    assert apply_plan(request.resolved_plan, *configs) is True
    # An equal value of another type reads as the library's write (==), as the resolution reads
    # it: the plan's True is written back, and nothing the plan depends on changed.
    configs[2].overlap_grad_reduce = 1
    assert apply_plan(request.resolved_plan, *configs) is False
    assert configs[2].overlap_grad_reduce is True


def test_a_write_that_raises_leaves_the_earlier_writes_recorded(planned):
    request, (model, optimizer, ddp) = planned

    class Refusing(type(ddp)):
        def __setattr__(self, name, value):
            if name == "bucket_size":
                raise AttributeError("bucket_size is read-only here")
            super().__setattr__(name, value)

    refusing = copy.copy(ddp)
    object.__setattr__(refusing, "__class__", Refusing)
    write_record.forget(refusing, "plan")
    with pytest.raises(AttributeError, match="read-only"):
        apply_plan(request.resolved_plan, model, optimizer, refusing)
    written = write_record.records(refusing, "plan")
    assert {"overlap_grad_reduce", "overlap_param_gather"} <= set(written)
    assert "bucket_size" not in written


def test_a_private_attribute_counts_as_the_same_object(planned):
    request, configs = planned
    memo, arguments = request._setup_memo, _arguments()
    held = configs[0]._bridge_written
    object.__setattr__(configs[0], "_bridge_written", _copy(held))  # equal, another object
    assert not memo.holds(request, configs, arguments)
    object.__setattr__(configs[0], "_bridge_written", held)
    assert memo.holds(request, configs, arguments)


def test_a_deep_copy_or_a_pickle_of_the_request_drops_the_memo(planned):
    request, _configs = planned
    assert _copy(request)._setup_memo is None
    assert pickle.loads(pickle.dumps(request._setup_memo)) is None
    assert copy.copy(request)._setup_memo is request._setup_memo


def test_a_function_renamed_in_place_is_a_new_input(planned):
    request, configs = planned

    def activation(x):
        return x

    configs[0].activation_func = activation
    request.setup(*configs, **RUN)
    request.setup(*configs, **RUN)
    memo = request._setup_memo
    assert memo.holds(request, configs, _arguments())
    activation.__name__ = "renamed"  # the description reads the activation by its name
    assert not memo.holds(request, configs, _arguments())
    assert request.setup(*configs, **RUN).job.model.activation_func == "renamed"


def test_a_preset_replaced_by_an_equal_copy_is_a_new_input(planned):
    # The plan tells the recipe's own preset object from an equal one the user put there.
    request, configs = planned
    run = {**RUN, "gpu": "H100"}
    request.setup(*configs, **run)
    request.setup(*configs, **run)
    assert request._setup_memo.holds(request, configs, _arguments(gpu="H100"))
    fresh = _copy((request, configs))
    for r in (request, fresh[0]):
        r.tp_comm_overlap_cfg = copy.deepcopy(r.tp_comm_overlap_cfg)
    assert not request._setup_memo.holds(request, configs, _arguments(gpu="H100"))
    assert request.setup(*configs, **run).to_dict() == fresh[0].setup(*fresh[1], **run).to_dict()


def test_a_preset_mapping_edited_to_another_type_is_refused_again(planned):
    request, configs = planned
    request.tp_comm_overlap_cfg = {"qkv_fprop": {"method": "ring_exchange", "num_sm": 1}}
    request.setup(*configs, **RUN)
    request.setup(*configs, **RUN)
    assert request._setup_memo is not None
    request.tp_comm_overlap_cfg["qkv_fprop"]["num_sm"] = True
    with pytest.raises(TypeError, match="num_sm"):
        request.setup(*configs, **RUN)


# ------------------------------------------------------------------------------ every input


def _replacements(value) -> Iterator[tuple[str, Callable[[], object]]]:
    """Values to put in a field's place: a different value, and an equal one of another type."""
    if value is None:
        yield "0", lambda: 0
        return
    if isinstance(value, bool):
        yield "negated", lambda: not value
        yield "as int", lambda: int(value)
    elif isinstance(value, int) and not isinstance(value, enum.Enum):
        yield "plus one", lambda: value + 1
        yield "as float", lambda: float(value)
    elif isinstance(value, float):
        yield "changed", lambda: value + 1.0 if math.isfinite(value) else 0.0
        if value.is_integer():
            yield "as int", lambda: int(value)
    elif isinstance(value, str) and not isinstance(value, enum.Enum):
        yield "longer", lambda: value + "x"
    elif isinstance(value, list):
        yield "a new list", lambda: [*value, "x"]
    elif isinstance(value, dict):
        yield "a new dict", lambda: {**value, "x": 1}
    yield "None", lambda: None


def _retyped(value):
    # An equal value of another type, where there is one.
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not isinstance(value, enum.Enum):
        return float(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _edits_in_place(value) -> Iterator[tuple[str, Callable[[], None], Callable[[], None]]]:
    """Edits of a container in place, each with its undo, down to the dicts inside dicts: an item
    added, an item replaced by an equal one of another type, the order reversed."""
    if isinstance(value, list):
        yield "appended", lambda: value.append("x"), value.pop
    if isinstance(value, dict):
        yield "key added", lambda: value.__setitem__("x", 1), lambda: value.pop("x")
        if len(value) > 1:
            keys = list(value)

            def reorder(order):
                return lambda: [value.__setitem__(key, value.pop(key)) for key in order]

            yield "reordered", reorder(keys[::-1]), reorder(keys)
        for key, item in value.items():
            retyped = _retyped(item)
            if retyped is not None:
                yield (
                    f"{key!r} retyped",
                    functools.partial(value.__setitem__, key, retyped),
                    functools.partial(value.__setitem__, key, item),
                )
            for how, edit, undo in _edits_in_place(item):
                yield f"{key!r} {how}", edit, undo
    if isinstance(value, functools.partial):  # megatron-core's init methods
        for how, edit, undo in _edits_in_place(value.keywords):
            yield f"keywords {how}", edit, undo
    if isinstance(value, tuple):  # the write records: (value written, value replaced)
        for index, item in enumerate(value):
            for how, edit, undo in _edits_in_place(item):
                yield f"[{index}] {how}", edit, undo


def _config_changes(configs):
    for index, config in enumerate(configs):
        for name, value in vars(config).items():
            where = f"{type(config).__name__}.{name}"
            for how, new in _replacements(value):
                yield f"{where} {how}", index, name, new, None
            if name.startswith("_"):
                continue  # a private attribute is compared as the same object only
            for how, edit, undo in _edits_in_place(value):
                yield f"{where} {how}", index, name, edit, undo


def test_every_change_to_any_config_value_is_a_new_input(planned):
    request, configs = planned
    memo, arguments = request._setup_memo, _arguments()
    assert memo.holds(request, configs, arguments)
    partials = [v for v in vars(configs[0]).values() if isinstance(v, functools.partial)]
    assert bool(partials) == (configs[0].init_method is not None)
    checked = 0
    for label, index, name, change, undo in _config_changes(configs):
        config = configs[index]
        held = vars(config)[name]
        if undo is None:
            vars(config)[name] = change()
        else:
            change()
        seen = not memo.holds(request, configs, arguments)
        if undo is None:
            vars(config)[name] = held
        else:
            undo()
        assert seen, f"{label}: the memo still holds"
        assert memo.holds(request, configs, arguments), f"{label}: not undone"
        checked += 1
    # Every value of the three configs, and the userbuffers dicts inside them, were changed.
    assert checked > 2 * sum(len(vars(config)) for config in configs)


def test_every_change_to_a_request_field_or_an_argument_is_a_new_input(planned):
    request, configs = planned
    memo, arguments = request._setup_memo, _arguments()
    for field in dataclasses.fields(request):
        held = getattr(request, field.name)
        for how, new in _replacements(held):
            object.__setattr__(request, field.name, new())
            assert not memo.holds(request, configs, arguments), f"{field.name} {how}"
        object.__setattr__(request, field.name, held)
        assert memo.holds(request, configs, arguments)
    for changed in (
        {"data_parallel_size": 16},
        {"data_parallel_size": 8.0},
        {"micro_batch_size": 2},
        {"micro_batch_size": True},
        {"global_batch_size": 1024},
        {"te_status": TEStatus(available=True, version="2.13.0", reason="")},
        {"gpu": "H100"},
    ):
        assert not memo.holds(request, configs, _arguments(**changed)), changed
    assert not memo.holds(copy.copy(request), (*configs[:2], None), arguments)


def test_a_plan_edited_in_place_is_not_reused(planned):
    request, configs = planned
    ub = request.resolved_plan.value("tp_comm_overlap_cfg")
    next(iter(ub.values()))["num_sm"] = 1
    assert not request._setup_memo.holds(request, configs, _arguments())


def test_a_reused_plan_equals_a_fresh_resolution_after_each_change(planned):
    # The outcome of setup after a change, with the memo, is the outcome without one.
    changes = {
        "the user's DDP overlap": lambda r, c: setattr(c[2], "overlap_grad_reduce", False),
        "fewer layers": lambda r, c: setattr(c[0], "num_layers", 48),
        "a request field": lambda r, c: setattr(r, "overlap_p2p_comm", False),
        "a userbuffers knob in place": lambda r, c: (
            c[0].tp_comm_overlap_cfg["fc2_fprop"].update(num_sm=8)
        ),
        "nothing": lambda r, c: None,
    }
    for label, change in changes.items():
        with_memo, without = _copy(planned), _copy(planned)
        without[0]._setup_memo = None
        outcomes = []
        for request, configs in (with_memo, without):
            change(request, configs)
            plan = request.setup(*configs, **RUN)
            outcomes.append((plan.to_dict(), [_comparable(vars(config)) for config in configs]))
        assert outcomes[0] == outcomes[1], label


# ---------------------------------------------------------------------- nothing remembered


def test_a_preset_file_is_read_by_every_setup(tmp_path, planned):
    request, configs = planned
    path = tmp_path / "ub.yaml"
    path.write_text(yaml.safe_dump(request.preset.to_ub_cfgs()), encoding="utf-8")
    request.tp_comm_overlap_cfg = str(path)
    request.setup(*configs, **RUN)
    request.setup(*configs, **RUN)
    assert request._setup_memo is None
    ub = request.preset.to_ub_cfgs()
    ub["fc2_fprop"]["num_sm"] = ub["fc2_fprop"]["num_sm"] + 2
    path.write_text(yaml.safe_dump(ub), encoding="utf-8")
    plan = request.setup(*configs, **RUN)
    assert plan.value("tp_comm_overlap_cfg")["fc2_fprop"] == ub["fc2_fprop"]


def test_a_value_that_could_change_unseen_is_not_remembered(planned):
    request, configs = planned

    class Mutable:  # no __eq__: an edit of its attribute would not be seen
        size = 1

    configs[0].some_object = Mutable()
    assert remember(request, configs, _arguments(), request.resolved_plan) is None
    request.setup(*configs, **RUN)
    request.setup(*configs, **RUN)
    assert request._setup_memo is None


def test_a_users_value_the_plan_replaced_counts_as_an_input():
    # The user's own userbuffers dict, set straight on cfg.model before any setup: the plan
    # writes a copy there and the write record keeps the user's dict, which the resolution reads
    # again.
    request, configs = _built()
    mine = request.tp_comm_overlap_cfg.to_ub_cfgs()
    request.tp_comm_overlap_cfg, request.preset_chosen_by = None, None
    configs[0].tp_comm_overlap_cfg = mine
    request.setup(*configs, **RUN)
    request.setup(*configs, **RUN)
    assert request._setup_memo is not None
    mine["qkv_dgrad"]["num_sm"] += 1
    assert not request._setup_memo.holds(request, configs, _arguments())
    plan = request.setup(*configs, **RUN)
    assert plan.value("tp_comm_overlap_cfg")["qkv_dgrad"] == mine["qkv_dgrad"]


def test_a_preset_file_set_on_a_config_is_read_by_every_setup(tmp_path):
    request, configs = _built()
    ub = request.tp_comm_overlap_cfg.to_ub_cfgs()
    request.tp_comm_overlap_cfg, request.preset_chosen_by = None, None
    path = tmp_path / "ub.yaml"
    path.write_text(yaml.safe_dump(ub), encoding="utf-8")
    configs[0].tp_comm_overlap_cfg = str(path)
    request.setup(*configs, **RUN)
    request.setup(*configs, **RUN)  # the field now holds the plan's dict; the record, the path
    assert request._setup_memo is None
    ub["qkv_dgrad"]["num_sm"] += 1
    path.write_text(yaml.safe_dump(ub), encoding="utf-8")
    assert (
        request.setup(*configs, **RUN).value("tp_comm_overlap_cfg")["qkv_dgrad"]
        == (ub["qkv_dgrad"])
    )


def test_a_value_the_memo_cannot_copy_leaves_setup_as_it_is(planned):
    request, configs = planned
    loop: list = []
    loop.append(loop)  # a field the resolution never reads, holding itself
    configs[1].notes = loop
    for _ in range(3):
        assert request.setup(*configs, **RUN) is request.resolved_plan
    assert request._setup_memo is None


def test_a_reused_plan_leaves_the_preset_as_its_finalize_loaded_it(planned):
    request, configs = planned
    chosen = request.tp_comm_overlap_cfg
    request.tp_comm_overlap_cfg = {"qkv_fprop": {"method": "ring_exchange", "num_sm": 1}}
    request.finalize()  # another preset loaded, then the field set back
    request.tp_comm_overlap_cfg = chosen
    request.setup(*configs, **RUN)
    assert request.preset is chosen
