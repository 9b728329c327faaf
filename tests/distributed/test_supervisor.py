"""The process supervisor behind ``spawn``, with real processes.

Every test checks the error type and message, how long the supervisor took, and that no
worker (nor anything a worker started) is left alive afterwards. Most tests use the default
"spawn" start method; the ones whose code path does not depend on it use "fork", which
starts workers without re-importing torch, to keep the file fast on a 2-core machine.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from distbridge.errors import SpawnTimeoutError, WorkerFailedError
from distbridge.launch import supervisor
from distbridge.launch.supervisor import run_workers
from tests.distributed import supervisor_targets as targets
from tests.distributed.process_checks import assert_gone, child_pids, default_sigint

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(60)]

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_child_left() -> Iterator[None]:
    """Every test: no child process of the test process is left, alive or unreaped."""
    before = child_pids()
    yield
    assert child_pids() - before == set()


def test_results_come_back_in_rank_order(tmp_path: Path) -> None:
    results = run_workers(functools.partial(targets.rank_values, str(tmp_path)), 3)

    assert results == [
        {"rank": 0, "squares": [0, 1, 4], "nested": {"ok": True}},
        ("one", 1.5, None),
        None,
    ]
    assert_gone(targets.read_pids(tmp_path), timeout=0)


def test_fork_start_method_works(tmp_path: Path) -> None:
    results = run_workers(
        functools.partial(targets.rank_values, str(tmp_path)), 2, start_method="fork"
    )

    assert results == [
        {"rank": 0, "squares": [0, 1, 4], "nested": {"ok": True}},
        ("one", 1.5, None),
    ]
    assert_gone(targets.read_pids(tmp_path), timeout=0)


def test_large_results_come_back(tmp_path: Path) -> None:
    results = run_workers(targets.large_value, 2, start_method="fork")

    assert [(len(r), r[:1], r[-1:]) for r in results] == [
        (8 << 20, b"\0", b"\0"),
        (8 << 20, b"\1", b"\1"),
    ]


def test_worker_exception_stops_the_others_and_carries_the_traceback(tmp_path: Path) -> None:
    target = functools.partial(targets.fail_on_rank, str(tmp_path), 3, 1, "raise")
    with pytest.raises(WorkerFailedError) as excinfo:
        run_workers(target, 3, rank_offset=4, grace_seconds=2.0)
    # Timed from the failure, not from the start: starting 3 interpreters that import
    # torch takes seconds on a busy 2-core machine.
    stopped_after = targets.seconds_since_failure(tmp_path)

    error = excinfo.value
    message = str(error)
    assert message.startswith("Worker rank 5 (local rank 1, pid ")
    assert "raised ValueError: boom from rank 1. The other workers were stopped." in message
    assert "Traceback of rank 5:\n" in message
    assert (error.rank, error.local_rank, error.exitcode) == (5, 1, None)
    assert "supervisor_targets.py" in error.worker_traceback
    assert "ValueError: boom from rank 1" in error.worker_traceback
    assert error.worker_traceback in message
    assert stopped_after < 10
    assert_gone(targets.read_pids(tmp_path), timeout=0)


@pytest.mark.parametrize(
    ("how", "expected", "exitcode"),
    [
        ("sigkill", "was killed by signal SIGKILL. The other workers were stopped.", -9),
        ("exit3", "exited with code 3. The other workers were stopped.", 3),
        (
            "exit0",
            "exited without reporting a result (exit code 0, e.g. after os._exit(0)). "
            "The other workers were stopped.",
            0,
        ),
    ],
)
def test_worker_death_is_reported(tmp_path: Path, how: str, expected: str, exitcode: int) -> None:
    target = functools.partial(targets.fail_on_rank, str(tmp_path), 2, 0, how)
    with pytest.raises(WorkerFailedError) as excinfo:
        run_workers(target, 2, start_method="fork")  # same path as "spawn", starts faster
    stopped_after = targets.seconds_since_failure(tmp_path)

    pid = targets.read_pids(tmp_path, "worker-0.pid")[0]
    assert str(excinfo.value) == f"Worker rank 0 (local rank 0, pid {pid}) {expected}"
    assert (excinfo.value.rank, excinfo.value.exitcode, excinfo.value.worker_traceback) == (
        0,
        exitcode,
        "",
    )
    assert stopped_after < 10
    assert_gone(targets.read_pids(tmp_path), timeout=0)


def test_unpicklable_return_value_is_a_clear_error(tmp_path: Path) -> None:
    target = functools.partial(targets.fail_on_rank, str(tmp_path), 1, 0, "unpicklable")
    with pytest.raises(WorkerFailedError) as excinfo:
        run_workers(target, 1, start_method="fork")

    message = str(excinfo.value)
    assert message.startswith("Worker rank 0 (local rank 0, pid ")
    assert "its return value <unlocked _thread.lock object" in message
    assert "cannot be pickled to send it to the parent" in message
    assert "cannot pickle '_thread.lock' object" in message
    assert "Return picklable values" in message
    assert_gone(targets.read_pids(tmp_path), timeout=0)


def test_process_group_kill_reaches_grandchildren(tmp_path: Path) -> None:
    target = functools.partial(targets.grandchild_then_fail, str(tmp_path))
    with pytest.raises(WorkerFailedError, match="rank 1 fails while rank 0 has a grandchild"):
        run_workers(target, 2, grace_seconds=2.0)

    assert targets.seconds_since_failure(tmp_path) < 10
    grandchild = targets.read_pids(tmp_path, "grandchild.pid")
    assert len(grandchild) == 1
    assert_gone(targets.read_pids(tmp_path, "worker-*.pid"), timeout=0)
    assert_gone(grandchild)


@pytest.mark.parametrize("start_method", ["spawn", "fork", "forkserver"])
def test_job_timeout_stops_everything(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], start_method: str
) -> None:
    target = functools.partial(targets.sleep_forever, str(tmp_path))
    start = time.monotonic()
    with pytest.raises(SpawnTimeoutError) as excinfo:
        run_workers(target, 2, job_timeout=2, start_method=start_method)
    elapsed = time.monotonic() - start

    message = str(excinfo.value)
    assert message.startswith(
        "The job ran past its job_timeout of 2 s; ranks 0, 1 were still running and stopped"
    )
    assert 2 <= elapsed < 10
    # "spawn" workers may still be importing torch after 2 s and have no pid file yet; the
    # autouse fixture checks that they are gone too. "fork" workers start at once.
    pids = targets.read_pids(tmp_path)
    if start_method == "fork" or pids:
        assert_gone(pids, timeout=0)
    err = capfd.readouterr().err
    assert "distbridge: Python stacks of Worker rank 1 (local rank 1, pid " in err
    if pids:  # a worker that reached its target has faulthandler armed: its stack is shown
        assert "in sleep_forever" in err


def test_an_error_in_the_parent_still_stops_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_supervise(*args: object) -> list[object]:
        targets.wait_for_pids(tmp_path, 2)
        targets.mark_failure(str(tmp_path))
        raise RuntimeError("bug in the parent")

    monkeypatch.setattr(supervisor, "_supervise", broken_supervise)
    target = functools.partial(targets.sleep_forever, str(tmp_path))
    with pytest.raises(RuntimeError, match="bug in the parent"):
        run_workers(target, 2, start_method="fork")  # the same `finally` as with "spawn"

    assert targets.seconds_since_failure(tmp_path) < 10
    assert_gone(targets.read_pids(tmp_path), timeout=0)


def _start_supervisor_process(directory: Path) -> subprocess.Popen[str]:
    script = (
        "import functools, sys\n"
        "from distbridge.launch.supervisor import run_workers\n"
        "from tests.distributed import supervisor_targets as t\n"
        "run_workers(functools.partial(t.sleep_forever, sys.argv[1]), 2, grace_seconds=2.0)\n"
    )
    paths = [str(REPO_ROOT / "src"), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.Popen(
        [sys.executable, "-c", script, str(directory)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_the_parent_stops_the_workers(tmp_path: Path, signum: signal.Signals) -> None:
    parent = _start_supervisor_process(tmp_path)
    try:
        worker_pids = targets.wait_for_pids(tmp_path, 2)
        start = time.monotonic()
        parent.send_signal(signum)
        _, err = parent.communicate(timeout=15)
        elapsed = time.monotonic() - start
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()

    if signum == signal.SIGINT:  # KeyboardInterrupt: Python re-raises SIGINT on itself
        assert parent.returncode != 0
        assert "KeyboardInterrupt" in err
    else:  # SystemExit(128 + SIGTERM)
        assert parent.returncode == 143, err
    assert elapsed < 15
    assert_gone(worker_pids)


def test_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match=r"nprocs must be an int >= 1, got 0\."):
        run_workers(targets.large_value, 0)
    with pytest.raises(ValueError, match="Allowed: 'spawn', 'fork', 'forkserver'") as excinfo:
        run_workers(targets.large_value, 1, start_method="spwan")
    assert "Unknown start_method 'spwan'" in str(excinfo.value)
    assert "Did you mean 'spawn'?" in str(excinfo.value)
    with pytest.raises(ValueError, match="job_timeout must be a number of seconds > 0 or None"):
        run_workers(targets.large_value, 1, job_timeout=0)
    with pytest.raises(ValueError, match=r"job_timeout must be .*, got True"):
        run_workers(targets.large_value, 1, job_timeout=True)
    with pytest.raises(ValueError, match=r"grace_seconds must be a number of seconds >= 0, got -1"):
        run_workers(targets.large_value, 1, grace_seconds=-1)
    with pytest.raises(ValueError, match="peer_window must be a number of seconds >= 0, got nan"):
        run_workers(targets.large_value, 1, peer_window=float("nan"))
