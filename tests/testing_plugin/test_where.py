"""Where a rank is, read from real stacks of this process (a traceback and a faulthandler
dump, the two formats a warm world's report holds), against what Python itself says of the
frames; and `skip_if_any_rank` without a distributed context."""

from __future__ import annotations

import faulthandler
import json
import sys
import tempfile
import threading
import traceback
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distbridge.testing import skip_if_any_rank
from distbridge.testing._report import frames, where

HERE = __file__


def _line_of(text: str) -> int:
    """The first line of this file that holds ``text`` (1-based)."""
    lines = Path(HERE).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def _nested(depth: int, capture: object) -> tuple[str, int]:
    """Recurse ``depth`` times, then ``capture()``; returns its text and the line of the call."""
    if depth > 1:
        return _nested(depth - 1, capture)
    line = sys._getframe().f_lineno + 1
    return capture(), line  # type: ignore[operator]


def _dump() -> str:
    """Every thread's stack, as SIGUSR1 writes it into a rank's log."""
    with tempfile.TemporaryFile("w+") as out:
        faulthandler.dump_traceback(out, all_threads=True)
        out.seek(0)
        return out.read()


def _library_error() -> str:
    """A traceback whose innermost frames are the standard library's."""
    try:
        json.loads("{")
    except ValueError:
        return traceback.format_exc()
    raise AssertionError("json.loads('{') parsed")


@settings(max_examples=10, deadline=None)
@given(depth=st.integers(1, 6))
def test_a_faulthandler_dump_names_the_innermost_user_frame(depth: int) -> None:
    idle = threading.Event()
    other = threading.Thread(target=idle.wait, daemon=True)  # a thread in library code only
    other.start()
    try:
        stack, line = _nested(depth, _dump)
    finally:
        idle.set()
        other.join()
    dump = _line_of("faulthandler.dump_traceback(out")
    # the innermost frame of this file is _dump's (a C call, dump_traceback, shows no frame)
    assert where(stack, HERE) == f"in _dump at {Path(HERE).name}:{dump}"
    found = frames(stack)
    assert [(f.function, f.line) for f in found[:2]] == [("_dump", dump), ("_nested", line)]
    assert [f.function for f in found[1 : depth + 2]] == ["_nested"] * depth + [
        "test_a_faulthandler_dump_names_the_innermost_user_frame"
    ]


@settings(max_examples=10, deadline=None)
@given(depth=st.integers(1, 6))
def test_a_traceback_names_the_library_call_made_from_user_code(depth: int) -> None:
    stack, _ = _nested(depth, _library_error)
    call = _line_of('json.loads("{")')
    assert where(stack, HERE) == f"in loads at {Path(HERE).name}:{call}"
    # innermost first, as faulthandler: the last frame of the traceback comes first
    assert frames(stack)[-1].function == "_library_error"


def test_without_user_frames_there_is_no_place() -> None:
    stack = 'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
    assert where(stack, HERE) is None
    assert where("", HERE) is None


def test_skip_if_any_rank_alone_is_pytest_skip() -> None:
    skip_if_any_rank(False, "no GPU")  # returns
    with pytest.raises(pytest.skip.Exception, match=r"^no GPU$"):
        skip_if_any_rank(True, "no GPU")
    with pytest.raises(TypeError, match=r"condition must be True or False, got 1"):
        skip_if_any_rank(1, "no GPU")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"reason must be a non-empty str, got ''"):
        skip_if_any_rank(True, "")
