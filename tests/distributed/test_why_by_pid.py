"""``python -m distbridge why --pid PID`` for real: a script runs ``spawn`` with 3 gloo ranks
that hang (rank 2 sleeps in Python, ranks 0 and 1 wait in an all-reduce, a 60 s process-group
timeout); asked by the pid of spawn's parent (the script) or of a rank, the running job
answers through its store, and the verdict names rank 2, its line and the all-reduce."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distbridge.reliability.hang.job_cards import user_dir
from tests.distributed import hang_targets as targets
from tests.distributed.hang_checks import (
    STUCK_IN_PYTHON,
    assert_rank_2_behind,
    one_line,
)
from tests.distributed.process_checks import assert_gone

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys
import distbridge as idist
from tests.distributed import hang_targets

if __name__ == "__main__":
    idist.spawn("gloo", hang_targets.spawned, args=(sys.argv[1], "sleep"), nproc_per_node=3,
                timeout=60, job_timeout=150)
"""


def _why(pid: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "distbridge", "why", "--pid", str(pid), "--wait", "10"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_why_asks_a_running_job_by_the_pid_of_its_parent_or_a_rank(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    log = (tmp_path / "job.log").open("w")
    job = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists():
            assert job.poll() is None, (tmp_path / "job.log").read_text()
            assert time.monotonic() < deadline, "the job did not start within 120 s"
            time.sleep(0.05)
        time.sleep(targets.SETTLE_SECONDS + 0.5)  # rank 2 is in stuck_here
        pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
        assert len(pids) == 3
        asked = {"spawn's parent": _why(job.pid), "rank 1": _why(pids[1])}  # both at once
        done = {who: (why.communicate(timeout=90), why.returncode) for who, why in asked.items()}
        assert job.poll() is None, "the job ended before it was asked"
        cards = {int(p.stem) for p in Path(user_dir("cards")).glob("*.json")}
        assert set(pids) <= cards, (pids, cards)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
        log.close()
    for who, ((out, err), code) in done.items():
        assert code == 0, (who, err)
        assert_rank_2_behind(one_line(out), STUCK_IN_PYTHON)
    assert_gone(pids, timeout=10)


def test_why_names_a_pid_that_is_no_job() -> None:
    # a process of its own: this one may be above a warm world's ranks, whose cards count
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        command = [sys.executable, "-m", "distbridge", "why", "--pid", str(idle.pid)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    finally:
        idle.kill()
        idle.wait()
    assert done.returncode == 1
    assert f"Process {idle.pid} has no distbridge job card" in done.stderr, done.stderr


def test_why_names_a_pid_that_is_gone() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    command = [sys.executable, "-m", "distbridge", "why", "--pid", str(gone.pid)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert f"There is no process {gone.pid}" in done.stderr, done.stderr
