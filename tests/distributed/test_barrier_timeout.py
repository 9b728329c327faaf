"""Timed barriers, one_rank_first and stack dumps on real gloo processes, with fault injection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distbridge.errors import WorkerFailedError
from distbridge.testing import run_distributed
from tests.distributed import barrier_checks

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_timed_barriers_pass_and_clean_up(tmp_path: Path, world_size: int) -> None:
    results = run_distributed(
        barrier_checks.barriers_succeed, world_size=world_size, args=(str(tmp_path),), timeout=150
    )
    for rank, out in enumerate(results):
        assert out["total"] == sum(range(world_size)), (rank, out)
        assert out["first"], "one_rank_first(timeout=...): rank 0's file was not there"
        # Only the last barrier's keys (and, a moment longer, its predecessor's) remain.
        assert 1 <= len(out["kept"]) <= 2, (rank, out["kept"])
        assert (out["pair_seconds"] is not None) == (rank in (0, 1))


def test_late_rank_raises_barrier_timeout_naming_it(tmp_path: Path) -> None:
    results = run_distributed(
        barrier_checks.late_rank, world_size=3, args=(str(tmp_path),), timeout=150
    )
    timeout = barrier_checks.LATE_TIMEOUT
    for out in results[:2]:
        assert out["type"] == "BarrierTimeout", out
        assert out["missing"] == [2] and out["name"] == "late" and out["timeout"] == timeout
        assert "Barrier 'late' timed out after 4 s" in out["message"], out["message"]
        assert "ranks [2] of the group [0, 1, 2] did not arrive" in out["message"]
        assert timeout <= out["seconds"] < timeout + 10, out["seconds"]
        log = (tmp_path / f"rank{out['rank']}.log").read_text()
        assert "in barrier 'late': ranks [2] of [0, 1, 2] have not arrived" in log, log
        assert f"Python stacks of rank {out['rank']}" in log  # the timing-out rank's own
    late_log = (tmp_path / "rank2.log").read_text()
    assert results[2]["dumped"], late_log
    assert "Python stacks of rank 2" in late_log and "asked: barrier 'late' timed out" in late_log
    assert "_late_rank_sleeps" in late_log, late_log  # where the late rank is stuck


def test_one_rank_first_failure_reaches_the_others(tmp_path: Path) -> None:
    results = run_distributed(
        barrier_checks.first_rank_raises, world_size=3, args=(str(tmp_path),), timeout=120
    )
    assert results[0]["type"] == "ValueError"
    for out in results[1:]:
        assert out["type"] == "DistributedError", out
        assert "rank 0 raised ValueError: the download failed" in out["message"], out["message"]
        assert out["seconds"] < 20, out  # not the 60 s timeout, nor a hang


def test_dump_stacks_reaches_every_rank(tmp_path: Path) -> None:
    results = run_distributed(
        barrier_checks.stacks_on_request, world_size=2, args=(str(tmp_path),), timeout=120
    )
    assert results == [True, True]
    for rank in (0, 1):
        log = (tmp_path / f"rank{rank}.log").read_text()
        assert f"==== distbridge: Python stacks of rank {rank} (pid" in log, log
        assert "asked by the test" in log
    assert "stacks_on_request" in (tmp_path / "rank0.log").read_text()
    assert "_wait_for_own_dump" in (tmp_path / "rank1.log").read_text()


def test_a_failed_rank_makes_the_waiting_ranks_raise_peer_failed(tmp_path: Path) -> None:
    with pytest.raises(WorkerFailedError, match="rank-local disaster"):
        run_distributed(
            barrier_checks.rank_fails_during_barrier,
            world_size=3,
            args=(str(tmp_path),),
            timeout=120,
        )
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen{rank}.json").read_text())
        assert seen["type"] == "PeerFailed" and seen["rank"] == 2, seen
        assert "Rank 2 failed: ValueError: rank-local disaster" in seen["message"], seen
        assert "stopped waiting in barrier 'after-failure'" in seen["message"]
        assert seen["seconds"] < 10, seen  # not the 60 s timeout
