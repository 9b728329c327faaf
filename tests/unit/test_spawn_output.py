"""The pure parts of spawn's output relay: splitting a stream into lines, and the plan that
``tag_output`` and ``output_ranks`` make (tests/distributed/test_spawn_output.py runs it)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import distbridge as idist
from distbridge.launch import _output
from distbridge.launch._output import MAX_LINE_BYTES, OutputPlan, plan_output, split_lines


@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=8))
def test_any_chunking_gives_the_same_lines(data: bytes, cuts: list[int]) -> None:
    bounds = sorted({0, len(data), *(min(c, len(data)) for c in cuts)})
    emitted: list[bytes] = []
    pending = b""
    for start, end in itertools.pairwise(bounds):
        lines, pending = split_lines(pending, data[start:end])
        emitted += lines
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in emitted)
    assert b"".join(emitted) + pending == data
    assert b"\n" not in pending


def test_a_line_longer_than_the_limit_comes_in_pieces() -> None:
    lines, rest = split_lines(b"", b"x" * (2 * MAX_LINE_BYTES + 5) + b"\nnext")
    assert [len(line) for line in lines] == [MAX_LINE_BYTES + 1] * 2 + [6]
    assert rest == b"next"
    lines, rest = split_lines(b"", b"y" * (MAX_LINE_BYTES + 3))
    assert lines == [b"y" * MAX_LINE_BYTES + b"\n"] and rest == b"yyy"


def test_the_default_relays_the_streams_that_are_not_terminals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_output.os, "isatty", lambda fd: fd == 2)
    assert plan_output(None, None, 2, 2) == OutputPlan(streams=(1,))
    assert plan_output(None, None, 1, 4) is None  # one worker here: nothing to mix with
    assert plan_output(False, None, 2, 2) is None
    assert plan_output(True, None, 2, 2) == OutputPlan(tag=True, streams=(1, 2))
    assert plan_output(None, [1], 2, 2) == OutputPlan(ranks=frozenset({1}), streams=(1, 2))
    monkeypatch.setattr(_output.os, "isatty", lambda fd: True)
    assert plan_output(None, None, 4, 4) is None


@pytest.mark.parametrize(
    ("tag", "ranks", "message"),
    [
        ("yes", None, "tag_output must be True, False or None (the default: whole lines where"),
        (1, None, "tag_output must be True, False or None (the default: whole lines where"),
        (None, 0, "output_ranks must be a list of ranks (ints), e.g. [0], got 0;"),
        (None, "01", "output_ranks must be a list of ranks (ints), e.g. [0], got '01';"),
        (None, [True], "output_ranks must be a list of ranks (ints), e.g. [0], got [True];"),
        (None, [0, 4], "output_ranks=[0, 4] names rank 4, but the job's ranks run from 0 to 3;"),
        (None, [-1], "output_ranks=[-1] names rank -1, but the job's ranks run from 0 to 3;"),
    ],
)
def test_bad_output_options_are_named(tag: object, ranks: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        plan_output(tag, ranks, 2, 4)


def test_spawn_checks_them_before_starting_anything() -> None:
    with pytest.raises(ValueError, match=r"output_ranks=\[2\] names rank 2"):
        idist.spawn("gloo", print, nproc_per_node=2, output_ranks=[2])
    with pytest.raises(ValueError, match="tag_output must be True, False or None"):
        idist.Parallel(backend="gloo", nproc_per_node=2, tag_output=1).run(print)
