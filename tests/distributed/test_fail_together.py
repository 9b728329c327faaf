"""Fail together for real: when rank 1 fails while its process lingers (a non-daemon thread,
a thread stuck in a C call) or is SIGKILLed, ranks 0 and 2 raise `PeerFailed` naming it
within `BOUND` seconds, under a plain launcher environment, torchrun and ``spawn``.

Each test asserts the error's type and text, the time since the failure, that ``finalize``
after it is prompt, and that no process is left. See fail_together_targets.py for what the
ranks run. Each prints one ``FAULT`` line for the record.
"""

from __future__ import annotations

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
from tests.ports import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "tests/distributed/fail_together_targets.py")
BOUND = 5.0  # seconds from rank 1's failure to its peers' PeerFailed (measured: < 0.1 s)
FINALIZE_BOUND = 2.0
WORLD = 3
START_TIMEOUT = 90.0  # two shared cores: starting three interpreters with torch takes a while
_DROP = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
         "MASTER_PORT", "GROUP_WORLD_SIZE")  # fmt: skip
_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "SLURM_", "HOROVOD_", "JSM_", "TORCHELASTIC_")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROP and not k.startswith(_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _check_peers(folder: Path, summary: str, op: str) -> dict[int, float]:
    return targets.check_peers(folder, summary, op, BOUND, FINALIZE_BOUND)


def _record(name: str, seconds: dict[int, float], left: list[int]) -> None:
    print(f"\nFAULT {name}: PeerFailed on ranks {seconds} s after the failure, left: {len(left)}")


def _launch(folder: Path, mode: str) -> list[subprocess.Popen[str]]:
    """Rank 0..2 with a plain launcher's variables (rank 0 hosts the store)."""
    port = str(free_port())
    procs = []
    for r in range(WORLD):
        variables = {"RANK": r, "LOCAL_RANK": r, "WORLD_SIZE": WORLD, "LOCAL_WORLD_SIZE": WORLD}
        env = _env(
            MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **{k: str(v) for k, v in variables.items()}
        )
        command = [sys.executable, SCRIPT, str(folder), mode]
        procs.append(
            subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def _wait(proc: subprocess.Popen[str], timeout: float) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
        pytest.fail(f"rank did not exit within {timeout} s:\n{out[-3000:]}")


def _kill_all(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("mode", ["linger", "stuck"])
def test_a_lingering_rank_under_a_plain_launcher(tmp_path: Path, mode: str) -> None:
    # linger: a non-daemon thread sleeps 12 s after rank 1 raised; stuck: 600 s (a thread in
    # a C call that never ends in this test): the peers must not wait for either.
    procs = _launch(tmp_path, mode)
    try:
        survivors = {r: _wait(procs[r], START_TIMEOUT + 30) for r in (0, 2)}
        ended = time.time()
        for rank, out in survivors.items():
            assert procs[rank].returncode == 1, out[-3000:]
            assert "distbridge.errors.PeerFailed: Rank 1 failed: ValueError: rank 1 gives up" in out
        seconds = _check_peers(tmp_path, "ValueError: rank 1 gives up", "all_reduce")
        failed_at = float((tmp_path / "failed_at").read_text())
        assert ended - failed_at < targets.LINGER_SECONDS, "the peers waited for rank 1's exit"
        assert procs[1].poll() is None, "rank 1 must still linger when its peers are done"
        if mode == "linger":
            out = _wait(procs[1], targets.LINGER_SECONDS + 30)
            assert procs[1].returncode == 1
        else:
            procs[1].kill()  # its thread never ends: only a signal ends this process
            out = procs[1].communicate()[0]
        # Its own traceback, and no second error from cutting its connections.
        assert "ValueError: rank 1 gives up" in out, out[-3000:]
        assert "terminate called" not in out and "PeerFailed" not in out, out[-3000:]
    finally:
        _kill_all(procs)
    left = [p.pid for p in procs if not is_gone(p.pid)]
    _record(f"plain launcher, rank 1 raises, thread {mode}", seconds, left)
    assert left == []


def test_a_lingering_rank_under_torchrun(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD),
        "--master-port", str(free_port()), SCRIPT, str(tmp_path), "linger",
    ]  # fmt: skip
    proc = subprocess.run(
        command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=170
    )

    assert proc.returncode != 0, "torchrun must report rank 1's failure"
    assert "ValueError: rank 1 gives up" in proc.stderr
    assert "terminate called" not in proc.stderr
    seconds = _check_peers(tmp_path, "ValueError: rank 1 gives up", "all_reduce")
    left = processes_mentioning(str(tmp_path))
    _record("torchrun, rank 1 raises, thread lingers", seconds, left)
    assert left == []


def _spawn_failure(folder: Path, mode: str, debug: bool = False) -> WorkerFailedError:
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn("gloo", targets.spawned, args=(str(folder), mode), nproc_per_node=WORLD,
                    job_timeout=150, debug=debug)  # fmt: skip
    return info.value


def test_a_lingering_rank_under_spawn(tmp_path: Path) -> None:
    error = _spawn_failure(tmp_path, "linger")

    assert (error.rank, error.exitcode) == (1, None)
    assert "raised ValueError: rank 1 gives up. The other workers were stopped." in str(error)
    assert "ValueError: rank 1 gives up" in error.worker_traceback
    assert sorted(error.peer_reports) == [0, 2]
    for rank, report in error.peer_reports.items():
        assert report.startswith(
            f"PeerFailed: Rank 1 failed: ValueError: rank 1 gives up. Rank {rank} stopped in "
            "all_reduce"
        ), report
    seconds = _check_peers(tmp_path, "ValueError: rank 1 gives up", "all_reduce")
    pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
    assert len(pids) == WORLD
    _record("spawn, rank 1 raises, thread lingers", seconds, [p for p in pids if not is_gone(p)])
    assert_gone(pids, timeout=0)


def test_a_rank_killed_while_the_others_wait_in_a_barrier(tmp_path: Path) -> None:
    error = _spawn_failure(tmp_path, "kill")

    assert (error.rank, error.exitcode) == (1, -signal.SIGKILL)
    assert "was killed by signal SIGKILL. The other workers were stopped." in str(error)
    summary = "its process was killed by signal SIGKILL"
    assert sorted(error.peer_reports) == [0, 2]
    for report in error.peer_reports.values():
        assert report.startswith(f"PeerFailed: Rank 1 failed: {summary}."), report
    seconds = _check_peers(tmp_path, summary, "barrier")
    pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
    left = [p for p in pids if not is_gone(p)]
    _record("spawn, rank 1 SIGKILLed, peers in a barrier", seconds, left)
    assert_gone(pids, timeout=0)


def test_a_lingering_rank_in_debug_mode(tmp_path: Path) -> None:
    # The peers wait in the debug mode's fingerprint exchange (a store wait, not gloo): the
    # failure note ends it, where the debug timeout (60 s) would have raised CollectiveMismatch.
    error = _spawn_failure(tmp_path, "linger", debug=True)

    assert error.rank == 1 and sorted(error.peer_reports) == [0, 2]
    for report in error.peer_reports.values():
        assert report.startswith("PeerFailed: Rank 1 failed: ValueError: rank 1 gives up."), report
    where = "all_reduce (debug mode: collective #2 of the world)"  # the full text, in the record
    seconds = _check_peers(tmp_path, "ValueError: rank 1 gives up", where)
    pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
    _record("spawn, debug mode, rank 1 raises", seconds, [p for p in pids if not is_gone(p)])
    assert_gone(pids, timeout=0)
