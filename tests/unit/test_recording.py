"""The ledger's recording wrapper against the undecorated method it wraps.

The recorded method and its ``__wrapped__`` original are called in the same way from the same
line (directly, through the facade, from a generator, from another thread); they must give the
same result or the same error, and the recorded one adds exactly the entry the call makes:
op, payload, group, the caller's line, its state, and a sequence number one above the group's
last (none where the group is not one this rank belongs to).
"""

from __future__ import annotations

import inspect
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
from distbridge.reliability.hang.ledger import GroupLog
from tests.unit.test_ledger_call_forms import CALLS, _fresh, _same

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


def test_every_public_collective_is_recorded() -> None:
    recorded_ops = [
        op for op, value in vars(ComputationModel).items() if hasattr(value, "__wrapped__")
    ]
    assert set(CALLS) <= set(recorded_ops)


def _both(op: str) -> dict[str, Callable[..., Any]]:
    """The model's ``op`` as the class has it (recorded), and undecorated (``__wrapped__``)."""
    method = getattr(ComputationModel, op)
    return {"recorded": method, "bare": method.__wrapped__}


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
        assert entry["site"].startswith(f"tests/unit/test_recording.py:{_CALL[how]} in ")
    return outcome, entries


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(_PAYLOADS)),
    st.sampled_from(["direct", "facade", "generator", "thread"]),
    _GROUPS,
    st.data(),
)
def test_recorded_calls_answer_as_the_bare_method_and_add_their_entry(
    op: str, how: str, group: Any, data: st.DataObject
) -> None:
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
    (outcome, entries), (bare_outcome, bare_entries) = runs["recorded"], runs["bare"]
    assert outcome[0] == bare_outcome[0]
    if outcome[0] == "returned":
        assert _same(outcome[1], bare_outcome[1])
    else:
        assert outcome[1:] == bare_outcome[1:]
    assert bare_entries == []
    assert [(e["seq"], e["op"]) for e in entries] in ([], [(1, op)])
    ended = "done" if outcome[0] == "returned" else "raised"
    assert [e["state"] for e in entries] in ([], [ended])
    if (group is None or group == [0]) and how != "facade":  # a member's call reaches the
        assert len(entries) == 1  # model (the facade may refuse the arguments before)


@pytest.mark.parametrize("op", sorted(CALLS))
def test_every_call_form_answers_as_the_bare_method(op: str) -> None:
    names = list(inspect.signature(getattr(ComputationModel, op)).parameters)[1:]
    for positional in range(len(CALLS[op]) + 1):
        args = CALLS[op][:positional]
        kwargs = dict(zip(names[positional:], CALLS[op][positional:], strict=False))
        runs = [
            _run(wrapper, "direct", tuple(map(_fresh, args)), dict(kwargs))
            for wrapper in _both(op).values()
        ]
        (outcome, entries), (bare_outcome, _) = runs
        assert outcome[0] == bare_outcome[0] == "returned"
        assert _same(outcome[1], bare_outcome[1])
        assert [(e["seq"], e["op"], e["state"]) for e in entries] == [(1, op, "done")]


def test_a_raising_collective_is_marked_raised() -> None:
    outcome, entries = _run(_both("all_reduce")["recorded"], "direct", ("text",), {})
    assert outcome[:2] == ("raised", TypeError)
    assert [entry["state"] for entry in entries] == ["raised"]


def test_a_group_log_of_a_subclass_is_recorded_through_its_attributes() -> None:
    class CountingLog(GroupLog):
        __slots__ = ("reads",)

    ledger = current().ledger
    world = ledger.world
    try:
        ledger.world = CountingLog(None, 4)
        recorded = _both("all_reduce")["recorded"]
        entries = [_run(recorded, "direct", (torch.ones(2),), {})[1] for _ in range(3)]
        assert [[(e["seq"], e["state"]) for e in run] for run in entries] == [[(1, "done")]] * 3
        assert ledger.world.seq == 3
        assert ledger.world.passed == 3
    finally:
        ledger.world = world
