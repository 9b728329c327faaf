"""spawn's workers' output: whole lines by default where the output is not a terminal,
``tag_output=True`` starts each line with its rank, ``output_ranks`` shows only some ranks.

Real gloo workers write pieces of lines at the same time on stdout and stderr; no captured
line may mix two ranks. Under pytest the output is captured (not a terminal); one test
runs a script on a pseudo-terminal to check that a terminal stays raw.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import distbridge as idist
from distbridge.errors import WorkerFailedError
from tests.distributed import output_targets as targets

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(90)]


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _untag(line: str) -> tuple[int, str]:
    assert line.startswith(("[rank0]: ", "[rank1]: ")), line[:80]
    return int(line[5]), line[len("[rank0]: ") :]


def test_lines_stay_whole_by_default(capfd: pytest.CaptureFixture[str]) -> None:
    results = idist.spawn("gloo", targets.chatter, nproc_per_node=2)

    assert all(result["fifo"] for result in results)  # relayed: the output is not a terminal
    out, err = capfd.readouterr()
    for text in (out, err):
        lines = _lines(text)
        expected = targets.expected_lines(0) + targets.expected_lines(1)
        assert sorted(lines) == sorted(expected)  # every line whole, none mixed, no tag
        for rank in (0, 1):  # each rank's lines in the order it wrote them
            mine = [line for line in lines if line in set(targets.expected_lines(rank))]
            assert mine == targets.expected_lines(rank)


def test_tag_output_starts_each_line_with_its_rank(capfd: pytest.CaptureFixture[str]) -> None:
    idist.spawn("gloo", targets.chatter, nproc_per_node=2, tag_output=True)

    out, err = capfd.readouterr()
    for text in (out, err):
        seen: dict[int, list[str]] = {0: [], 1: []}
        for line in _lines(text):
            rank, rest = _untag(line)
            seen[rank].append(rest)
        assert seen == {rank: targets.expected_lines(rank) for rank in (0, 1)}


def test_output_ranks_shows_only_those_ranks(capfd: pytest.CaptureFixture[str]) -> None:
    results = idist.spawn("gloo", targets.chatter, nproc_per_node=2, output_ranks=[1])

    assert len(results) == 2
    out, err = capfd.readouterr()
    assert _lines(out) == targets.expected_lines(1)
    assert _lines(err) == targets.expected_lines(1)
    idist.spawn("gloo", targets.chatter, nproc_per_node=2, output_ranks=[0], tag_output=True)
    out, err = capfd.readouterr()
    assert _lines(out) == [f"[rank0]: {line}" for line in targets.expected_lines(0)]
    assert _lines(err) == [f"[rank0]: {line}" for line in targets.expected_lines(0)]


def test_tag_output_false_leaves_the_workers_on_the_parents_stdout() -> None:
    results = idist.spawn("gloo", targets.chatter, nproc_per_node=2, tag_output=False)

    parent = os.fstat(1)
    assert [result["file"] for result in results] == [(parent.st_dev, parent.st_ino)] * 2


def test_a_failure_is_reported_as_without_tags(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(WorkerFailedError) as excinfo:
        idist.spawn("gloo", targets.print_then_fail, nproc_per_node=2, tag_output=True)

    error = excinfo.value
    assert error.rank == 1
    assert "raised ValueError: boom on rank 1. The other workers were stopped." in str(error)
    assert "Traceback of rank 1:" in str(error) and "print_then_fail" in error.worker_traceback
    assert error.peer_reports[0].startswith("PeerFailed")
    out = capfd.readouterr().out
    assert "[rank0]: rank 0 was here" in out and "[rank1]: rank 1 was here" in out


def test_a_terminal_stays_raw_by_default(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import distbridge as idist
            from tests.distributed import output_targets as targets

            if __name__ == "__main__":
                print("RESULT", idist.spawn("gloo", targets.stdout_is_a_terminal, nproc_per_node=2))
            """
        )
    )
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    with subprocess.Popen(
        [sys.executable, str(script)], stdout=follower, stderr=follower, env=env
    ) as process:
        os.close(follower)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # EIO: every process that had the terminal closed it
                break
            if not chunk:
                break
            output += chunk
        process.wait(timeout=60)
    os.close(leader)
    text = output.decode().replace("\r\n", "\n")
    assert "RESULT [True, True]" in text, text  # the workers write to the terminal itself
    assert "rank 0 says hello" in text and "[rank" not in text
