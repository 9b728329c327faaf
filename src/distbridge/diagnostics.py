"""Diagnosing a hung job: every rank's Python stacks in the log."""

from __future__ import annotations

from distbridge import _state
from distbridge.reliability.timed_barrier import dump_all_stacks

__all__ = ["dump_stacks"]


def dump_stacks(reason: str = "distbridge.dump_stacks() was called") -> str:
    """Log the Python stacks of every thread of this rank, ask the other ranks for theirs, and
    return the text this rank logged.

    The stacks (``faulthandler``, innermost frame first) go to the ``"distbridge"`` logger at
    WARNING, under a header ``==== distbridge: Python stacks of rank R (pid, host): reason``
    (``reason`` in every rank's header).
    Every other rank that has opened the coordination store (at its first
    ``barrier(timeout=...)`` or ``one_rank_first``) logs its own within about a second,
    wherever it is stuck: a thread of its own polls the store ("Stack dumps" in
    docs/reliability.md).

    Note:
        Without a distributed context, logs this process's stacks (as rank 0). A rank frozen
        in a C call that holds the GIL cannot answer: send it ``SIGABRT`` (faulthandler, when
        enabled, prints its stacks as it dies).

    Example:
        >>> idist.dump_stacks("epoch 3 is slow")  # doctest: +SKIP
    """
    if not isinstance(reason, str):
        raise TypeError(f"reason must be a str, got {reason!r}.")
    return dump_all_stacks(_state.current(), reason)
