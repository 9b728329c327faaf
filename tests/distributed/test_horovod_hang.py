"""The hang verdict on Horovod, for real: 3 ranks under ``horovodrun --gloo``, rank 2 stuck
in Python, in C, or killed, or the ranks diverged (hang_targets.py).

Horovod cannot interrupt a stuck collective (no timeout ends it; its stall check only warns
after a minute), so the verdict comes from the ranks that can speak:

- stuck in Python or diverged: with ``DISTBRIDGE_HANG_DIR`` set, SIGUSR2 makes each rank
  write its report (ledger, where it is) to the directory while its main thread waits, and
  ``python -m distbridge why DIR`` names the rank at fault; then the job is killed;
- a timed barrier: its `BarrierTimeout` carries the verdict;
- killed: Horovod's engine shuts down on the survivors and horovodrun SIGTERMs them; each
  writes the verdict on SIGTERM (or, keeping SIGTERM for a handler of its own, its error
  carries it);
- deadlocked in C: the user stops the job (SIGINT to horovodrun), ranks 0 and 1 write the
  verdict on horovodrun's SIGTERM.

No process may be left. Without horovod installed these tests skip; ``nox -s horovod`` runs
them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distbridge.reliability.fail_together import NOTE_WAIT_SECONDS
from distbridge.reliability.hang.signals import TERMINATION_WAIT_SECONDS
from tests.distributed import hang_targets as targets
from tests.distributed.hang_checks import (
    SIGTERM_VERDICT,
    SILENT,
    STUCK_IN_PYTHON,
    assert_diverged,
    assert_rank_2_behind,
    one_line,
    site,
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
#: horovodrun's wait between the SIGTERM it sends each rank when stopping the job and SIGKILL,
#: and again for the rank's shell (horovod.runner.common.util.safe_shell_exec's
#: GRACEFUL_TERMINATION_TIME_S): a rank deaf to SIGTERM ends its job twice that late
GRACE_SECONDS = 5.0


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


def _started_job(folder: Path, mode: str, settle: float = 0.0) -> subprocess.Popen[str]:
    """`_start_job`, once rank 0 has entered the collective that hangs (and, with ``settle``,
    that many seconds more, the job still running); the job is killed if that fails."""
    job = _start_job(folder, mode)
    try:
        wait_for(folder / "started", START_TIMEOUT)
        if settle:
            time.sleep(settle)
            assert job.poll() is None, "the job ended by itself"
    except BaseException:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
        raise
    return job


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
        wait_for(tmp_path / "started", START_TIMEOUT, job)
        wait_for(tmp_path / "caught", targets.BARRIER_TIMEOUT + 60, job)
        pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
        time.sleep(1.0)  # rank 0's traceback reaches horovodrun's output
    finally:
        if job.returncode is None:  # not ended by a failed wait_for
            os.killpg(job.pid, signal.SIGKILL)  # rank 2 would sleep on
            output = job.communicate()[0]
    text = one_line(output)
    assert "Barrier timed out after 5 s" in text, text[-3000:]
    assert_rank_2_behind(text, STUCK_IN_PYTHON, op="barrier", at="barrier")
    assert_gone(pids, timeout=10)


def _output_of_stopped_job(job: subprocess.Popen[str], timeout: float) -> tuple[str, float]:
    """Wait up to ``timeout`` seconds for horovodrun to end; its output (whole words on one
    line, without its ``[<rank>]<stderr>:`` prefixes) and the time it ended."""
    try:
        output = job.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        output = job.communicate()[0]
        pytest.fail(f"horovodrun did not end within {timeout} s:\n{output[-3000:]}")
    ended = time.time()
    assert job.returncode != 0, output[-3000:]
    return one_line(re.sub(r"\[\d+\]<std(?:out|err)>:", " ", output)), ended


def _assert_both_survivors_explain(text: str, folder: Path) -> None:
    """Ranks 0 and 1 each wrote the verdict on horovodrun's SIGTERM: rank 2 is named silent,
    with the last collective it published, and no worker is left."""
    for rank in (0, 1):
        assert f"distbridge: rank {rank} {SIGTERM_VERDICT}" in text, text[-3000:]
    assert_rank_2_behind(text, SILENT)
    silent = f"rank 2 did not reach it: its last collective was #3 ({site('third')}){SILENT}"
    assert text.count(silent) == 2, text[-3000:]  # both, also the one whose store host left
    pids = [int(p.read_text()) for p in sorted(folder.glob("worker-*.pid"))]
    assert len(pids) == 3
    assert_gone(pids, timeout=10)


def test_a_killed_rank_under_horovodrun(tmp_path: Path) -> None:
    """Rank 2 SIGKILLs itself while ranks 0 and 1 wait in the fourth all-reduce. Horovod's
    engine on ranks 0 and 1 loses its connection and shuts down; horovodrun sees rank 2's
    exit status and SIGTERMs the others (non-elastic runs stop every rank when one fails),
    and each, still in the collective, writes the verdict from every rank's ledger: rank 2
    does not answer, and the ledger it published last names its last collective."""
    job = _started_job(tmp_path, "kill")
    text, ended = _output_of_stopped_job(job, 60)
    seconds = ended - float((tmp_path / "started").read_text())

    assert "Process 2 exit with status code 137." in text, text[-3000:]  # horovodrun's own
    _assert_both_survivors_explain(text, tmp_path)
    bound = targets.SETTLE_SECONDS + TERMINATION_WAIT_SECONDS + 10.0  # slack: two busy cores
    assert seconds < bound, f"horovodrun ended {seconds:.1f} s after the hang began"
    after_kill = ended - float((tmp_path / "killed").read_text())
    print(f"\nHANG horovodrun killed: horovodrun ended {after_kill:.1f} s after the SIGKILL")


def test_a_killed_rank_named_by_the_survivors_errors_under_horovodrun(tmp_path: Path) -> None:
    """As `test_a_killed_rank_under_horovodrun`, where the ranks keep SIGTERM for a handler of
    their own, so that horovodrun's SIGTERM ends none: Horovod's engine shuts down on ranks 0
    and 1 when rank 2's connection goes, their all-reduce raises Horovod's "has been shut
    down", and no failure note explains it, so its message gains the verdict."""
    job = _started_job(tmp_path, "kill_handled")
    text, _ = _output_of_stopped_job(job, 60)

    assert "HorovodInternalError: Horovod has been shut down." in text, text[-3000:]
    assert (
        "A peer's connection was lost and it left no note (killed by a signal, or its process "
        "ended without a word). Why, from every rank's collective ledger:" in text
    ), text[-3000:]
    assert_rank_2_behind(text, SILENT)
    # The first survivor's error: horovodrun SIGKILLs the ranks 5 s after rank 2's exit (its
    # grace for the SIGTERM they keep), so a survivor whose error comes later writes nothing.
    caught = {path.name: float(path.read_text()) for path in tmp_path.glob("caught-[01]")}
    assert caught, f"neither survivor got its error before horovodrun ended:\n{text[-3000:]}"
    first = min(caught, key=caught.__getitem__)
    seconds = caught[first] - float((tmp_path / "killed").read_text())
    bound = NOTE_WAIT_SECONDS + 1.0 + 8.0  # the wait for a note, for the answers, and slack
    assert seconds < bound, f"the first error ({first}) came {seconds:.1f} s after the SIGKILL"
    pids = [int(p.read_text()) for p in sorted(tmp_path.glob("worker-*.pid"))]
    assert len(pids) == 3
    assert_gone(pids, timeout=10)
    print(
        f"\nHANG horovodrun killed, SIGTERM kept: the first error ({first}) {seconds:.1f} s "
        f"after it; errors from {sorted(caught)}"
    )


