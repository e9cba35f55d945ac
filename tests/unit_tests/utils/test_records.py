"""``record`` against the standard library: the same class body made a dataclass both ways must
build, refuse, compare, hash and print alike, for any field options, class options and values;
and every record class of the package takes its ``__init__`` ready-made from ``record_code``."""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megatron.bridge.utils import record_code
from megatron.bridge.utils.records import INIT_SOURCES, record
from tests.unit_tests.repo_scripts import load_script

render_records = load_script("scripts/render_records.py")

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([1.0, -0.0, 0.0, math.nan, math.inf]),
    st.text(max_size=3),
    st.tuples(st.integers(0, 2), st.sampled_from([1, 1.0, True])),
    st.lists(st.integers(0, 2), max_size=2),
)

_FIELD = st.fixed_dictionaries(
    {
        "compare": st.booleans(),
        "hash": st.sampled_from([None, True, False]),
        "repr": st.booleans(),
    }
)


def _twins(options, field_options, body):
    """The same class made by ``dataclasses.dataclass`` and by ``record``."""
    made = []
    for decorate in (dataclasses.dataclass, record):
        namespace = dict(body)
        namespace["__annotations__"] = {f"f{i}": "object" for i in range(len(field_options))}
        for i, opts in enumerate(field_options):
            namespace[f"f{i}"] = dataclasses.field(**opts)
        made.append(decorate(type("Shape", (), namespace), **options))
    return made


def _body_methods(draw_eq: bool, draw_hash: str, draw_repr: bool) -> dict:
    body: dict = {}
    if draw_eq:
        body["__eq__"] = lambda self, other: isinstance(other, type(self))
    if draw_hash == "defined":
        body["__hash__"] = lambda self: 7
    elif draw_hash == "none":
        body["__hash__"] = None
    if draw_repr:
        body["__repr__"] = lambda self: "mine"
    return body


@settings(max_examples=300, deadline=None)
@given(
    frozen=st.booleans(),
    kw_only=st.booleans(),
    eq=st.booleans(),
    show=st.booleans(),
    fields=st.lists(_FIELD, max_size=4),
    body_eq=st.booleans(),
    body_hash=st.sampled_from(["absent", "defined", "none"]),
    body_repr=st.booleans(),
    data=st.data(),
)
def test_record_compares_hashes_and_prints_as_dataclass_does(
    frozen, kw_only, eq, show, fields, body_eq, body_hash, body_repr, data
):
    options = {"frozen": frozen, "kw_only": kw_only, "eq": eq, "repr": show}
    body = _body_methods(body_eq, body_hash, body_repr)
    ours_std, ours_rec = _twins(options, fields, body)
    n = len(fields)
    left = data.draw(st.lists(_VALUES, min_size=n, max_size=n))
    right = data.draw(st.one_of(st.just(list(left)), st.lists(_VALUES, min_size=n, max_size=n)))
    kwargs = {f"f{i}": v for i, v in enumerate(left)}
    other = {f"f{i}": v for i, v in enumerate(right)}
    a_std, b_std = ours_std(**kwargs), ours_std(**other)
    a_rec, b_rec = ours_rec(**kwargs), ours_rec(**other)

    assert (a_rec == b_rec) == (a_std == b_std)
    assert (a_rec != b_rec) == (a_std != b_std)
    assert (a_rec == a_rec) == (a_std == a_std)
    assert a_rec.__eq__(object()) is a_std.__eq__(object())
    if show or body_repr:
        assert repr(a_rec) == repr(a_std)
    else:
        assert ours_rec.__repr__ is ours_std.__repr__ is object.__repr__
    assert (ours_rec.__hash__ is None) == (ours_std.__hash__ is None)
    if ours_std.__hash__ is not None and ours_std.__hash__ is not object.__hash__:
        try:
            expected = hash(a_std)
        except TypeError:  # a list among the hashed values
            with pytest.raises(TypeError):
                hash(a_rec)
        else:
            assert hash(a_rec) == expected
    assert (ours_rec.__hash__ is object.__hash__) == (ours_std.__hash__ is object.__hash__)
    if frozen:
        with pytest.raises(dataclasses.FrozenInstanceError):
            a_rec.f0 = 1


_DEFAULT = st.sampled_from(["none", "value", "factory"])

_INIT_FIELD = st.fixed_dictionaries(
    {"default": _DEFAULT, "init": st.booleans(), "kw_only": st.sampled_from([None, True, False])}
)


def _init_twins(options, field_options, post_init):
    """The same class body made by ``dataclasses.dataclass`` and by ``record``, or the exception
    each raised making it."""
    made = []
    for decorate in (dataclasses.dataclass, record):
        namespace: dict = {"__annotations__": {}}
        for i, opts in enumerate(field_options):
            name = f"f{i}"
            namespace["__annotations__"][name] = "int" if i % 2 else "list[int]"
            kwargs = {"init": opts["init"]}
            if opts["kw_only"] is not None:
                kwargs["kw_only"] = opts["kw_only"]
            if opts["default"] == "value":
                kwargs["default"] = i
            elif opts["default"] == "factory":
                kwargs["default_factory"] = list
            namespace[name] = dataclasses.field(**kwargs)
        if post_init:
            namespace["__post_init__"] = lambda self: object.__setattr__(self, "seen", True)
        try:
            made.append(decorate(type("Shape", (), namespace), **options))
        except TypeError as exc:
            made.append(exc)
    return made


