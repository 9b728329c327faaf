"""Top-level worker functions for tests/distributed/test_faults.py (workers import them).

Each takes the local rank first (``spawn``'s convention) and a folder where it writes
``worker-<rank>.pid``, so a test can check afterwards that no worker is left.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch

import distbridge as idist

SLEEP_SECONDS = 60.0


def write_pid(folder: str) -> None:
    """Write this worker's pid to ``<folder>/worker-<rank>.pid`` atomically."""
    path = Path(folder) / f"worker-{idist.get_rank()}.pid"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(path)


def mark_failure(folder: str) -> None:
    """Record when the fault happens, so a test can time how fast the others stop."""
    Path(folder, "failed_at").write_text(repr(time.time()))


def seconds_since_failure(folder: str | Path) -> float:
    """Seconds since :func:`mark_failure` ran."""
    return time.time() - float(Path(folder, "failed_at").read_text())


def read_pids(folder: str | Path) -> list[int]:
    """The pids the workers wrote under ``folder``."""
    return [int(p.read_text()) for p in sorted(Path(folder).glob("worker-*.pid"))]


def raise_before_collective(local_rank: int, folder: str, bad_rank: int, late_rank: int) -> None:
    """``bad_rank`` raises at once; the other ranks go straight to an all_reduce (and most
    likely wait in it when the failure happens), except ``late_rank``, which computes for
    1.5 s first and meets the failure at its next collective."""
    write_pid(folder)
    rank = idist.get_rank()
    if rank == bad_rank:
        mark_failure(folder)
        raise ValueError(f"boom from rank {rank}")
    if rank == late_rank:
        time.sleep(1.5)  # not in a collective when the peer fails: PeerFailed at the next one
    idist.all_reduce(torch.ones(4))
    raise AssertionError("all_reduce completed although a rank had failed")


def killed_mid_run(local_rank: int, folder: str, bad_rank: int) -> None:
    """Every rank runs all_reduces; ``bad_rank`` SIGKILLs itself after a few."""
    write_pid(folder)
    for step in range(1000):
        if step == 3 and idist.get_rank() == bad_rank:
            mark_failure(folder)
            os.kill(os.getpid(), signal.SIGKILL)
        idist.all_reduce(torch.ones(4))
        time.sleep(0.01)
    raise AssertionError("1000 all_reduces completed although a rank was killed")


def skip_last_collective(local_rank: int, folder: str, skipping_rank: int) -> int:
    """Three all_reduces on every rank but ``skipping_rank``, which returns after two."""
    write_pid(folder)
    steps = 2 if idist.get_rank() == skipping_rank else 3
    for _ in range(steps):
        idist.all_reduce(torch.ones(4))
    if steps == 2:
        mark_failure(folder)
    return steps


def block_in_barrier(local_rank: int, folder: str) -> None:
    """Rank 0 sleeps; every other rank waits for it in a barrier (native code)."""
    write_pid(folder)
    if idist.get_rank() == 0:
        time.sleep(SLEEP_SECONDS)
    idist.barrier()


def peer_failed_first(folder: str, local_index: int) -> None:
    """For ``run_workers`` directly: index 0 raises `PeerFailed` naming index 1 at once;
    index 1 raises the real error half a second later."""
    Path(folder, f"worker-{local_index}.pid").write_text(str(os.getpid()))
    if local_index == 0:
        raise idist.PeerFailed(1, "ValueError: late", "Rank 0 stopped in all_reduce.")
    time.sleep(0.5)
    raise ValueError("late")


def hang_at_exit(folder: str, local_index: int) -> int:
    """Register an ``atexit`` handler that never returns, then return normally.

    For ``run_workers`` directly (no distributed context): called with the local index last.
    """
    Path(folder, f"worker-{local_index}.pid").write_text(str(os.getpid()))
    atexit.register(_hang)
    return local_index


def _hang() -> None:
    time.sleep(SLEEP_SECONDS)


def torchrun_rank1_raises(folder: str) -> None:
    """Under torchrun: initialize; rank 1 raises, rank 0 writes what its all_reduce raised."""
    idist.initialize("gloo")
    rank = idist.get_rank()
    if rank == 1:
        raise ValueError("rank 1 gives up")
    # torchrun stops the other workers (SIGTERM) as soon as it sees rank 1 fail; ignore that
    # here, so that rank 0 surely gets to write what its all_reduce raised.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    start = time.monotonic()
    try:
        idist.all_reduce(torch.ones(2))
        outcome: dict[str, Any] = {"type": None}
    except Exception as exc:
        outcome = {
            "type": type(exc).__name__,
            "message": str(exc),
            "rank": getattr(exc, "rank", None),
            "summary": getattr(exc, "summary", None),
        }
    outcome["seconds"] = time.monotonic() - start
    Path(folder, f"rank{rank}.json").write_text(json.dumps(outcome))
    idist.finalize()


if __name__ == "__main__":  # torchrun runs this file
    torchrun_rank1_raises(sys.argv[1])
