"""The ledger's recording step in C (``_recording_accel``) against the one in Python.

Both wrappers of the same undecorated method are called in the same way from the same line
(directly, through the facade, from a generator, from another thread); they must give the
same result or the same error, and add the same entry to the ledger: op, payload, group,
caller's line, state, and a sequence number one above the group's last. Where the C step
cannot be built (another Python than CPython 3.11) the Python one records, and the first
test says which one this interpreter must have.
"""

from __future__ import annotations

import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge._state import current
from distbridge.models import ComputationModel
from distbridge.reliability import recording
from distbridge.reliability.ledger import GroupLog
from tests.unit.test_ledger_call_forms import CALLS, _fresh, _same

CAN_BUILD = sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11)
needs_c = pytest.mark.skipif(not CAN_BUILD, reason="the C step reads CPython 3.11's frames")

_METHOD_DESCRIPTOR = 1 << 17  # Py_TPFLAGS_METHOD_DESCRIPTOR
_DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool)
_tensors = st.builds(
    lambda dtype, shape: torch.zeros(shape, dtype=dtype),
    st.sampled_from(_DTYPES),
    st.lists(st.integers(0, 3), max_size=3),
)
_objects = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
#: op -> payloads it takes on the serial model (a wrong one gives the same error either way)
_PAYLOADS: dict[str, st.SearchStrategy[Any]] = {
    "all_reduce": _tensors | st.integers(-5, 5) | st.floats(allow_nan=False, width=32),
    "all_gather": _tensors | st.integers() | st.text(max_size=4),
    "broadcast": _tensors | st.integers(),
    "all_gather_object": _objects,
    "broadcast_object": _objects,
}
_GROUPS = st.sampled_from([None, [0], [1], "not a group"])


def test_the_c_step_is_built_where_it_can_be() -> None:
    assert recording.ACCELERATED is CAN_BUILD, (
        "distbridge's C recording step (_recording_accel) was not built: it needs a C "
        "compiler and Python's headers at install; reinstall (pip install -e .) and read "
        "pip's output for the extension's build error"
        if CAN_BUILD
        else "the C recording step must not load on another Python than CPython 3.11"
    )
    recorded_ops = [
        op for op, value in vars(ComputationModel).items() if hasattr(value, "recording")
    ]
    assert set(CALLS) <= set(recorded_ops)
    for op in recorded_ops:
        assert getattr(ComputationModel, op).recording.accelerated is CAN_BUILD


def _both(op: str) -> dict[str, Callable[..., Any]]:
    """The model's ``op`` recorded in Python, and in C both ways: called on the class's
    descriptor (``model.op(...)``) and read as an attribute first (``getattr``, ``super()``,
    Dynamo), which gives the Python wrapper around ``record_call``."""
    method = getattr(ComputationModel, op)
    how = method.recording

    def make(in_c: bool) -> Callable[..., Any]:
        return recording.recorded(how.op, how.x_at, how.group_at, accelerated=in_c)(
            method.__wrapped__
        )

    in_c = make(True)  # a descriptor where Dynamo can trace it, else the wrapper itself
    return {
        "python": make(False),
        "c": in_c,
        "c, read as an attribute": getattr(in_c, "bound", in_c),
    }


def _outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("returned", call())
    except Exception as err:  # the same error either way is part of the comparison
        return ("raised", type(err), str(err))


