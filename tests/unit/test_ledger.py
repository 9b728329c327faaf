"""The collective ledger against the calls made: generated sequences of facade collectives in
the serial model; the ledger must list the last ``capacity`` of them, numbered per group, with
what they carried, their call site (this file) and whether they returned or raised."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge._state import current
from distbridge.reliability.hang.ledger import CAPACITY_ENV_VAR, CollectiveLedger

DTYPES = (torch.float32, torch.int64, torch.float64)


@pytest.fixture
def fresh_ledger() -> Iterator[Callable[[int], CollectiveLedger]]:
    """Give the serial model a new ledger of a chosen capacity; the old one comes back."""
    model = current()
    old = model.ledger

    def make(capacity: int) -> CollectiveLedger:
        model.ledger = CollectiveLedger(old._members_of, capacity)
        return model.ledger

    yield make
    model.ledger = old


def _line() -> int:
    return sys._getframe(1).f_lineno


Call = tuple[str, Any]  # (op, payload)


@st.composite
def calls(draw: st.DrawFn) -> list[Call]:
    out: list[Call] = []
    for _ in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(("all_reduce", "all_gather", "broadcast", "barrier", "bad")))
        if op == "barrier":
            out.append((op, None))
        elif op == "all_gather":
            out.append((op, draw(st.integers(-5, 5))))
        else:
            shape = draw(st.lists(st.integers(1, 3), max_size=2))
            out.append((op, torch.zeros(shape, dtype=draw(st.sampled_from(DTYPES)))))
    return out


def _run(op: str, x: Any) -> int:
    """Make the call; returns the line it was made on (the line after ``_line()``'s)."""
    if op == "all_reduce":
        line = _line() + 1
        idist.all_reduce(x)
    elif op == "all_gather":
        line = _line() + 1
        idist.all_gather(x)
    elif op == "broadcast":
        line = _line() + 1
        idist.broadcast(x, src=0)
    elif op == "barrier":
        line = _line() + 1
        idist.barrier()
    else:  # a bad op: the call raises, and is recorded as raised
        line = _line() + 2
        with pytest.raises(ValueError, match="median"):
            idist.all_reduce(x, op="median")
    return line


def _what(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
    return type(x).__name__


# the fixture hands out a new ledger for every example
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(calls(), st.integers(1, 6))
def test_the_ledger_lists_the_last_calls(
    fresh_ledger: Callable[[int], CollectiveLedger], made: list[Call], capacity: int
) -> None:
    ledger = fresh_ledger(capacity)
    lines = [_run(op, x) for op, x in made]

    expected = [
        {
            "seq": seq,
            "op": "all_reduce" if op == "bad" else op,
            "group": None,
            "what": _what(x),
            "site": f"tests/unit/test_ledger.py:{line} in _run",
            "state": "raised" if op == "bad" else "done",
        }
        for seq, ((op, x), line) in enumerate(zip(made, lines, strict=True), 1)
    ][-capacity:]
    assert ledger.snapshot() == expected
    assert ledger.snapshot(limit=2) == expected[-2:]


def test_groups_are_numbered_apart(fresh_ledger: Callable[[int], CollectiveLedger]) -> None:
    ledger = fresh_ledger(8)
    idist.all_reduce(1)
    idist.all_reduce(2, group=[0])
    idist.all_reduce(3, group=[0])
    idist.all_reduce(4)
    seqs = [(r["group"], r["seq"]) for r in ledger.snapshot()]
    assert seqs == [(None, 1), (None, 2), ([0], 1), ([0], 2)]


def test_a_bad_capacity_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPACITY_ENV_VAR, "lots")
    with pytest.raises(ValueError, match=r"DISTBRIDGE_LEDGER_SIZE='lots' must be a positive"):
        CollectiveLedger(lambda group: None)
