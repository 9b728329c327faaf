"""Where the user's code called in: the first frame outside distbridge.

Every place that names a call site uses this one rule: the ledger (each collective's caller),
the debug mode's fingerprints, the hang reports (where a rank's main thread is) and the
testing layers (telemetry's ``site``).
"""

from __future__ import annotations

import os
from types import FrameType

__all__ = ["PACKAGE", "SEEN", "inside", "outside", "short_path", "site"]

#: distbridge's own directory, with a trailing separator
PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: file name -> whether it is distbridge's own, for the files asked about so far (the ledger's
#: wrapper reads it directly on its hot path)
SEEN: dict[str, bool] = {}


def inside(filename: str) -> bool:
    """Whether ``filename`` is one of distbridge's own files (remembered once asked)."""
    known = SEEN.get(filename)
    if known is None:
        known = SEEN[filename] = filename.startswith(PACKAGE)
    return known


def outside(frame: FrameType, skip: tuple[str, ...] = ()) -> FrameType:
    """The first frame from ``frame`` outwards (``frame`` itself included) whose file is
    neither distbridge's nor under one of the ``skip`` prefixes; the outermost frame when
    every one is."""
    while True:
        name = frame.f_code.co_filename
        own = SEEN.get(name)  # inside(name), written out: one call fewer on the ledger's path
        if own is None:
            own = SEEN[name] = name.startswith(PACKAGE)
        if not (own or (skip and name.startswith(skip))):
            return frame
        back = frame.f_back
        if back is None:
            return frame
        frame = back


def short_path(path: str) -> str:
    """``path`` relative to the working directory when it is below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


def site(frame: FrameType) -> str:
    """``file:line in function`` of ``frame``, the file as `short_path` gives it."""
    return f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
