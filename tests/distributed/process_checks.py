"""Checks that a test left no process behind: pids that must be gone, children of pytest."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

__all__ = ["assert_gone", "child_pids", "default_sigint", "is_gone", "processes_mentioning"]


def default_sigint() -> None:
    """``preexec_fn`` for a child that a test sends SIGINT: the default disposition, as from a
    terminal. A job started in the background (``cmd &``) ignores SIGINT and its children
    inherit that, so Python would never raise KeyboardInterrupt there."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def is_gone(pid: int) -> bool:
    """True if ``pid`` does not exist or is a zombie (dead, waiting for its new parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def assert_gone(pids: Iterable[int], timeout: float = 5.0) -> None:
    """Fail unless every pid is gone within ``timeout`` seconds (SIGKILL is asynchronous)."""
    pids = list(pids)
    assert pids, "no pids to check"
    deadline = time.monotonic() + timeout
    while alive := [pid for pid in pids if not is_gone(pid)]:
        if time.monotonic() > deadline:
            pytest.fail(f"processes still alive: {alive}")
        time.sleep(0.05)


def child_pids() -> set[int]:
    """This process's children, zombies included, except multiprocessing's helpers."""
    children = set()
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat_file.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # exited meanwhile
        helper = b"resource_tracker" in cmdline or b"forkserver" in cmdline  # warm starter
        if int(fields[1]) == os.getpid() and not helper:
            children.add(int(stat_file.parent.name))
    return children


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # exited meanwhile
    return [pid for pid in found if not is_gone(pid)]
