"""Rank 1 fails while its process lingers; the other ranks must raise `PeerFailed` at once.

Run by tests/distributed/test_fail_together.py in three ways: as a script under a plain
launcher environment (``python fail_together_targets.py <folder> <mode>`` with RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as a script under torchrun, and as ``spawn``'s
function (`spawned`); by test_horovod_fail_together.py under horovodrun (a third argument,
``horovod``, is the backend to initialize) and Horovod's ``spawn``. Modes:

- ``linger``: rank 1 starts a non-daemon thread that sleeps `LINGER_SECONDS`, then raises;
- ``stuck``: the same, but the thread sleeps (a C call) far longer than the test runs;
- ``kill``: rank 1 SIGKILLs itself while the others wait in a barrier.

Rank 0 waits in an ``all_reduce`` (a ``barrier`` for ``kill``); rank 2 computes for a while
first and enters it after the failure. Each rank that is not rank 1 writes
``<folder>/rank<r>.json``: what its collective raised, how long after the failure, and how
long ``finalize`` took afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

import distbridge as idist

LINGER_SECONDS = 12.0  # far longer than the bound: the peers must not wait for it
STUCK_SECONDS = 600.0
LATE_SECONDS = 1.0  # rank 2 enters its collective this long after rank 1 failed
FAILED_RANK = 1


def write_pid(folder: str) -> None:
    """``<folder>/worker-<rank>.pid``, written atomically."""
    path = Path(folder) / f"worker-{idist.get_rank()}.pid"
    path.with_suffix(".tmp").write_text(str(os.getpid()))
    path.with_suffix(".tmp").rename(path)


def read_outcomes(folder: str | Path) -> dict[int, dict[str, Any]]:
    """rank -> what `scenario` wrote for it."""
    return {
        int(p.stem.removeprefix("rank")): json.loads(p.read_text())
        for p in Path(folder).glob("rank*.json")
    }


def check_peers(
    folder: str | Path,
    summary: str,
    op: str,
    bound: float,
    finalize_bound: float,
    ranks: tuple[int, ...] = (0, 2),
) -> dict[int, float]:
    """Assert that ``ranks`` (of 0 and 2) raised `PeerFailed` naming rank 1 with ``summary``
    within ``bound`` seconds of its failure (rank 2: of entering its collective) and
    finalized within ``finalize_bound``; returns rank -> seconds after the failure."""
    outcomes = read_outcomes(folder)
    assert sorted(outcomes) == list(ranks), outcomes
    seconds = {}
    for rank, outcome in outcomes.items():
        assert outcome["type"] == "PeerFailed", outcome
        assert (outcome["rank"], outcome["summary"]) == (FAILED_RANK, summary), outcome
        assert outcome["message"].startswith(
            f"Rank 1 failed: {summary.rstrip('.')}. Rank {rank} stopped in {op} because of it"
        ), outcome
        assert outcome["after_failure"] < bound + (LATE_SECONDS if rank == 2 else 0), outcome
        assert outcome["finalize_seconds"] < finalize_bound, outcome
        seconds[rank] = round(outcome["after_failure"], 2)
    return seconds


def _fail(folder: str, mode: str) -> None:
    if mode in ("linger", "stuck"):
        seconds = LINGER_SECONDS if mode == "linger" else STUCK_SECONDS
        threading.Thread(target=time.sleep, args=(seconds,), name="lingering").start()
    time.sleep(0.3)  # the others are in their collective by now
    Path(folder, "failed_at").write_text(repr(time.time()))
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError("rank 1 gives up")


def scenario(folder: str, mode: str) -> None:
    """What every rank runs once the job is initialized (see the module's docstring)."""
    write_pid(folder)
    rank = idist.get_rank()
    idist.all_reduce(torch.ones(2))  # every connection is up
    if rank == FAILED_RANK:
        _fail(folder, mode)
    if rank == 2:
        while not Path(folder, "failed_at").exists():
            time.sleep(0.01)
        time.sleep(LATE_SECONDS)
    outcome: dict[str, Any] = {"type": None}
    try:
        if mode == "kill":
            idist.barrier()
        else:
            idist.all_reduce(torch.ones(2))
    except Exception as exc:
        outcome = {
            "type": type(exc).__name__,
            "message": str(exc),
            "rank": getattr(exc, "rank", None),
            "summary": getattr(exc, "summary", None),
        }
        error: Exception | None = exc
    else:
        error = None
    outcome["after_failure"] = time.time() - float(Path(folder, "failed_at").read_text())
    start = time.monotonic()
    idist.finalize()
    outcome["finalize_seconds"] = time.monotonic() - start
    Path(folder, f"rank{rank}.json").write_text(json.dumps(outcome))
    if error is not None:
        raise error


def spawned(local_rank: int, folder: str, mode: str) -> None:
    """``spawn``'s function."""
    scenario(folder, mode)


if __name__ == "__main__":  # a plain launcher environment, or torchrun
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # torchrun's SIGTERM must not cut the record
    idist.initialize(sys.argv[3] if len(sys.argv) > 3 else "gloo")
    scenario(sys.argv[1], sys.argv[2])
