"""The ledger's wrapper against the method it wraps: every way of calling a public collective
(so many arguments by position, the rest by keyword, defaults left out) must reach the
undecorated method with the same arguments and give the same result or the same error, and
the ledger must record the call with its payload and the caller's line (this file, for a
call made on the model directly)."""

from __future__ import annotations

import inspect
import sys
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from distbridge._state import current
from distbridge.models import ComputationModel

# op -> the arguments after self, in order (every one given): each a value the serial model
# takes, so that the call succeeds and its result can be compared
CALLS: dict[str, tuple[Any, ...]] = {
    "all_reduce": (torch.arange(3.0), "SUM", None),
    "all_gather": (7, None),
    "broadcast": (torch.ones(2), 0, False, None),
    "reduce": (torch.arange(4), 0, "MAX", None),
    "gather": (torch.zeros(2, 1), 0, None, True),
    "all_gather_object": ({"a": 1}, None, None),
    "broadcast_object": ([1, 2], 0, None, None),
    "scatter_object": ([{"b": 2}], 0, None, None),
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def _split(op: str, positional: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The first ``positional`` arguments by position, the rest by keyword."""
    names = list(inspect.signature(getattr(ComputationModel, op)).parameters)[1:]
    values = CALLS[op]
    return values[:positional], dict(zip(names[positional:], values[positional:], strict=False))


def _fresh(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


@given(st.sampled_from(sorted(CALLS)), st.data())
def test_every_call_form_reaches_the_method_and_is_recorded(op: str, data: st.DataObject) -> None:
    model = current()
    positional = data.draw(st.integers(0, len(CALLS[op])), label="positional")
    args, kwargs = _split(op, positional)
    args = tuple(_fresh(a) for a in args)
    kwargs = {k: _fresh(v) for k, v in kwargs.items()}
    bare = getattr(type(model), op).__wrapped__

    expected = bare(model, *(_fresh(a) for a in args), **{k: _fresh(v) for k, v in kwargs.items()})
    before = model.ledger.world.seq
    line = sys._getframe().f_lineno + 1
    got = getattr(model, op)(*args, **kwargs)

    assert _same(got, expected)
    assert model.ledger.world.seq == before + 1
    last = model.ledger.snapshot(limit=1)[-1]
    payload = CALLS[op][0]
    what = (
        f"{str(payload.dtype).removeprefix('torch.')}{list(payload.shape)}"
        if isinstance(payload, torch.Tensor)
        else type(payload).__name__
    )
    assert last == {
        "seq": before + 1,
        "op": op,
        "group": None,
        "what": what,
        "site": f"tests/unit/test_ledger_call_forms.py:{line} in "
        "test_every_call_form_reaches_the_method_and_is_recorded",
        "state": "done",
    }


@pytest.mark.parametrize(
    ("op", "args", "kwargs"),
    [
        ("all_reduce", (1, "SUM", None, "extra", "more"), {}),
        ("all_reduce", (1,), {"opp": "SUM"}),
        ("all_gather", (), {}),
        ("barrier", (None,), {"group": None}),
        ("broadcast", (1, 0), {"src": 0}),
    ],
)
def test_a_wrong_call_fails_as_the_method_does(
    op: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    model = current()
    bare = getattr(type(model), op).__wrapped__
    with pytest.raises(TypeError) as expected:
        bare(model, *args, **kwargs)
    with pytest.raises(TypeError) as got:
        getattr(model, op)(*args, **kwargs)
    assert str(got.value) == str(expected.value)


def test_the_wrapper_keeps_the_signature_and_the_docs() -> None:
    for op in CALLS:
        method = getattr(ComputationModel, op)
        assert inspect.signature(method) == inspect.signature(method.__wrapped__)
        assert method.__doc__ == method.__wrapped__.__doc__
