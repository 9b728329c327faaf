"""Fault injection on CPU gloo: every fault ends in a clear error, in bounded time, with no
process left behind.

Each test asserts the error type and text, a generous time bound (a hang fails instead of
waiting for the process-group timeout) and that the workers' pids are gone. The basic
supervisor behaviours (a worker raising or dying, job timeout, signals to a plain
supervisor) are in test_supervisor.py; here the workers are in a real gloo job.
Each test prints one ``FAULT`` line (error type, seconds, processes left) for the record.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore, PrefixStore

import distbridge as idist
from distbridge.errors import DistributedError, PeerFailed, WorkerFailedError
from distbridge.launch.supervisor import run_workers
from distbridge.reliability import coordination, fail_together
from tests.distributed import fault_targets as targets
from tests.distributed.process_checks import (
    assert_gone,
    child_pids,
    default_sigint,
    is_gone,
    processes_mentioning,
)
from tests.ports import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
BOUND = 60.0  # seconds: far above what any fault here takes, far below a process-group timeout


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _record(
    name: str, error: BaseException | str, seconds: float, pids: list[int], since: str = ""
) -> None:
    kind = error if isinstance(error, str) else type(error).__name__
    left = [pid for pid in pids if not is_gone(pid)]
    since = f" ({since} s after the fault)" if since else ""
    print(f"\nFAULT {name}: {kind} after {seconds:.1f} s{since}, processes left: {len(left)}")


@pytest.fixture(autouse=True)
def _no_child_left() -> Iterator[None]:
    before = child_pids()
    yield
    assert child_pids() - before == set()


def _spawn_failure(
    tmp_path: Path, fn: Callable[..., object], args: tuple[object, ...], nproc: int
) -> tuple[WorkerFailedError, float]:
    start = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn("gloo", fn, args=(str(tmp_path), *args), nproc_per_node=nproc, job_timeout=90)
    return info.value, time.monotonic() - start


# ---- a rank fails: the others raise PeerFailed --------------------------------------------------


def test_a_rank_that_raises_makes_the_others_raise_peer_failed(tmp_path: Path) -> None:
    # Rank 0 waits in all_reduce when rank 1 raises; rank 2 reaches all_reduce only later.
    error, seconds = _spawn_failure(tmp_path, targets.raise_before_collective, (1, 2), 3)

    assert (error.rank, error.exitcode) == (1, None)
    message = str(error)
    assert "Worker rank 1 (local rank 1, pid " in message
    assert "raised ValueError: boom from rank 1. The other workers were stopped." in message
    assert "ValueError: boom from rank 1" in error.worker_traceback
    assert sorted(error.peer_reports) == [0, 2]
    for rank in (0, 2):
        report = error.peer_reports[rank]
        assert report.startswith("PeerFailed: Rank 1 failed: ValueError: boom from rank 1."), report
        assert f"Rank {rank} stopped in all_reduce" in report
        assert f"  rank {rank}: PeerFailed: Rank 1 failed" in message
    assert seconds < BOUND
    pids = targets.read_pids(tmp_path)
    assert len(pids) == 3
    after = targets.seconds_since_failure(tmp_path)
    assert after < 30, f"the others were not stopped quickly ({after:.1f} s)"
    _record("rank raises before a collective", error, seconds, pids, f"{after:.1f}")
    assert_gone(pids, timeout=0)


def test_a_sigkilled_rank_is_named_by_the_others(tmp_path: Path) -> None:
    error, seconds = _spawn_failure(tmp_path, targets.killed_mid_run, (1,), 2)

    assert (error.rank, error.exitcode) == (1, -signal.SIGKILL)
    assert "was killed by signal SIGKILL. The other workers were stopped." in str(error)
    # The parent left the note for the dead worker: rank 0 names it instead of gloo's
    # "Connection closed by peer".
    assert error.peer_reports[0].startswith(
        "PeerFailed: Rank 1 failed: its process was killed by signal SIGKILL."
    ), error.peer_reports
    assert seconds < BOUND
    pids = targets.read_pids(tmp_path)
    assert len(pids) == 2
    after = targets.seconds_since_failure(tmp_path)
    assert after < 30, f"the others were not stopped quickly ({after:.1f} s)"
    _record("rank SIGKILLed mid-run", error, seconds, pids, f"{after:.1f}")
    assert_gone(pids, timeout=0)


def test_a_rank_that_skips_its_last_collective_is_named(tmp_path: Path) -> None:
    error, seconds = _spawn_failure(tmp_path, targets.skip_last_collective, (1,), 2)

    # Rank 1 finished normally; rank 0, left waiting in all_reduce, is the one that fails.
    assert error.rank == 0
    assert error.peer_reports == {1: "finished and returned its result"}
    assert (
        "raised PeerFailed: Rank 1 failed: it left the job (finalize) while rank 0 waited for it "
        "in all_reduce. Every rank must call the same collectives in the same order: look for "
        "a collective that rank 1 skips."
    ) in str(error)
    assert seconds < BOUND
    pids = targets.read_pids(tmp_path)
    assert len(pids) == 2
    after = targets.seconds_since_failure(tmp_path)
    assert after < 30, f"the others were not stopped quickly ({after:.1f} s)"
    _record("rank skips its last collective", error, seconds, pids, f"{after:.1f}")
    assert_gone(pids, timeout=0)


def test_peer_failed_under_torchrun(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-port", str(free_port()),
        str(REPO / "tests/distributed/fault_targets.py"), str(tmp_path),
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(
        command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=100
    )
    seconds = time.monotonic() - start

    assert proc.returncode != 0, "torchrun must report rank 1's failure"
    assert "ValueError: rank 1 gives up" in proc.stderr
    outcome = json.loads((tmp_path / "rank0.json").read_text())
    assert outcome["type"] == "PeerFailed", (outcome, proc.stderr[-3000:])
    assert (outcome["rank"], outcome["summary"]) == (1, "ValueError: rank 1 gives up")
    assert outcome["message"].startswith(
        "Rank 1 failed: ValueError: rank 1 gives up. Rank 0 stopped in all_reduce"
    )
    assert outcome["seconds"] < 30
    assert seconds < 100
    left = processes_mentioning(str(tmp_path))
    print(f"\nFAULT torchrun, rank 1 raises: PeerFailed after {seconds:.1f} s, left: {len(left)}")
    assert left == []


# ---- launch faults ------------------------------------------------------------------------------


def test_a_taken_master_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(DistributedError) as info:
            idist.spawn("gloo", targets.skip_last_collective, args=(str(tmp_path), 0),
                        nproc_per_node=2, master_port=port)  # fmt: skip
        seconds = time.monotonic() - start

    message = str(info.value)
    assert message.startswith(f"Cannot listen on master port {port}: ")
    assert "Another job may hold it: pass another master_port, or leave it unset" in message
    assert seconds < 10
    assert targets.read_pids(tmp_path) == [], "no worker may start"
    _record("master port taken", info.value, seconds, [])


def _initialize_alone(
    env: dict[str, str], options: str = ""
) -> tuple[subprocess.CompletedProcess[str], str, float]:
    """``idist.initialize('gloo', <options>)`` in a process of its own under ``env``, which
    must fail: the process, its last line of stderr, and the seconds it took."""
    code = (
        f"import distbridge as idist\nidist.initialize('gloo', {options})\nprint('initialized')\n"
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=BOUND,
    )  # fmt: skip
    seconds = time.monotonic() - start
    assert proc.returncode == 1, proc.stdout
    return proc, proc.stderr.strip().splitlines()[-1], seconds


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        (
            {"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"},
            "RANK=2 is not below WORLD_SIZE=2 (torchrun variables)",
        ),
    ],
    ids=["rank-not-below-world-size"],
)
def test_inconsistent_launch_variables_fail_fast(variables: dict[str, str], expected: str) -> None:
    proc, last, seconds = _initialize_alone(_env(MASTER_PORT=str(free_port()), **variables))
    assert last.startswith("ValueError: "), proc.stderr[-2000:]
    assert expected in last
    assert seconds < BOUND
    _record(f"inconsistent env {sorted(variables)}", "ValueError", seconds, [])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_parent_stops_workers_blocked_in_a_collective(
    tmp_path: Path, signum: signal.Signals
) -> None:
    code = (
        "import sys, distbridge as idist\n"
        "from tests.distributed import fault_targets\n"
        "if __name__ == '__main__':\n"
        "    idist.spawn('gloo', fault_targets.block_in_barrier, args=(sys.argv[1],),\n"
        "                nproc_per_node=2)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env=_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + BOUND
        while len(pids := targets.read_pids(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(pids) == 2, "the workers did not start"
        time.sleep(0.5)  # rank 1 is in the barrier by now
        start = time.monotonic()
        parent.send_signal(signum)
        _, err = parent.communicate(timeout=30)
        seconds = time.monotonic() - start
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()

    if signum == signal.SIGINT:
        assert parent.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    else:
        assert parent.returncode == 143, err[-2000:]
    assert seconds < 20
    _record(f"parent gets {signum.name}", "KeyboardInterrupt" if signum == 2 else "exit 143",
            seconds, pids)  # fmt: skip
    assert_gone(pids)


# ---- the supervisor -----------------------------------------------------------------------------


def test_the_error_names_the_real_failure_not_a_peer_failed(tmp_path: Path) -> None:
    # Worker 0's PeerFailed report arrives first; worker 1's own error comes within the window.
    target = functools.partial(targets.peer_failed_first, str(tmp_path))
    with pytest.raises(WorkerFailedError) as info:
        run_workers(target, 2, start_method="fork", peer_window=10.0)

    error = info.value
    assert error.rank == 1
    assert "raised ValueError: late. The other workers were stopped." in str(error)
    assert error.peer_reports == {
        0: "PeerFailed: Rank 1 failed: ValueError: late. Rank 0 stopped in all_reduce."
    }
    assert "What the other workers reported:\n  rank 0: PeerFailed: Rank 1 failed" in str(error)
    assert_gone(targets.read_pids(tmp_path))


def test_a_hanging_atexit_handler_cannot_hang_the_exit(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    target = functools.partial(targets.hang_at_exit, str(tmp_path))
    start = time.monotonic()
    results = run_workers(target, 2, grace_seconds=2.0)  # "spawn": atexit handlers do run
    seconds = time.monotonic() - start

    assert results == [0, 1]
    assert seconds < BOUND
    err = capfd.readouterr().err
    # The worker's own watchdog ended it and showed where it hung (not the parent's SIGKILL).
    assert err.count("Timeout (0:00:02)!") == 2, err[-3000:]
    assert "in _hang" in err
    pids = targets.read_pids(tmp_path)
    assert len(pids) == 2
    _record("atexit handler hangs", "none (results returned)", seconds, pids)
    assert_gone(pids, timeout=0)


# ---- the pieces, in one process -----------------------------------------------------------------


def test_failure_notes_first_writer_wins_and_are_read_through_prefixes() -> None:
    root = HashStore()
    view = PrefixStore("distbridge/launch/init0/", PrefixStore("default_pg", root))
    assert fail_together.job_root(view) is root
    assert fail_together.read_failure(view) is None

    fail_together.record_failure(view, 3, "ValueError: first")
    fail_together.record_failure(root, 1, "RuntimeError: second")

    assert fail_together.read_failure(root) == (3, "ValueError: first")
    assert fail_together.read_failure(view) == (3, "ValueError: first")


def test_summaries_are_one_short_line() -> None:
    assert fail_together.summarize(ValueError("bad\nbatch")) == "ValueError: bad"
    assert fail_together.summarize(KeyboardInterrupt()) == "KeyboardInterrupt"
    long = fail_together.summarize(RuntimeError("x" * 1000))
    assert len(long) == 300 and long.endswith("...")


def test_peer_failed_and_worker_failed_survive_pickling() -> None:
    peer = pickle.loads(pickle.dumps(PeerFailed(2, "OSError: disk full", "Rank 0 stopped.")))
    assert (peer.rank, peer.summary, str(peer)) == (
        2,
        "OSError: disk full",
        "Rank 2 failed: OSError: disk full. Rank 0 stopped.",
    )
    assert isinstance(peer, DistributedError)
    failed = WorkerFailedError("m", rank=1, local_rank=1, exitcode=None, peer_reports={0: "x"})
    again = pickle.loads(pickle.dumps(failed))
    assert (again.rank, again.peer_reports, str(again)) == (1, {0: "x"}, "m")


def test_the_excepthook_leaves_a_note_and_chains_on(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def previous(kind: type[BaseException], exc: BaseException, tb: object) -> None:
        seen.append(str(exc))

    monkeypatch.setattr(sys, "excepthook", previous)
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    torch_hook = sys.excepthook  # torch wraps the hook to prefix the rank
    try:
        torn_down: list[str] = []
        teardown = functools.partial(torn_down.append, "after the traceback")
        fail_together.install_excepthook(0, 1, teardown, coordination.default_store)
        assert sys.excepthook is not torch_hook
        sys.excepthook(ValueError, ValueError("uncaught"), None)
        assert seen == ["uncaught"] and torn_down == ["after the traceback"]
        note = fail_together.read_failure(dist.distributed_c10d._get_default_store())
        assert note == (0, "ValueError: uncaught")
        fail_together.uninstall_excepthook()
        assert sys.excepthook is torch_hook
    finally:
        fail_together.uninstall_excepthook()
        dist.destroy_process_group()


def test_hand_set_variables_without_rank_zero_end_at_the_timeout() -> None:
    """RANK=1 of 2 set by hand, no address: ignite's default 127.0.0.1:15000 is filled in
    (issue 24), and with nobody there the rank ends at initialize's timeout with an error that
    names the address and says it was the default, instead of waiting for ever. Rank 1 only
    connects to the port, so nothing here listens on the fixed port."""
    env = _env(RANK="1", WORLD_SIZE="2")
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    proc, last, seconds = _initialize_alone(env, "timeout=3")
    assert last.startswith("distbridge.errors.DistributedError: Rank 1 of 2"), proc.stderr[-2000:]
    assert "127.0.0.1:15000 (MASTER_ADDR, MASTER_PORT unset: ignite's default)" in last
    assert seconds < BOUND
    _record("hand-set RANK=1 without an address", "DistributedError", seconds, [])
