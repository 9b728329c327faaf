"""What the hang tests check, shared by the spawn, torchrun, signal and Horovod tests: the
lines hang_targets.py marks ``# SITE:<name>``, and the verdicts' sentences about them (the
ledger's, and on gloo torch's flight recorder's)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.distributed import hang_targets as targets

REPO = Path(__file__).resolve().parents[2]
SOURCE = Path(targets.__file__).read_text().splitlines()
FILE = os.path.relpath(targets.__file__, REPO)  # as the workers, started in REPO, name it


def site(name: str) -> str:
    """``tests/distributed/hang_targets.py:<line>`` of the line marked ``# SITE:<name>``."""
    line = next(i for i, text in enumerate(SOURCE, 1) if text.endswith(f"# SITE:{name}"))
    return f"{FILE}:{line}"


#: how the verdict goes on about rank 2 after its last collective, by what it did next
STUCK_IN_PYTHON = f"; it is at {site('stuck')} in stuck_here."
SILENT = "; it did not answer, so this is the ledger it last published."
#: what a rank stuck in a collective writes on a launcher's SIGTERM, before the verdict
SIGTERM_VERDICT = "got SIGTERM while in a collective. Why, from every rank's collective ledger:"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace one space (the verdict is wrapped in places)."""
    return re.sub(r"\s+", " ", text)


def wait_for(path: Path, timeout: float, job: subprocess.Popen[str] | None = None) -> None:
    """Fail unless ``path`` appears within ``timeout`` seconds; with ``job`` (started in a
    session of its own, output piped), a failure kills the job and shows the end of its output."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            output = ""
            if job is not None:
                os.killpg(job.pid, signal.SIGKILL)
                output = "; the job's output ends:\n" + job.communicate()[0][-4000:]
            pytest.fail(f"{path} did not appear within {timeout} s{output}")
        time.sleep(0.05)


def assert_rank_2_behind(text: str, after: str, op: str = "all_reduce", at: str = "fourth") -> None:
    """The verdict of the ``sleep`` / ``kill`` / ``c_call`` modes: ranks 0 and 1 wait in
    collective #4 (``op`` at site ``at``), rank 2 stopped after #3 and ``after`` says how."""
    assert f"Hang in {op} #4 of the world ({site(at)}): ranks 0, 1 are waiting" in text, text
    assert (
        f"rank 2 did not reach it: its last collective was #3 ({site('third')}){after}" in text
    ), text


def assert_diverged(text: str) -> None:
    """The verdict of the ``diverge`` mode: rank 1 called another collective at #4."""
    assert (
        f"rank 1 of 3 called all_gather ({site('odd')}) where ranks 0, 2 called all_reduce "
        f"({site('fourth')}) at #4 of the world: the ranks diverged" in text
    ), text


#: what torch's flight recorder adds about rank 2, which stopped after the third all-reduce
RANK_2_ENGINE = (
    "rank 2 in torch's flight recorder: its last engine collective was gloo:all_reduce #3 of "
    "the world (completed)."
)
#: the flight recorder of ranks waiting in the fourth all-reduce, before and after gloo's
#: own timeout ended it there
IN_FLIGHT = "gloo:all_reduce #4 of the world is scheduled, not completed."
ENDED = "no engine collective of the world in flight; the last was gloo:all_reduce #4 (ended)."


def assert_engine_lines(text: str) -> None:
    """The flight recorder's lines of the ``sleep`` mode: rank 2's last engine collective, and
    for each of ranks 0 and 1 the fourth all-reduce, in flight or ended by the timeout."""
    assert RANK_2_ENGINE in text, text
    said = re.findall(
        rf"ranks? ([\d, ]+) in torch's flight recorder: (?:{re.escape(IN_FLIGHT)}|"
        rf"{re.escape(ENDED)})",
        text,
    )
    assert {int(r) for ranks in said for r in ranks.split(", ")} == {0, 1}, text
