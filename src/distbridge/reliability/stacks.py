"""Python stack dumps (faulthandler, every thread), and a watcher that dumps on request.

A hung job is diagnosed by where each rank is stuck. ``dump`` writes this process's
stacks to the ``distbridge`` logger (WARNING; without logging configured, Python prints
it on stderr). A ``StackWatcher`` is a daemon thread that polls the coordination store
once a second and dumps this rank's stacks when another rank asks (``request``): the
rank whose barrier timed out, or one that called ``distbridge.dump_stacks()``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["StackWatcher", "dump", "format_stacks"]

LOG = logging.getLogger("distbridge")
#: the store counter of dump requests, and the key holding why the last one was made
REQUEST_KEY = "stacks/requests"
REASON_KEY = "stacks/reason"
POLL_SECONDS = 1.0


def format_stacks() -> str:
    """Every thread's Python stack, as ``faulthandler`` writes it (innermost frame first)."""
    with tempfile.TemporaryFile() as out:  # faulthandler writes to a file descriptor
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.seek(0)
        return out.read().decode("utf-8", errors="replace")


def dump(rank: int, reason: str) -> str:
    """Log this process's stacks under a header naming ``rank``; returns the text logged."""
    header = (
        f"==== distbridge: Python stacks of rank {rank} (pid {os.getpid()}, host "
        f"{socket.gethostname()}): {reason} ===="
    )
    text = f"{header}\n{format_stacks()}"
    LOG.warning("%s", text)
    return text


class StackWatcher:
    """Dumps this rank's stacks whenever another rank asks through the coordination store.

    Args:
        store: the coordination store (the watcher uses a clone of it).
        rank: this process's global rank, named in the header.
        alive: False once the context is gone; the thread then ends.
    """

    def __init__(self, store: Any, rank: int, alive: Callable[[], bool]) -> None:
        # A connection of its own: it never waits behind this rank's store calls, and keeps no
        # server alive (rank 0's store may host one). A store that cannot be cloned is shared.
        with contextlib.suppress(AttributeError, RuntimeError):
            store = store.clone()
        self._store = store
        self._rank = rank
        self._alive = alive
        self._lock = threading.Lock()
        self._seen = int(store.add(REQUEST_KEY, 0))
        self._thread = threading.Thread(
            target=self._run, name="distbridge-stack-watcher", daemon=True
        )
        self._thread.start()

    def request(self, reason: str) -> None:
        """Ask every other rank's watcher to dump its stacks (this rank's own is not asked)."""
        with self._lock:
            self._store.set(REASON_KEY, f"rank {self._rank} asked: {reason}")
            self._seen = int(self._store.add(REQUEST_KEY, 1))

    def _run(self) -> None:
        while self._alive():
            time.sleep(POLL_SECONDS)
            try:
                with self._lock:
                    count = int(self._store.add(REQUEST_KEY, 0))
                    asked, self._seen = count > self._seen, max(count, self._seen)
                    reason = self._store.get(REASON_KEY).decode() if asked else ""
            except RuntimeError:  # the store is gone: the job ended
                return
            if asked:
                dump(self._rank, reason)
