"""Where a rank is, in words, from its Python stack: "in barrier at test_x.py:12".

Reads the two stack formats a warm world's report holds: a traceback (``traceback``
module, innermost call last) and a faulthandler dump (every thread, innermost call first).
The place named is the innermost frame of the user's code (the test's file first, then any
file outside the standard library, the installed packages and distbridge), with the
function that frame was calling when there is one.
"""

from __future__ import annotations

import os
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Frame", "frames", "user_frame", "where"]

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+),? in (?P<function>\S+)')
_LIBRARIES = tuple(
    os.path.realpath(path)
    for path in {
        *(sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")),
        str(Path(__file__).parents[1]),  # distbridge
    }
)


@dataclass(frozen=True)
class Frame:
    """One call of a stack: the file, the line and the function that line is in."""

    path: str
    line: int
    function: str

    def place(self) -> str:
        """``test_x.py:12``."""
        return f"{os.path.basename(self.path)}:{self.line}"


def frames(stack: str) -> list[Frame]:
    """The frames of ``stack``, innermost first: the last exception of a traceback, or the
    thread of a faulthandler dump that runs user code (else its current thread)."""
    if "(most recent call first)" in stack:
        threads = re.split(r"\n(?=(?:Current thread|Thread) 0x)", stack)
        parsed = [(_parse(thread), thread.lstrip().startswith("Current")) for thread in threads]
        for thread_frames, _ in parsed:
            if any(not _is_library(frame.path) for frame in thread_frames):
                return thread_frames
        return next((found for found, current in parsed if current), parsed[0][0])
    last = stack.rpartition("Traceback (most recent call last):")[2]
    return _parse(last)[::-1]


def user_frame(stack: str, test_file: str = "") -> tuple[Frame, Frame | None] | None:
    """The innermost frame in ``test_file`` (else in user code) and the frame it called."""
    found = frames(stack)
    test = os.path.realpath(test_file) if test_file else None
    for wanted in (
        lambda frame: test is not None and os.path.realpath(frame.path) == test,
        lambda frame: not _is_library(frame.path),
    ):
        for index, frame in enumerate(found):
            if wanted(frame):
                return frame, (found[index - 1] if index > 0 else None)
    return None


def where(stack: str, test_file: str = "") -> str | None:
    """``"in barrier at test_x.py:12"``: the function the user's innermost frame was calling
    (or that frame's own function, when it is the innermost), and that frame's line."""
    found = user_frame(stack, test_file)
    if found is None:
        return None
    frame, callee = found
    return f"in {(callee or frame).function} at {frame.place()}"


def _parse(text: str) -> list[Frame]:
    return [
        Frame(match["path"], int(match["line"]), match["function"])
        for match in map(_FRAME.match, text.splitlines())
        if match is not None
    ]


def _is_library(path: str) -> bool:
    if path.startswith("<"):  # "<string>", "<frozen ...>"
        return True
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root + os.sep) for root in _LIBRARIES)
