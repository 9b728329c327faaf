"""distbridge.testing's telemetry and fault injection on real gloo ranks (2 and 3): each rank
records its own calls; an injected raise or SIGKILL on rank 1 fails the job naming rank 1;
a skipped or wrong-dtype collective in debug mode is a `CollectiveMismatch` on every rank."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import pytest

import distbridge as idist
from distbridge.errors import WorkerFailedError
from distbridge.testing import faults
from tests.distributed import toolkit_targets as targets

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

JOB_TIMEOUT = 150  # seconds: two shared cores start three interpreters with torch slowly
DEBUG_TIMEOUT = "20"  # DISTBRIDGE_DEBUG_TIMEOUT in the workers: a missing rank fails, not hangs


def _site_line(marker: str) -> int:
    lines = Path(targets.__file__).read_text().splitlines()
    found = [i for i, text in enumerate(lines, 1) if text.endswith(f"# site: {marker}")]
    assert len(found) == 1, marker
    return found[0]


@pytest.fixture(scope="module", params=[2, 3], ids=["2-ranks", "3-ranks"])
def per_rank(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """Every scenario of `targets.scenarios`, in one job with the debug mode on."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DISTBRIDGE_DEBUG_TIMEOUT", DEBUG_TIMEOUT)
        results = idist.spawn(
            "gloo",
            targets.scenarios,
            nproc_per_node=request.param,
            job_timeout=JOB_TIMEOUT,
            debug=True,
        )
    return list(results)


def test_telemetry_counts_and_bytes_per_rank(per_rank: list[dict[str, Any]]) -> None:
    world = len(per_rank)
    site = f"{targets.__file__}:{_site_line('first')}"
    for rank, result in enumerate(per_rank):
        got = result["telemetry"]
        assert result["rank"] == rank
        assert got["calls"] == [
            ("all_reduce", world, 40, "float32", rank),
            ("all_reduce", world, 40, "float64", rank),
            ("all_reduce", 2, 8, "float32", rank),
            ("all_gather", world, 12, "int32", rank),
            ("broadcast", world, 16, "float32", rank),
            ("reduce_scatter", world, 24 * world, "float32", rank),
            ("all_reduce", world, 8, "int", rank),
            ("barrier", world, 0, "", rank),
        ]
        assert got["first_site"] == site
        rows = got["rows"]
        assert {op: row["calls"] for op, row in rows.items()} == {
            "all_reduce": 4, "all_gather": 1, "broadcast": 1, "reduce_scatter": 1, "barrier": 1,
        }  # fmt: skip
        assert rows["all_reduce"]["nbytes"] == 96
        assert "all_reduce" in got["table"] and "busbw GB/s" in got["table"]
        assert result["after"] == world


def test_bus_bandwidth_is_algbw_times_the_nccl_tests_factor(
    per_rank: list[dict[str, Any]],
) -> None:
    world = len(per_rank)
    for result in per_rank:
        rows = result["telemetry"]["rows"]
        gather = rows["all_gather"]
        assert gather["algbw"] == pytest.approx(12 * world / gather["seconds"])  # S: the output
        assert gather["busbw"] == pytest.approx(gather["algbw"] * (world - 1) / world)
        scatter = rows["reduce_scatter"]
        assert scatter["busbw"] == pytest.approx(scatter["algbw"] * (world - 1) / world)
        assert rows["broadcast"]["busbw"] == pytest.approx(rows["broadcast"]["algbw"])
        assert rows["barrier"]["busbw"] is None
        # all_reduce mixes group sizes: the world's calls (88 B) and the pair's (8 B)
        reduce = rows["all_reduce"]
        bus = (88 * 2 * (world - 1) / world + 8 * 2 * (2 - 1) / 2) / reduce["seconds"]
        assert reduce["busbw"] == pytest.approx(bus)


@pytest.mark.parametrize("scenario", ["skip", "dtype"])
def test_skip_and_wrong_dtype_are_a_mismatch_on_every_rank(
    per_rank: list[dict[str, Any]], scenario: str
) -> None:
    world = len(per_rank)
    for rank, result in enumerate(per_rank):
        report = result[scenario]
        assert report != targets.NO_ERROR, f"rank {rank} raised nothing in {scenario}"
        assert report["fired"] == (rank == targets.FAULTY_RANK)
        fingerprints = report["fingerprints"]
        assert sorted(fingerprints) == list(range(world))
        faulty = fingerprints[targets.FAULTY_RANK]
        others = {fingerprints[r] for r in range(world) if r != targets.FAULTY_RANK}
        assert len(others) == 1
        (other,) = others
        assert other.startswith("all_reduce(type=tensor, dtype=float32, shape=[4]")
        if scenario == "skip":
            assert faulty.startswith("barrier(")
        else:
            assert faulty.startswith("all_reduce(type=tensor, dtype=float64, shape=[4]")


def _spawn_failure(action: faults.Action, nproc: int) -> WorkerFailedError:
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn(
            "gloo",
            targets.fail_at_second_all_reduce,
            args=(action,),
            nproc_per_node=nproc,
            job_timeout=JOB_TIMEOUT,
        )
    return info.value


def test_a_raise_on_rank_1_is_peer_failed_on_the_others() -> None:
    error = _spawn_failure(faults.Raise(RuntimeError("boom")), 3)

    assert (error.rank, error.exitcode) == (1, None)
    assert "RuntimeError: boom" in error.worker_traceback
    if sys.version_info >= (3, 11):  # exception notes
        note = "faults: Raise(error=RuntimeError('boom')) at all_reduce call 2"
        assert note in error.worker_traceback
    # The peers that reported within spawn's 3 s window (on a loaded 2-core machine one may
    # be stopped first: test_fail_together.py holds every peer to its bound) saw PeerFailed.
    assert error.peer_reports and set(error.peer_reports) <= {0, 2}, error.peer_reports
    for rank, report in error.peer_reports.items():
        assert report.startswith("PeerFailed: Rank 1 failed: RuntimeError: boom."), report
        assert f"Rank {rank} stopped in all_reduce" in report


def test_a_sigkill_on_rank_1_names_it() -> None:
    error = _spawn_failure(faults.Kill(), 2)

    assert (error.rank, error.exitcode) == (1, -signal.SIGKILL)
    assert "was killed by signal SIGKILL" in str(error)
    assert error.peer_reports[0].startswith(
        "PeerFailed: Rank 1 failed: its process was killed by signal SIGKILL."
    ), error.peer_reports


def test_ddp_gradient_all_reduces_are_recorded() -> None:
    per_rank = run_ddp()
    for seen in per_rank:
        calls = seen["calls"]
        assert calls and all(c[0] == "ddp_all_reduce" and c[1] == 2 for c in calls), calls
        assert all(c[3] == "float32" and c[4] == "DDP backward" for c in calls), calls
        # every step reduced every gradient byte once (one or more buckets per step)
        assert sum(c[2] for c in calls) == 2 * seen["grad_bytes"], (calls, seen["grad_bytes"])
    # the hook does what DDP does: the gradients are averaged, the same on both ranks
    assert per_rank[0]["grads"] == per_rank[1]["grads"]


def run_ddp() -> list[dict[str, Any]]:
    return idist.spawn("gloo", targets.ddp_gradients, nproc_per_node=2, job_timeout=JOB_TIMEOUT)
