"""The hang verdict on Horovod, for real: 3 ranks under ``horovodrun --gloo`` with
``DISTBRIDGE_HANG_DIR`` set, one stuck in Python or the ranks diverged (hang_targets.py).

Horovod cannot interrupt a stuck collective (no timeout ends it; its stall check only warns
after a minute), so the verdict comes from the ranks that can speak: SIGUSR2 makes each
write its report (ledger, where it is) to the directory while its main thread waits, and
``python -m distbridge why DIR`` names the rank at fault. Then the job is killed, and no
process may be left. Without horovod installed these tests skip; ``nox -s horovod`` runs
them.
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

from tests.distributed import hang_targets as targets
from tests.distributed.hang_checks import (
    STUCK_IN_PYTHON,
    assert_diverged,
    assert_rank_2_behind,
    one_line,
    wait_for,
)
from tests.distributed.process_checks import assert_gone

HAS_HOROVOD = importlib.util.find_spec("horovod") is not None
pytestmark = [
    pytest.mark.distributed,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not HAS_HOROVOD, reason="horovod is not installed: nox -s horovod"),
]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 120.0  # three interpreters with torch and horovod on two busy cores


def _start_job(folder: Path, mode: str, **env_vars: str) -> subprocess.Popen[str]:
    """hang_targets.py on 3 ranks under ``horovodrun --gloo`` in ``mode``, in a session of its
    own (so that killing its group ends every rank); its output, merged, on ``stdout``."""
    launcher = Path(sys.executable).with_name("horovodrun")
    command = [
        str(launcher), "-np", "3", "-H", "localhost:3", "--gloo",
        sys.executable, targets.__file__, str(folder), mode, "horovod",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", **env_vars)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def _verdict_of_hung_job(folder: Path, mode: str) -> str:
    """Start the job, wait for the hang, SIGUSR2 every rank, ``why`` the dumps, kill the job;
    the verdict's text, whole words on one line."""
    dumps = folder / "dumps"
    job = _start_job(folder, mode, DISTBRIDGE_HANG_DIR=str(dumps))
    pids: list[int] = []
    try:
        wait_for(folder / "started", START_TIMEOUT)
        time.sleep(targets.SETTLE_SECONDS + 1.0)  # every rank is where it stays
        pids = [int(p.read_text()) for p in sorted(folder.glob("worker-*.pid"))]
        assert len(pids) == 3
        for pid in pids:
            os.kill(pid, signal.SIGUSR2)
        for rank in range(3):
            wait_for(dumps / f"rank{rank}.json", 10)
        time.sleep(0.5)  # the files are replaced whole; let the last writes land
        why = [sys.executable, "-m", "distbridge", "why", str(dumps)]
        done = subprocess.run(why, capture_output=True, text=True, timeout=60, check=False)
        assert job.poll() is None, "the signal ended the job"
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # nothing else ends a stuck Horovod collective
        output = job.communicate()[0]
    assert done.returncode == 0, done.stderr
    for rank in range(3):
        assert f"distbridge: rank {rank} wrote its hang report to {dumps}/rank{rank}.json" in output
    assert_gone(pids, timeout=10)
    return one_line(done.stdout)


def test_a_rank_stuck_in_python_under_horovodrun(tmp_path: Path) -> None:
    text = _verdict_of_hung_job(tmp_path, "sleep")

    assert_rank_2_behind(text, STUCK_IN_PYTHON)


def test_diverged_collectives_under_horovodrun(tmp_path: Path) -> None:
    text = _verdict_of_hung_job(tmp_path, "diverge")

    assert_diverged(text)


def test_a_barrier_timeout_under_horovodrun_names_the_rank_at_fault(tmp_path: Path) -> None:
    """A timed barrier is the one wait Horovod's ranks can end themselves: ranks 0 and 1 raise
    `BarrierTimeout` after 5 s, and its message carries the verdict, asked of every rank's
    reporter through the coordination store (rank 2 sleeps in Python, its main thread lost)."""
    job = _start_job(tmp_path, "barrier")
    pids: list[int] = []
    try:
        wait_for(tmp_path / "started", START_TIMEOUT)
        wait_for(tmp_path / "caught", targets.BARRIER_TIMEOUT + 60)
        pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
        time.sleep(1.0)  # rank 0's traceback reaches horovodrun's output
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # rank 2 would sleep on
        output = job.communicate()[0]
    text = one_line(output)
    assert "Barrier timed out after 5 s" in text, text[-3000:]
    assert_rank_2_behind(text, STUCK_IN_PYTHON, op="barrier", at="barrier")
    assert_gone(pids, timeout=10)
