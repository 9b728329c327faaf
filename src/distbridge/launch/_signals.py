"""Turning the parent's SIGINT and SIGTERM into something a supervisor loop can wait on."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["SignalWatch"]


class SignalWatch:
    """Turn SIGINT/SIGTERM into a readable file descriptor while workers are supervised.

    Handlers are installed only in the main thread (Python allows no other), and the
    previous ones are restored on exit. A signal that was ignored stays ignored.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[signal.Signals, Any] = {}
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)

    def __enter__(self) -> SignalWatch:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous = signal.getsignal(signum)
                if previous is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        os.close(self.fd)
        os.close(self._write_fd)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"\0")

    def drain(self) -> None:
        with contextlib.suppress(OSError):  # nothing to read: another wake-up drained it
            os.read(self.fd, 4096)

    def raise_if_received(self) -> None:
        if self.received == signal.SIGINT:
            raise KeyboardInterrupt
        if self.received is not None:
            raise SystemExit(128 + self.received)
