"""Stack watchers end before the interpreter does: a daemon thread that wakes from torch's
store call into a finalizing interpreter aborts the process (exit 134, seen under horovodrun
after a timed barrier), so `stacks._stop_all` (registered with atexit) stops and joins
every live watcher, at once rather than after its poll interval."""

from __future__ import annotations

import time

from torch._C._distributed_c10d import HashStore

from distbridge.reliability.hang import stacks


def test_the_exit_hook_stops_every_watcher_at_once() -> None:
    watchers = [stacks.StackWatcher(HashStore(), rank, lambda: True) for rank in (0, 1)]
    assert all(w._thread.is_alive() for w in watchers)
    started = time.monotonic()
    stacks._stop_all()
    assert not any(w._thread.is_alive() for w in watchers)
    assert time.monotonic() - started < stacks.POLL_SECONDS  # woken, not waited out
