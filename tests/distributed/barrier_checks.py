"""Per-rank functions for the barrier-timeout tests (run by ``run_distributed`` on gloo).

Each function sends the ``distbridge`` logger of its rank to ``<tmp>/rank<r>.log`` and
returns what the rank saw, so the test asserts on every rank's view and on the log lines.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import distbridge as idist
from distbridge.errors import BarrierTimeout, DistributedError

#: long enough for the waiting ranks to log "have not arrived" (at half the timeout) first
LATE_TIMEOUT = 4.0


def _log_to_file(tmp: str) -> Path:
    path = Path(tmp) / f"rank{idist.get_rank()}.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log = logging.getLogger("distbridge")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return path


def _wait_for(path: Path, text: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.05)
    return False


def barriers_succeed(local_rank: int, tmp: str) -> dict[str, Any]:
    """Timed barriers of the world and of sub-groups, many times over, mixed with others."""
    rank, world = idist.get_rank(), idist.get_world_size()
    for i in range(30):
        idist.barrier(timeout=30, name=f"loop-{i}")
        idist.barrier(timeout=timedelta(seconds=30))
        idist.barrier()
    pair = [0, 1]
    started = time.monotonic()
    for _ in range(10):
        idist.barrier(group=pair, timeout=30, name="pair")
    pair_seconds = time.monotonic() - started
    if world >= 3:
        idist.barrier(group=[1, 2], timeout=30)
        idist.barrier(group=list(range(world)), timeout=float("inf"))
    first = first_rank_goes_first(local_rank, tmp)
    check_timed_barrier(Path(tmp))  # what Horovod's and XLA's targets run
    total = idist.all_reduce(rank)  # the communicator still works after all of that
    store = _model()._coordination_store()
    world_tag = "-".join(map(str, range(world)))
    kept = [s for s in range(200) if store.check([f"barrier/{world_tag}/{s}/n"])]
    return {
        "first": first,
        "total": total,
        "pair_seconds": pair_seconds if rank in pair else None,
        "kept": kept,
    }


def _model() -> Any:
    from distbridge import _state

    return _state.current()


def _late_rank_sleeps(path: Path) -> None:
    """The late rank's whereabouts: its stacks must show this function."""
    _wait_for(path, "Python stacks of rank", 60)


def late_rank(local_rank: int, tmp: str) -> dict[str, Any]:
    """The last rank sleeps past the others' barrier timeout; they raise BarrierTimeout."""
    path = _log_to_file(tmp)
    rank, world = idist.get_rank(), idist.get_world_size()
    idist.barrier(timeout=30, name="warm-up")  # opens the store and the stack watcher
    if rank == world - 1:
        _late_rank_sleeps(path)
        return {"rank": rank, "dumped": "Python stacks of rank" in path.read_text()}
    started = time.monotonic()
    try:
        idist.barrier(timeout=LATE_TIMEOUT, name="late")
    except BarrierTimeout as err:
        return {
            "rank": rank,
            "type": type(err).__name__,
            "message": str(err),
            "missing": list(err.missing_ranks),
            "name": err.name,
            "timeout": err.timeout,
            "seconds": time.monotonic() - started,
        }
    return {"rank": rank, "type": None}


def first_rank_raises(local_rank: int, tmp: str) -> dict[str, Any]:
    """Rank 0's block in one_rank_first raises; the others must raise naming it, at once."""
    rank = idist.get_rank()
    started = time.monotonic()
    try:
        with idist.one_rank_first(timeout=60):
            if rank == 0:
                time.sleep(0.5)
                raise ValueError("the download failed")
    except (DistributedError, ValueError) as err:
        return {
            "type": type(err).__name__,
            "message": str(err),
            "seconds": time.monotonic() - started,
        }
    return {"type": None, "seconds": time.monotonic() - started}


def first_rank_goes_first(local_rank: int, tmp: str) -> bool:
    """one_rank_first with a timeout: the others see what rank 0 wrote."""
    marker = Path(tmp) / "written"
    with idist.one_rank_first(timeout=60):
        if idist.get_rank() == 0:
            time.sleep(0.3)
            marker.write_text("done")
        seen = marker.exists()
    return seen


def _wait_for_own_dump(path: Path) -> bool:
    """Rank 1's whereabouts while rank 0 asks for everyone's stacks."""
    return _wait_for(path, "Python stacks of rank 1", 60)


def stacks_on_request(local_rank: int, tmp: str) -> bool:
    """Rank 0 calls dump_stacks(); every rank logs its own stacks under its header."""
    path = _log_to_file(tmp)
    idist.barrier(timeout=30)  # opens the store and the stack watcher everywhere
    if idist.get_rank() == 0:
        idist.dump_stacks("asked by the test")
        seen = _wait_for(path, "Python stacks of rank 0", 10)
    else:
        seen = _wait_for_own_dump(path)
    idist.barrier(timeout=60)
    return seen


def check_timed_barrier(tmp: Path) -> None:
    """For any backend and world size (Horovod's and XLA's test targets run it): timed
    barriers pass, a late rank makes the others raise BarrierTimeout naming it, and the
    ranks stay in step afterwards."""
    rank, world = idist.get_rank(), idist.get_world_size()
    for i in range(5):
        idist.barrier(timeout=60, name=f"loop-{i}")
    marker = tmp / "first-timed"
    with idist.one_rank_first(timeout=60):
        if rank == 0:
            marker.write_text("x")
        first_seen = marker.exists()
    outcome: BarrierTimeout | None = None
    if world > 1:
        idist.barrier(group=[0, 1], timeout=60)
        late = world - 1
        if rank == late:
            time.sleep(3.0)  # the others time out after 1 s, then this rank passes alone
        try:
            idist.barrier(timeout=1.0, name="late")
        except BarrierTimeout as err:
            outcome = err
    idist.barrier(timeout=60, name="in-step")
    assert idist.all_reduce(1) == world
    assert first_seen
    if world > 1 and rank != world - 1:
        assert outcome is not None and outcome.missing_ranks == (world - 1,), outcome
        assert outcome.name == "late"
    else:
        assert outcome is None, outcome


def rank_fails_during_barrier(local_rank: int, tmp: str) -> None:
    """The last rank raises instead of arriving; the others, waiting in a timed barrier,
    must raise PeerFailed naming it (each writes what it saw: spawn then raises)."""
    rank, world = idist.get_rank(), idist.get_world_size()
    idist.barrier(timeout=30, name="warm-up")
    if rank == world - 1:
        time.sleep(0.5)
        raise ValueError("rank-local disaster")
    started = time.monotonic()
    try:
        idist.barrier(timeout=60, name="after-failure")
        seen = {"type": None}
    except DistributedError as err:
        seen = {"type": type(err).__name__, "message": str(err), "rank": getattr(err, "rank", None)}
    seen["seconds"] = time.monotonic() - started
    (Path(tmp) / f"seen{rank}.json").write_text(json.dumps(seen))