def test_a_rank_stuck_in_c_under_horovodrun(tmp_path: Path) -> None:
    """Rank 2 deadlocks in a C call holding the GIL (it answers nothing, and no signal but
    SIGKILL ends the call) while ranks 0 and 1 wait in the fourth all-reduce, for good:
    Horovod ends no collective. The user stops the job (Ctrl-C on horovodrun: SIGINT);
    horovodrun SIGTERMs every rank, ranks 0 and 1 write the verdict, and rank 2, deaf to
    SIGTERM, is SIGKILLed after horovodrun's grace. (A C call that a signal interrupts, as
    ``sleep``, returns on the SIGTERM, and the rank answers for itself.)"""
    job = _started_job(tmp_path, "c_deadlock", settle=targets.SETTLE_SECONDS + 1.0)
    stopped = time.time()
    job.send_signal(signal.SIGINT)
    text, ended = _output_of_stopped_job(job, 60)

    _assert_both_survivors_explain(text, tmp_path)
    bound = 2 * GRACE_SECONDS + 8.0  # slack: two busy cores
    assert ended - stopped < bound, f"horovodrun ended {ended - stopped:.1f} s after Ctrl-C"
    print(f"\nHANG horovodrun stuck in C: horovodrun ended {ended - stopped:.1f} s after Ctrl-C")
