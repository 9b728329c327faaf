"""Top-level worker functions for tests/distributed/test_supervisor.py.

They live in an importable module so that "spawn" children can unpickle them. Each takes
its configuration first (bound with ``functools.partial``) and the local index last, and
writes its pid to ``<directory>/worker-<index>.pid`` so a test can check that the process
is gone afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

SLEEP_SECONDS = 60.0


def write_pid(directory: str, name: str, pid: int | None = None) -> None:
    """Write ``pid`` (default: this process) to ``<directory>/<name>.pid`` atomically."""
    path = Path(directory) / f"{name}.pid"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(os.getpid() if pid is None else pid))
    tmp.rename(path)


def read_pids(directory: str | Path, pattern: str = "*.pid") -> list[int]:
    """Return the pids written under ``directory`` whose file names match ``pattern``."""
    return [int(path.read_text()) for path in sorted(Path(directory).glob(pattern))]


def wait_for_pids(directory: str | Path, count: int, pattern: str = "*.pid") -> list[int]:
    """Wait (at most 45 s) until ``count`` pid files matching ``pattern`` exist."""
    deadline = time.monotonic() + 45.0
    while len(pids := read_pids(directory, pattern)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(pids)} of {count} pid files in {directory}")
        time.sleep(0.05)
    return pids


def mark_failure(directory: str) -> None:
    """Record when the failing worker fails, so a test can time how fast the rest stop."""
    (Path(directory) / "failed_at").write_text(repr(time.time()))


def seconds_since_failure(directory: str | Path) -> float:
    """Seconds since :func:`mark_failure` ran."""
    return time.time() - float((Path(directory) / "failed_at").read_text())


def sleep_forever(directory: str, local_index: int) -> None:
    """Record the pid, then sleep far longer than any test waits."""
    write_pid(directory, f"worker-{local_index}")
    time.sleep(SLEEP_SECONDS)


def rank_values(directory: str, local_index: int) -> Any:
    """Return a different picklable object per rank; rank 2 ends with ``sys.exit(0)``."""
    write_pid(directory, f"worker-{local_index}")
    if local_index == 0:
        return {"rank": 0, "squares": [0, 1, 4], "nested": {"ok": True}}
    if local_index == 1:
        return ("one", 1.5, None)
    sys.exit(0)  # counts as success with result None


def fail_on_rank(directory: str, nprocs: int, failing: int, how: str, local_index: int) -> Any:
    """All ranks but ``failing`` sleep; ``failing`` waits for every pid file, then fails.

    ``how`` is "raise", "sigkill", "exit3", "exit0" (no report) or "unpicklable".
    """
    write_pid(directory, f"worker-{local_index}")
    if local_index != failing:
        time.sleep(SLEEP_SECONDS)
        return None
    wait_for_pids(directory, nprocs, "worker-*.pid")
    mark_failure(directory)
    if how == "raise":
        raise ValueError(f"boom from rank {local_index}")
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "exit3":
        os._exit(3)
    if how == "exit0":
        os._exit(0)
    if how == "unpicklable":
        return threading.Lock()
    raise AssertionError(f"unknown failure mode {how!r}")


def large_value(local_index: int) -> bytes:
    """Return 8 MiB, far more than a pipe buffer holds."""
    return bytes([local_index]) * (8 << 20)


def grandchild_then_fail(directory: str, local_index: int) -> None:
    """Rank 0 starts ``sleep 60`` and sleeps; rank 1 waits for that grandchild, then raises."""
    write_pid(directory, f"worker-{local_index}")
    if local_index == 0:
        child = subprocess.Popen(["sleep", str(int(SLEEP_SECONDS))])
        write_pid(directory, "grandchild", child.pid)
        time.sleep(SLEEP_SECONDS)
        return
    wait_for_pids(directory, 1, "grandchild.pid")
    mark_failure(directory)
    raise RuntimeError("rank 1 fails while rank 0 has a grandchild")
