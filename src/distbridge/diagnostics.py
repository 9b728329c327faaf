"""Diagnosing a hung job: every rank's Python stacks in the log."""

from __future__ import annotations

from distbridge import _state
from distbridge.reliability.timed_barrier import dump_all_stacks

__all__ = ["dump_stacks"]


def dump_stacks(reason: str = "distbridge.dump_stacks() was called") -> str:
    """Log the Python stacks of every thread of this rank, and ask the other ranks for theirs.

    The stacks (``faulthandler``, innermost frame first) go to the ``"distbridge"`` logger at
    WARNING, under a header ``==== distbridge: Python stacks of rank R (pid, host): reason``;
    without logging configured, Python prints them on stderr. Every other rank that has
    opened the coordination store (at its first ``barrier(timeout=...)`` or
    ``one_rank_first``, which start a stack watcher polling it once a second) logs its own
    within about a second, wherever it is stuck, since the watcher is a thread of its own. A
    `BarrierTimeout` does the same by itself before it is raised.

    Args:
        reason: written in every rank's header.

    Returns:
        The text this rank logged.

    Note:
        Without a distributed context, logs this process's stacks (as rank 0). Ranks that
        never opened the coordination store are not asked; nor are ranks whose Python is
        frozen inside a C call that holds the GIL (send them ``SIGABRT``: faulthandler, when
        enabled, prints their stacks as they die).

    Example:
        >>> idist.dump_stacks("epoch 3 is slow")  # doctest: +SKIP
    """
    if not isinstance(reason, str):
        raise TypeError(f"reason must be a str, got {reason!r}.")
    return dump_all_stacks(_state.current(), reason)
