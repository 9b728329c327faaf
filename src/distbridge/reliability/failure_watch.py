"""The failure watcher: a thread per rank that learns of a peer's failure without polling.

It waits, in one blocking request on a connection of its own to the job's root store, for
its rank's wake key, which every failure note sets (`fail_together.record_failure`). When it
wakes it keeps the note (so this rank can name the failed rank even after the store's host
is gone) and aborts this rank's communicator: whatever this rank is blocked in fails at
once and becomes `PeerFailed`, and so does every collective it enters later. ``stop``
(``finalize``) wakes it through the same key and it ends. While nothing fails it sends
nothing: one request in flight, no polling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from distbridge.reliability.fail_together import job_root, read_failure, wake_key
from distbridge.reliability.hang.stacks import StoreThread

__all__ = ["FailureWatch", "start_watch"]

_FOREVER = timedelta(days=3650)  # a wait that never times out (a timeout prints from C++)
_STOP = "stop"


class FailureWatch(StoreThread):
    """Waits for a failure note of the job on ``store``'s root (through a clone), at the wake
    key of this process's global ``rank``; then keeps it and calls ``on_failure()`` once,
    from the watcher's thread. A `StoreThread` whose one tick is the blocking wait."""

    def __init__(self, store: Any, rank: int, on_failure: Callable[[], object]) -> None:
        self._root = job_root(store)  # this rank's connection: wakes the watcher on ``stop``
        # the blocking wait needs a connection of its own: a store client runs one request at
        # a time, so this rank's own store calls must not queue behind it
        super().__init__(self._root, lambda: True, "distbridge-failure-watcher", 0.0, True)
        self._key = wake_key(rank)
        self._on_failure = on_failure
        self.note: tuple[int, str] | None = None
        self._start()

    def _run(self) -> None:
        try:
            self._store.wait([self._key], _FOREVER)
            if self._stopped.is_set():
                self._store.delete_key(self._key)
                return
            self.note = read_failure(self._store)
        except Exception:  # the store's host is gone: the job is over
            return
        if self.note is not None:
            with contextlib.suppress(Exception):
                self._on_failure()

    def stop(self, timeout: float = 1.0) -> None:
        """End the thread (``finalize``, and at exit): wake it without a failure, and wait
        for it."""
        if self._stopped.is_set() or not self._thread.is_alive():
            return
        super().stop()
        with contextlib.suppress(Exception):
            self._root.set(self._key, _STOP)
            self.join(timeout)


def start_watch(store: Any, rank: int, on_failure: Callable[[], object]) -> FailureWatch | None:
    """A `FailureWatch`, or None where the store cannot be cloned (a ``HashStore``)."""
    try:
        return FailureWatch(store, rank, on_failure)
    except (AttributeError, RuntimeError):
        return None
