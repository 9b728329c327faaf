"""Mistakes in a user's script that make every worker fail: spawn says what to change.

Each test runs a small script in a fresh interpreter, as a user would, reads the error it
ends with, and checks that no process it started is left (found by a marker in their
environment, which every descendant inherits).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.distributed]

_REPORT = """
import distbridge as idist

def work(local_rank):
    return idist.get_rank()

def main():
    try:
        print("RESULT", idist.spawn("gloo", work, nproc_per_node=2, **OPTIONS))
    except Exception as err:
        print("ERROR", type(err).__name__, str(err).splitlines()[0])
"""


def _run(tmp_path: Path, source: str, *, stdin: bool = False) -> str:
    """Run ``source`` as a script (or fed on stdin); return its output, once it and all
    it started have ended."""
    marker = uuid.uuid4().hex
    env = {**os.environ, "DISTBRIDGE_TEST_MARK": marker, "PYTHONPATH": os.getcwd()}
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    command = [sys.executable, "-"] if stdin else [sys.executable, str(script)]
    done = subprocess.run(
        command,
        input=script.read_text() if stdin else None,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert not _marked(marker), "a process started by the script is still running"
    return done.stdout + done.stderr


def _marked(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if f"DISTBRIDGE_TEST_MARK={marker}".encode() in environ.split(b"\0"):
                found.append(int(entry.name))
    return found


def _error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(("ERROR", "RESULT"))]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_script_without_main_guard_is_named(tmp_path: Path, start_method: str) -> None:
    source = _REPORT.replace("**OPTIONS", f"start_method={start_method!r}") + "main()\n"
    output = _run(tmp_path, source)
    line = _error_line(output)
    assert line.startswith("ERROR WorkerFailedError Worker rank "), output
    assert 'has no `if __name__ == "__main__":` guard' in line
    assert "put the spawn call" in line
    assert 'start_method="fork"' in line
    assert "bootstrapping phase" not in output  # the standard library's message is preempted


@pytest.mark.timeout(90)
def test_a_guarded_script_runs(tmp_path: Path) -> None:
    source = _REPORT.replace("**OPTIONS", "") + 'if __name__ == "__main__":\n    main()\n'
    assert _error_line(_run(tmp_path, source)) == "RESULT [0, 1]"


@pytest.mark.timeout(90)
def test_code_fed_on_stdin_is_refused_before_any_worker_starts(tmp_path: Path) -> None:
    source = _REPORT.replace("**OPTIONS", "") + 'if __name__ == "__main__":\n    main()\n'
    output = _run(tmp_path, source, stdin=True)
    line = _error_line(output)
    assert line.startswith("ERROR DistributedError The main script was read from standard input")
    assert "save the code to a file" in line
    assert 'start_method="fork"' in line
    assert "FileNotFoundError" not in output


@pytest.mark.timeout(90)
def test_code_fed_on_stdin_runs_with_fork(tmp_path: Path) -> None:
    source = _REPORT.replace("**OPTIONS", "start_method='fork'")
    output = _run(tmp_path, source + 'if __name__ == "__main__":\n    main()\n', stdin=True)
    assert _error_line(output) == "RESULT [0, 1]"


_MISMATCH = """
import torch
import torch.distributed as dist
import distbridge as idist

def work(local_rank):
    dist.all_reduce(torch.ones(3 if idist.get_rank() == 0 else 1000))

if __name__ == "__main__":
    try:
        idist.spawn("gloo", work, nproc_per_node=2, job_timeout=60)
    except Exception as err:
        print("ERROR", type(err).__name__, str(err).splitlines()[0])
"""


@pytest.mark.timeout(90)
def test_sigabrt_in_a_collective_points_to_the_debug_mode(tmp_path: Path) -> None:
    output = _run(tmp_path, _MISMATCH)
    line = _error_line(output)
    assert line.startswith("ERROR WorkerFailedError Worker rank"), output
    assert "was killed by signal SIGABRT" in line
    assert "called different collectives" in line
    assert "DISTBRIDGE_DEBUG=1" in line
    assert "spawn(..., debug=True)" in line
