"""The hang verdict for real: 3 gloo ranks under ``spawn`` with a 5 s process-group timeout,
and under torchrun with ``initialize("gloo", timeout=10)``, default settings (no debug
mode). One rank goes astray after three all-reduces (see hang_targets.py); the error must
name it, its file:line and the collective the others wait in, within the timeout plus a few
seconds, and leave no process behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import distbridge as idist
from distbridge.errors import SpawnTimeoutError, WorkerFailedError
from tests.distributed import hang_targets as targets
from tests.distributed.hang_checks import (
    IN_FLIGHT,
    RANK_2_ENGINE,
    SIGTERM_VERDICT,
    SILENT,
    STUCK_IN_PYTHON,
    assert_diverged,
    assert_engine_lines,
    assert_rank_2_behind,
    one_line,
    site,
)
from tests.distributed.process_checks import assert_gone
from tests.ports import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

TIMEOUT = 5.0  # the process group's timeout
JOB_TIMEOUT = 60.0  # test_a_job_timeout: time enough to start three workers on busy cores
#: from the hung collective's start to rank 0's error: the timeout, the verdict's wait for
#: answers (3 s when a rank cannot answer) and slack for two busy cores
BOUND = TIMEOUT + 3.0 + 6.0
REPO = Path(__file__).resolve().parents[2]
#: under torchrun: from the hung collective's start to torchrun's end (its agent stops the
#: others when one rank ends; each survivor then has TERMINATION_WAIT_SECONDS for its verdict)
TORCHRUN_BOUND = targets.TORCHRUN_TIMEOUT + 3.0 + 10.0


def _spawn_failure(folder: Path, mode: str) -> WorkerFailedError:
    with pytest.raises(WorkerFailedError) as info:
        idist.spawn("gloo", targets.spawned, args=(str(folder), mode), nproc_per_node=3,
                    timeout=TIMEOUT, job_timeout=150)  # fmt: skip
    return info.value


def _check_time_and_processes(folder: Path) -> float:
    seconds = float((folder / "caught").read_text()) - float((folder / "started").read_text())
    assert seconds < BOUND, f"rank 0's error came {seconds:.1f} s after the hang began"
    pids = [int(p.read_text()) for p in sorted(folder.glob("worker-*.pid"))]
    assert len(pids) == 3
    assert_gone(pids, timeout=0)
    return seconds


def _text(error: WorkerFailedError) -> str:
    """The message without the paths gloo prints, the whole words joined on one line."""
    return one_line(str(error))


def test_a_rank_stuck_in_python(tmp_path: Path) -> None:
    error = _spawn_failure(tmp_path, "sleep")

    text = _text(error)
    assert error.rank in (0, 1), text  # a waiting rank timed out: the verdict names rank 2
    assert "CollectiveTimeout: all_reduce timed out." in text, text
    assert_rank_2_behind(text, STUCK_IN_PYTHON)
    assert_engine_lines(text)  # torch's flight recorder, beside the ledger
    seconds = _check_time_and_processes(tmp_path)
    print(f"\nHANG stuck in Python: rank 0's verdict {seconds:.1f} s after the hang began")


def test_a_barrier_timeout(tmp_path: Path) -> None:
    error = _spawn_failure(tmp_path, "barrier")

    text = _text(error)
    assert "BarrierTimeout: Barrier timed out after 5 s" in text, text
    assert_rank_2_behind(text, STUCK_IN_PYTHON, op="barrier", at="barrier")
    # a timed barrier goes through the store: the engine of ranks 0, 1 has nothing in flight
    assert RANK_2_ENGINE in text, text
    assert (
        "ranks 0, 1 in torch's flight recorder: no engine collective of the world in flight; "
        "the last was gloo:all_reduce #3 (ended)." in text
    ), text
    seconds = _check_time_and_processes(tmp_path)
    print(f"\nHANG barrier(timeout=5): rank 0's verdict {seconds:.1f} s after the hang began")


def test_diverged_collectives(tmp_path: Path) -> None:
    error = _spawn_failure(tmp_path, "diverge")

    text = _text(error)
    assert_diverged(text)
    seconds = _check_time_and_processes(tmp_path)
    print(f"\nHANG diverged: rank 0's verdict {seconds:.1f} s after the hang began")


def test_a_killed_rank(tmp_path: Path) -> None:
    start = time.monotonic()
    error = _spawn_failure(tmp_path, "kill")

    text = _text(error)
    assert (error.rank, error.exitcode) == (2, -signal.SIGKILL), text
    # the survivors publish their ledgers as they finalize: they raised in it by then
    hang = re.escape(f"Hang in all_reduce #4 of the world ({site('fourth')}): ranks 0, 1 ")
    assert re.search(hang + r"(are waiting in it|entered it, and it raised on ranks 0, 1)\.", text)
    assert (
        f"rank 2 did not reach it: its last collective was #3 ({site('third')}), as last "
        "published; it failed: its process was killed by signal SIGKILL" in text
    ), text
    assert sorted(error.peer_reports) == [0, 1]
    for report in error.peer_reports.values():  # the survivors' own errors say it first
        assert report.startswith("PeerFailed: Rank 2 failed: its process was killed"), report
    seconds = _check_time_and_processes(tmp_path)
    print(f"\nHANG killed: PeerFailed {seconds:.1f} s, spawn {time.monotonic() - start:.1f} s")


def test_a_rank_stuck_in_c_holding_the_gil(tmp_path: Path) -> None:
    error = _spawn_failure(tmp_path, "c_call")

    text = _text(error)
    assert_rank_2_behind(text, SILENT)
    seconds = _check_time_and_processes(tmp_path)
    print(f"\nHANG stuck in C: rank 0's verdict {seconds:.1f} s after the hang began")


def test_the_verdict_rebuilt_from_the_dump_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dumps = tmp_path / "dumps"
    monkeypatch.setenv("DISTBRIDGE_HANG_DIR", str(dumps))  # the workers inherit it
    _spawn_failure(tmp_path, "sleep")

    assert sorted(p.name for p in dumps.iterdir()) == ["rank0.json", "rank1.json", "rank2.json"]
    command = [sys.executable, "-m", "distbridge", "why", str(dumps)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    text = one_line(done.stdout)
    # After the hang ranks 0 and 1 raised CollectiveTimeout; their files may have caught that.
    hang = re.escape(f"Hang in all_reduce #4 of the world ({site('fourth')}): ranks 0, 1 ")
    assert re.search(
        hang + r"(are waiting in it|entered it, and it raised on ranks? [01, ]+)\.", text
    )
    assert (
        f"rank 2 did not reach it: its last collective was #3 ({site('third')})"
        f"{STUCK_IN_PYTHON}" in text
    ), text
    # rank 2's file was rewritten while it stood still: with its flight recorder
    assert RANK_2_ENGINE in text, text


def test_a_job_timeout(tmp_path: Path) -> None:
    # The process group's timeout (120 s) is far away: spawn's job_timeout ends the job first,
    # and its parent asks the workers for the verdict.
    with pytest.raises(SpawnTimeoutError) as info:
        idist.spawn("gloo", targets.spawned, args=(str(tmp_path), "sleep"), nproc_per_node=3,
                    timeout=120, job_timeout=JOB_TIMEOUT)  # fmt: skip

    text = one_line(str(info.value))
    assert f"job_timeout of {JOB_TIMEOUT} s" in text, text
    assert_rank_2_behind(text, STUCK_IN_PYTHON)
    # asked while the all-reduce hangs: torch's flight recorder has it in flight
    assert RANK_2_ENGINE in text, text
    assert f"ranks 0, 1 in torch's flight recorder: {IN_FLIGHT}" in text, text
    pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
    assert len(pids) == 3
    assert_gone(pids, timeout=0)


def _torchrun(folder: Path, mode: str) -> str:
    """hang_targets.py as torchrun's script on 3 ranks; its output, whole words on one line,
    without torchrun's ``[rank<r>]:`` prefixes. Checks the time and that no process is left."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "OMPI_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
        "--master-port", str(free_port()), targets.__file__, str(folder), mode,
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=150, check=False
    )
    ended = time.time()
    assert done.returncode != 0, done.stdout + done.stderr
    seconds = ended - float((folder / "started").read_text())
    assert seconds < TORCHRUN_BOUND, f"torchrun ended {seconds:.1f} s after the hang began"
    pids = [int(p.read_text()) for p in sorted(folder.glob("worker-*.pid"))]
    assert len(pids) == 3
    assert_gone(pids, timeout=5)
    print(f"\nHANG torchrun {mode}: torchrun ended {seconds:.1f} s after the hang began")
    text = re.sub(r"\[rank\d\]:", " ", done.stdout + done.stderr)
    return one_line(text)


