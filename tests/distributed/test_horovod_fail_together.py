"""Fail together on Horovod, for real: when rank 1 fails while its process lingers (a
non-daemon thread, a thread stuck in a C call), ranks 0 and 2 raise `PeerFailed` naming it
within `BOUND` seconds, under ``horovodrun`` (Gloo controller, ``initialize("horovod")``)
and under ``spawn("horovod")``.

What the ranks run is tests/distributed/fail_together_targets.py, as for gloo. Without
horovod installed (the main venv) these tests skip; ``nox -s horovod`` runs them. Each
prints one ``FAULT`` line for the record.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import distbridge as idist
from distbridge.errors import WorkerFailedError
from tests.distributed import fail_together_targets as targets
from tests.distributed.process_checks import assert_gone, is_gone, processes_mentioning

HAS_HOROVOD = importlib.util.find_spec("horovod") is not None
pytestmark = [
    pytest.mark.distributed,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not HAS_HOROVOD, reason="horovod is not installed: nox -s horovod"),
]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "tests/distributed/fail_together_targets.py")
BOUND = 5.0  # seconds from rank 1's failure to its peers' PeerFailed (measured: ~0.01 s)
FINALIZE_BOUND = 2.0
WORLD = 3
SUMMARY = "ValueError: rank 1 gives up"


def _record(name: str, seconds: dict[int, float], left: list[int]) -> None:
    print(f"\nFAULT {name}: PeerFailed on ranks {seconds} s after the failure, left: {len(left)}")


def _worker_pids(folder: Path) -> list[int]:
    """The pids the workers wrote (`fail_together_targets.write_pid`): every rank's."""
    pids = [int(p.read_text()) for p in sorted(folder.glob("worker-*.pid"))]
    assert len(pids) == WORLD, pids
    return pids


def _horovodrun(folder: Path, mode: str) -> subprocess.CompletedProcess[str]:
    launcher = Path(sys.executable).with_name("horovodrun")
    command = [
        str(launcher), "-np", str(WORLD), "-H", f"localhost:{WORLD}", "--gloo",
        sys.executable, SCRIPT, str(folder), mode, "horovod",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0]
        pytest.fail(f"horovodrun did not end within 150 s:\n{out[-4000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, out, "")


@pytest.mark.parametrize("mode", ["linger", "stuck"])
def test_a_lingering_rank_under_horovodrun(tmp_path: Path, mode: str) -> None:
    # linger: a non-daemon thread sleeps 12 s after rank 1 raised; stuck: 600 s. Before,
    # the peers waited in Horovod's allreduce until rank 1's process exited.
    started = time.time()
    proc = _horovodrun(tmp_path, mode)

    assert proc.returncode != 0, "horovodrun must report the failure"
    out = proc.stdout
    assert "ValueError: rank 1 gives up" in out, out[-4000:]
    for rank in (0, 2):
        assert f"distbridge.errors.PeerFailed: Rank 1 failed: {SUMMARY}. Rank {rank}" in out
    seconds = targets.check_peers(tmp_path, SUMMARY, "all_reduce", BOUND, FINALIZE_BOUND)
    failed_at = float((tmp_path / "failed_at").read_text())
    assert failed_at - started < 120
    left = processes_mentioning(str(tmp_path))
    _record(f"horovodrun, rank 1 raises, thread {mode}", seconds, left)
    assert left == []


def test_a_lingering_rank_under_horovod_spawn(tmp_path: Path) -> None:
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn(
            "horovod", targets.spawned, args=(str(tmp_path), "linger"), nproc_per_node=WORLD,
            job_timeout=150,
        )  # fmt: skip
    error = info.value

    assert (error.rank, error.exitcode) == (1, None)
    assert f"raised {SUMMARY}. The other workers were stopped." in str(error)
    assert SUMMARY in error.worker_traceback
    # horovod.run stops every worker as soon as one exits with an error: rank 0 (waiting in
    # all_reduce) reports; rank 2, which enters its all_reduce 1 s after the failure, is
    # usually stopped before it can (or after it wrote its outcome, before its report is read).
    assert 0 in error.peer_reports, str(error)
    for rank, report in error.peer_reports.items():
        assert report.startswith(
            f"PeerFailed: Rank 1 failed: {SUMMARY}. Rank {rank} stopped in all_reduce"
        ), report
    wrote = tuple(sorted(targets.read_outcomes(tmp_path)))
    assert set(error.peer_reports) <= set(wrote), (error.peer_reports, wrote)
    seconds = targets.check_peers(
        tmp_path, SUMMARY, "all_reduce", BOUND, FINALIZE_BOUND, ranks=wrote
    )
    pids = _worker_pids(tmp_path)
    _record(
        "spawn('horovod'), rank 1 raises, thread lingers",
        seconds,
        [p for p in pids if not is_gone(p)],
    )
    assert_gone(pids, timeout=5)


def test_a_rank_killed_under_horovod_spawn_is_named(tmp_path: Path) -> None:
    # A SIGKILLed worker leaves no note; horovod.run sees its death first and stops the
    # others, and the error names it (horovod.run reports the shell's 137 for SIGKILL).
    started = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn(
            "horovod", targets.spawned, args=(str(tmp_path), "kill"), nproc_per_node=WORLD,
            job_timeout=150,
        )  # fmt: skip
    error = info.value

    assert error.rank == 1, str(error)
    assert "Worker rank 1 (local rank 1) was killed by signal SIGKILL" in str(error)
    assert time.monotonic() - started < 120
    assert_gone(_worker_pids(tmp_path), timeout=5)
