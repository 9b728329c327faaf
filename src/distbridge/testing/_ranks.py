"""A warm world's ranks as the parent sees them: process, pipe, log; and how they end."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from distbridge.launch.supervisor import signal_group

__all__ = ["LogTail", "Member", "kill_ranks", "log_size", "read_log"]


@dataclass
class Member:
    """One rank: its process, the parent's end of its pipe, its log file."""

    process: Any  # multiprocessing's SpawnProcess
    conn: Connection
    log: Path


def kill_ranks(members: list[Member], folder: str) -> None:
    """SIGKILL each rank's process group, reap the ranks, remove their logs."""
    for member in members:
        signal_group(member.process, signal.SIGKILL)
        member.process.join()
        member.conn.close()
    members.clear()
    shutil.rmtree(folder, ignore_errors=True)


def log_size(path: Path) -> int:
    """The size of a rank's log (0 before it exists)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_log(path: Path, start: int) -> str:
    """What a rank wrote to its log from byte ``start`` on."""
    return _read_bytes(path, start).decode("utf-8", errors="replace")


def _read_bytes(path: Path, start: int) -> bytes:
    try:
        with path.open("rb") as log:
            log.seek(start)
            return log.read()
    except OSError:
        return b""


class LogTail:
    """Follows the ranks' logs from given offsets and hands on each complete line, as
    ``on_line(rank, line)`` (without its newline), while a test runs."""

    def __init__(
        self, logs: list[Path], offsets: list[int], on_line: Callable[[int, str], Any]
    ) -> None:
        self._logs, self._offsets, self._on_line = logs, list(offsets), on_line
        self._partial = [b""] * len(logs)

    def poll(self) -> None:
        """Hand on the lines completed since the last call."""
        for rank, path in enumerate(self._logs):
            data = _read_bytes(path, self._offsets[rank])
            self._offsets[rank] += len(data)
            *lines, self._partial[rank] = (self._partial[rank] + data).split(b"\n")
            for line in lines:
                self._on_line(rank, line.decode("utf-8", errors="replace"))

    def finish(self) -> None:
        """Hand on what is left, an unfinished last line included."""
        self.poll()
        for rank, rest in enumerate(self._partial):
            if rest:
                self._on_line(rank, rest.decode("utf-8", errors="replace"))
                self._partial[rank] = b""