def test_a_rank_stuck_in_python_under_torchrun(tmp_path: Path) -> None:
    text = _torchrun(tmp_path, "sleep")

    assert "CollectiveTimeout: all_reduce timed out. rank 2 of 3 is stuck at " in text, text
    assert_rank_2_behind(text, STUCK_IN_PYTHON)
    assert_engine_lines(text)


def test_diverged_collectives_under_torchrun(tmp_path: Path) -> None:
    text = _torchrun(tmp_path, "diverge")

    assert_diverged(text)


def test_a_killed_rank_under_torchrun(tmp_path: Path) -> None:
    # torchrun's agent sees rank 2 die and SIGTERMs ranks 0 and 1, stuck in the all-reduce:
    # their SIGTERM handler (reliability/hang/signals.py) writes the verdict before they end.
    text = _torchrun(tmp_path, "kill")

    assert "Signal 9 (SIGKILL) received by PID" in text, text  # torchrun's own summary
    assert SIGTERM_VERDICT in text, text
    assert_rank_2_behind(text, SILENT)


def test_a_rank_stuck_in_c_under_torchrun(tmp_path: Path) -> None:
    text = _torchrun(tmp_path, "c_call")

    assert "CollectiveTimeout: all_reduce timed out. rank 2 of 3 did not reach it" in text, text
    assert_rank_2_behind(text, SILENT)
