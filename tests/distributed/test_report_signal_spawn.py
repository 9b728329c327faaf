"""The report signal under ``spawn``, for real (2 gloo workers, in a script): SIGUSR2 sent to a
worker or to the parent (as ``pkill -USR2 -f train.py`` does) makes the ranks write their hang
reports and the job goes on to its normal result; the parent passes the signal on and says
where the reports are. The job cards of a parent killed by SIGKILL go with the next job or
``python -m distbridge why``, and a card whose pid now names another process is never used.
A warm world's rank (``distbridge.testing``) answers the signal as well.

Each script runs with ``TMPDIR`` set to the test's folder, so its cards
(``<tmp>/distbridge-<uid>/cards``) and its reports (``<tmp>/distbridge-<uid>/reports/<parent
pid>``) are its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from distbridge.testing import WarmWorld
from tests.distributed import report_signal_targets as targets
from tests.distributed.hang_checks import wait_for
from tests.distributed.process_checks import assert_gone

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
RESULTS = "results: [(0, 1.0), (1, 1.0)]"  # each rank's (rank, sum of the ranks)
CARD = {"rank": 0, "store": "127.0.0.1:1"}  # a card's fields (no job there)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "OMPI_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.pop("DISTBRIDGE_HANG_DIR", None)  # its reporters would write the files by themselves
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env["TMPDIR"] = str(tmp_path)
    return env


def _start(tmp_path: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, targets.__file__, str(tmp_path), mode],
        cwd=REPO, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _user_dir(tmp_path: Path) -> Path:
    return tmp_path / f"distbridge-{os.getuid()}"


def _worker_pids(tmp_path: Path) -> list[int]:
    for rank in range(2):
        wait_for(tmp_path / f"worker-{rank}.pid", 120)
    return [int((tmp_path / f"worker-{rank}.pid").read_text()) for rank in range(2)]


def _finish(job: subprocess.Popen[str], tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "go").write_text("")
    try:
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 0, f"the job ended with {job.returncode}:\n{err[-4000:]}"
    assert RESULTS in out, out
    return out, err


def _report(path: Path, rank: int) -> dict[str, object]:
    data = json.loads(path.read_text())
    assert data["rank"] == rank
    assert data["records"], data  # its ledger: the first all-reduce at least
    return data


def test_sigusr2_to_a_worker_writes_its_report_and_the_job_goes_on(tmp_path: Path) -> None:
    job = _start(tmp_path, "wait")
    pids = _worker_pids(tmp_path)
    reports = _user_dir(tmp_path) / "reports" / str(job.pid)
    os.kill(pids[0], signal.SIGUSR2)  # rank 0 waits in an all-reduce, in C
    wait_for(reports / "rank0.json", 30)
    _, err = _finish(job, tmp_path)
    assert f"distbridge: rank 0 wrote its hang report to {reports}/rank0.json" in err, err
    data = _report(reports / "rank0.json", 0)
    assert "report_signal_targets.py" in str(data["where"]), data["where"]
    assert not (reports / "rank1.json").exists()  # only the rank that got it


def test_sigusr2_to_the_parent_is_passed_on_and_leaves_no_card(tmp_path: Path) -> None:
    job = _start(tmp_path, "wait")
    pids = _worker_pids(tmp_path)
    cards = _user_dir(tmp_path) / "cards"
    assert {p.name for p in cards.glob("*.json")} == {f"{pid}.json" for pid in pids}
    reports = _user_dir(tmp_path) / "reports" / str(job.pid)
    os.kill(job.pid, signal.SIGUSR2)
    for rank in range(2):
        wait_for(reports / f"rank{rank}.json", 30)
    _, err = _finish(job, tmp_path)
    passed_on = (
        f"distbridge: got SIGUSR2, passed on to ranks 0, 1: each writes its hang report to "
        f"{reports} and goes on; the verdict: python -m distbridge why {reports}"
    )
    assert passed_on in err, err
    for rank in range(2):
        _report(reports / f"rank{rank}.json", rank)
    why = [sys.executable, "-m", "distbridge", "why", str(reports)]
    done = subprocess.run(why, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert_gone(pids)
    assert list(cards.glob("*.json")) == []


def test_the_cards_of_a_killed_parent_go_with_why_and_the_next_job(tmp_path: Path) -> None:
    job = _start(tmp_path, "wait")
    pids = _worker_pids(tmp_path)
    job.kill()  # SIGKILL: no handler, no atexit; the workers die with it
    job.communicate()
    assert_gone(pids, timeout=10)
    cards = _user_dir(tmp_path) / "cards"
    left = {p.name for p in cards.glob("*.json")}
    assert left == {f"{pid}.json" for pid in pids}  # what the dead workers left
    why = [sys.executable, "-m", "distbridge", "why", "--pid", str(job.pid)]
    done = subprocess.run(why, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and f"There is no process {job.pid}" in done.stderr, done.stderr
    assert list(cards.glob("*.json")) == [], "why left the cards of the dead job"

    (cards / f"{pids[0]}.json").write_text(json.dumps(CARD))  # as if why had not run
    next_job = _start(tmp_path, "quick")
    _finish(next_job, tmp_path)
    assert list(cards.glob("*.json")) == [], "the next job left a dead job's card"


def test_a_card_whose_pid_names_another_process_is_never_used(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cards = _user_dir(tmp_path) / "cards"
        cards.mkdir(parents=True)
        card = cards / f"{other.pid}.json"  # as a dead job's rank with the same pid left it
        card.write_text(json.dumps({**CARD, "started": "1"}))
        why = [sys.executable, "-m", "distbridge", "why", "--pid", str(other.pid)]
        done = subprocess.run(why, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    finally:
        other.kill()
        other.wait()
    assert done.returncode == 1
    assert f"Process {other.pid} has no distbridge job card" in done.stderr, done.stderr
    assert not card.exists()


def test_sigusr2_to_a_warm_world_rank_writes_its_report_and_the_test_passes() -> None:
    with WarmWorld(2, "gloo") as world:
        run = world.run(targets.signal_myself, timeout=90)
        run.check()
        assert not run.replaced  # the ranks are still up
    assert "distbridge: rank 1 wrote its hang report to " in run.outputs[1], run.outputs