def _outcome(call):
    try:
        obj = call()
    except (TypeError, dataclasses.FrozenInstanceError, AttributeError) as exc:
        return type(exc), str(exc)
    return obj


@settings(max_examples=300, deadline=None)
@given(
    frozen=st.booleans(),
    kw_only=st.booleans(),
    init=st.booleans(),
    post_init=st.booleans(),
    fields=st.lists(_INIT_FIELD, max_size=4),
    data=st.data(),
)
def test_record_builds_and_refuses_as_dataclass_does(
    frozen, kw_only, init, post_init, fields, data
):
    options = {"frozen": frozen, "kw_only": kw_only, "init": init}
    std, rec = _init_twins(options, fields, post_init)
    if isinstance(std, Exception) or isinstance(rec, Exception):
        assert (type(rec), str(rec)) == (type(std), str(std))
        return
    assert inspect.signature(rec) == inspect.signature(std)
    assert rec.__doc__ == std.__doc__
    assert rec.__match_args__ == std.__match_args__
    assert rec.__init__.__qualname__ == std.__init__.__qualname__
    if init:
        assert rec.__init__.__annotations__ == std.__init__.__annotations__
    params = list(inspect.signature(std).parameters)
    # Some parameters by position, some by name, maybe one unknown: both build or both refuse.
    positional = data.draw(st.integers(0, len(params)))
    named = data.draw(st.lists(st.sampled_from([*params, "stray"]), unique=True)) if params else []
    args = [[7] for _ in range(positional)]
    kwargs = {name: [8] for name in named}
    a_std, a_rec = _outcome(lambda: std(*args, **kwargs)), _outcome(lambda: rec(*args, **kwargs))
    if isinstance(a_std, tuple) or isinstance(a_rec, tuple):
        assert a_rec == a_std
        return
    assert vars(a_rec) == vars(a_std)
    b_rec = rec(*args, **kwargs)
    for f in dataclasses.fields(rec):
        given_value = f.name in kwargs or f.name in params[:positional]
        if init and f.default_factory is not dataclasses.MISSING and not given_value:
            assert getattr(a_rec, f.name) is not getattr(b_rec, f.name)  # a new list each time
    for name in ("f0", "other"):
        changed = _outcome(lambda name=name: setattr(a_rec, name, 1))
        expected = _outcome(lambda name=name: setattr(a_std, name, 1))
        assert (changed is None) == (expected is None)
        if changed is not None:
            assert changed == expected
        assert _outcome(lambda name=name: delattr(a_rec, name)) == _outcome(
            lambda name=name: delattr(a_std, name)
        )


def test_record_keeps_a_body_init_and_refuses_what_dataclass_refuses():
    @record
    class Own:
        x: int = 0

        def __init__(self) -> None:
            self.x = 5

    assert Own().x == 5
    with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__"):

        @record(frozen=True)
        class Guarded:
            x: int

            def __setattr__(self, name, value):
                pass

    @record
    class Loose:
        x: int

    with pytest.raises(TypeError, match="cannot inherit frozen dataclass from a non-frozen one"):
        record(frozen=True)(type("Child", (Loose,), {"__annotations__": {"y": "int"}}))
    with pytest.raises(TypeError, match="InitVar"):

        @record
        class WithInitVar:
            x: dataclasses.InitVar[int]


def test_every_record_class_of_the_package_takes_its_init_ready_made():
    sources = render_records.package_sources()
    assert len(sources) >= 50
    missing = sorted(name for name, text in sources.items() if text not in record_code.FACTORIES)
    assert not missing, f"run python scripts/render_records.py: {missing}"
    assert render_records.TARGET.read_text() == render_records.render(sources), (
        "record_code.py is stale: run python scripts/render_records.py"
    )
    assert all(name in INIT_SOURCES for name in sources)


def test_record_prints_a_recursive_object_once():
    @record
    class Node:
        name: str
        children: list

    @dataclasses.dataclass
    class Twin:
        name: str
        children: list

    node, twin = Node("a", []), Twin("a", [])
    node.children.append(node)
    twin.children.append(twin)
    assert repr(node) == repr(twin).replace("Twin", "Node")
    assert repr(node).endswith("<locals>.Node(name='a', children=[...])")


def test_record_subclass_adds_its_fields_to_the_comparison():
    @record(frozen=True)
    class Base:
        x: int

    @record(frozen=True)
    class Child(Base):
        y: int = 0

    assert Child(1, 2) != Child(1, 3)
    assert Child(1, 2) == Child(1, 2)
    assert hash(Child(1, 2)) == hash((1, 2))
    assert Child(1) != Base(1)  # different classes: NotImplemented both ways, then identity
    assert repr(Child(1, 2)).endswith("<locals>.Child(x=1, y=2)")


def test_every_record_class_is_a_dataclass_with_its_methods_named_after_it():
    found = 0
    for module in render_records.package_modules():
        name = module.__name__
        for value in vars(module).values():
            if not (isinstance(value, type) and dataclasses.is_dataclass(value)):
                continue
            if value.__module__ != name or value.__dataclass_params__.eq:
                continue  # the standard library's own dataclasses
            found += 1
            assert dataclasses.fields(value) is not None
            for method in ("__eq__", "__repr__"):
                fn = value.__dict__.get(method)
                if fn is not None and hasattr(fn, "__qualname__"):
                    assert fn.__qualname__.startswith(value.__qualname__), (value, method)
    assert found >= 50