def _new_entries(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[Any]:
    """The entries ``after`` adds, each with its sequence number relative to its group's
    last one before (1 for the next)."""
    last: dict[Any, int] = {}
    for entry in before:
        key = repr(entry["group"])
        last[key] = max(last.get(key, 0), entry["seq"])
    return [
        {**entry, "seq": entry["seq"] - last.get(repr(entry["group"]), 0)}
        for entry in after
        if entry not in before
    ]


# Each caller runs a few lines before its call, so that a wrong instruction offset would give
# another line: the site's line is checked against the line of the call (`_CALL`).


def _direct(wrapper: Callable[..., Any], model: Any, args: Any, kwargs: Any) -> Any:
    sizes = [len(args), len(kwargs)]
    sizes.append(sum(sizes))
    return wrapper(model, *args, **kwargs)  # the call


def _from_generator(wrapper: Callable[..., Any], model: Any, args: Any, kwargs: Any) -> Any:
    def steps() -> Iterator[Any]:
        sizes = [len(args), len(kwargs)]
        sizes.append(sum(sizes))
        yield wrapper(model, *args, **kwargs)  # the call

    return next(steps())


def _from_thread(wrapper: Callable[..., Any], model: Any, args: Any, kwargs: Any) -> Any:
    got: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        sizes = [len(args), len(kwargs)]
        sizes.append(sum(sizes))
        try:
            got.append(wrapper(model, *args, **kwargs))  # the call
        except Exception as err:
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    if errors:
        raise errors[0]
    return got[0]


def _via_facade(wrapper: Callable[..., Any], model: Any, args: Any, kwargs: Any) -> Any:
    op = wrapper.__name__  # type: ignore[attr-defined]
    setattr(model, op, types.MethodType(wrapper, model))  # what current().<op> finds first
    try:
        sizes = [len(args), len(kwargs)]
        sizes.append(sum(sizes))
        return getattr(idist, op)(*args, **kwargs)  # the call
    finally:
        delattr(model, op)


_CALLERS: dict[str, Callable[..., Any]] = {
    "direct": _direct,
    "generator": _from_generator,
    "thread": _from_thread,
    "facade": _via_facade,
}
_CALL = {
    how: inspect.getsourcelines(caller)[1]
    + next(i for i, text in enumerate(inspect.getsourcelines(caller)[0]) if "# the call" in text)
    for how, caller in _CALLERS.items()
}


def _first_name(op: str) -> str:
    """The name of the model's payload parameter (after self)."""
    return list(inspect.signature(getattr(ComputationModel, op)).parameters)[1]


def _run(wrapper: Callable[..., Any], how: str, args: Any, kwargs: Any) -> Any:
    """The outcome of the call and the ledger entries it added; each entry's line must be
    the call's."""
    model = current()
    before = model.ledger.snapshot()
    outcome = _outcome(lambda: _CALLERS[how](wrapper, model, args, kwargs))
    entries = _new_entries(before, model.ledger.snapshot())
    for entry in entries:
        assert entry["site"].startswith(f"tests/unit/test_recording_accel.py:{_CALL[how]} in ")
    return outcome, entries


@needs_c
@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(_PAYLOADS)),
    st.sampled_from(["direct", "facade", "generator", "thread"]),
    _GROUPS,
    st.data(),
)
def test_c_and_python_record_the_same(op: str, how: str, group: Any, data: st.DataObject) -> None:
    payload = data.draw(_PAYLOADS[op], label="payload")
    by_keyword = data.draw(st.booleans(), label="payload by keyword")
    name = _first_name(op)
    args: tuple[Any, ...] = () if by_keyword else (payload,)
    kwargs: dict[str, Any] = {name: payload} if by_keyword else {}
    if group is not None or data.draw(st.booleans(), label="group given"):
        kwargs["group"] = group
    runs = {
        way: _run(wrapper, how, tuple(map(_fresh, args)), {k: _fresh(v) for k, v in kwargs.items()})
        for way, wrapper in _both(op).items()
    }
    python_outcome, python_entries = runs.pop("python")
    assert all(entry["seq"] == 1 for entry in python_entries)
    for c_outcome, c_entries in runs.values():
        assert python_outcome[0] == c_outcome[0]
        if python_outcome[0] == "returned":
            assert _same(python_outcome[1], c_outcome[1])
        else:
            assert python_outcome[1:] == c_outcome[1:]
        assert python_entries == c_entries


@needs_c
@pytest.mark.parametrize("op", sorted(CALLS))
def test_every_call_form_is_recorded_the_same(op: str) -> None:
    names = list(inspect.signature(getattr(ComputationModel, op)).parameters)[1:]
    for positional in range(len(CALLS[op]) + 1):
        args = CALLS[op][:positional]
        kwargs = dict(zip(names[positional:], CALLS[op][positional:], strict=False))
        runs = [
            _run(wrapper, "direct", tuple(map(_fresh, args)), dict(kwargs))
            for wrapper in _both(op).values()
        ]
        for run in runs[1:]:
            assert run[1] == runs[0][1]
            assert run[0][0] == runs[0][0][0] == "returned"
            assert _same(run[0][1], runs[0][0][1])


@needs_c
def test_a_raising_collective_is_marked_raised_by_both() -> None:
    for wrapper in _both("all_reduce").values():
        outcome, entries = _run(wrapper, "direct", ("text",), {})
        assert outcome[:2] == ("raised", TypeError)
        assert [entry["state"] for entry in entries] == ["raised"]


@needs_c
def test_a_group_log_of_a_subclass_is_recorded_through_its_attributes() -> None:
    class CountingLog(GroupLog):
        __slots__ = ("reads",)

    ledger = current().ledger
    world = ledger.world
    try:
        ledger.world = CountingLog(None, 4)
        entries = [
            _run(wrapper, "direct", (torch.ones(2),), {})[1]
            for wrapper in _both("all_reduce").values()
        ]
        assert entries[0] == entries[1] == entries[2]
        assert ledger.world.seq == 3
        assert ledger.world.passed == 3
    finally:
        ledger.world = world


@needs_c
def test_the_class_attribute_is_a_method_that_instance_attributes_shadow() -> None:
    model = current()
    descriptor = vars(ComputationModel)["all_reduce"]
    if recording.DESCRIPTOR_TRACEABLE:
        # a method descriptor for calls (no bound method made), a data descriptor for reads
        # (so that Dynamo asks its __get__); attribute assignment still goes to the instance
        assert type(descriptor).__flags__ & _METHOD_DESCRIPTOR
        assert inspect.isdatadescriptor(descriptor)
        wrapper = descriptor.bound
    else:  # torch before 2.13: Dynamo would stop at a descriptor, so the class has the wrapper
        assert isinstance(descriptor, types.FunctionType)
        wrapper = descriptor
    assert inspect.signature(descriptor) == inspect.signature(descriptor.__wrapped__)
    assert descriptor.__doc__ == descriptor.__wrapped__.__doc__
    assert descriptor.__qualname__ == "ComputationModel.all_reduce"
    read = model.all_reduce  # an attribute read: the Python wrapper, bound
    assert read.__func__ is wrapper and read.__self__ is model

    def shadow(*args: Any, **kwargs: Any) -> str:
        return "shadowed"

    model.all_reduce = shadow  # what a testing layer does
    try:
        assert model.all_reduce is shadow
        assert model.all_reduce(1) == "shadowed"  # the method-call form finds it too
        assert vars(model)["all_reduce"] is shadow
    finally:
        del model.all_reduce
    assert "all_reduce" not in vars(model)
    assert model.all_reduce(2) == 2
    with pytest.raises(AttributeError, match="all_reduce"):
        del model.all_reduce
