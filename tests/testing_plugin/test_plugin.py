"""The pytest plugin, run for real: inner pytest sessions (pytester) whose tests are marked
``@pytest.mark.distbridge``. The inner tests write each rank's pid to a folder, so the outer
test can tell one warm world from a fresh one and check that no rank outlives its session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.distributed.process_checks import assert_gone, child_pids

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.distributed

_HEADER = """
import os
import time
from pathlib import Path

import pytest
import torch

import distbridge as idist

PIDS = Path({pids!r})


def note_pid(test):
    part = PIDS / f"{{test}}.part{{idist.get_rank()}}"
    part.write_text(str(os.getpid()))
    part.rename(PIDS / f"{{test}}.rank{{idist.get_rank()}}")  # whole, for the outer test
"""


def _write(pytester: pytest.Pytester, pids: Path, body: str) -> None:
    pids.mkdir(exist_ok=True)
    pytester.makepyfile(_HEADER.format(pids=str(pids)) + body)


def _pids(folder: Path, test: str) -> dict[int, int]:
    found = {}
    for path in folder.glob(f"{test}.rank*"):
        found[int(path.name.rpartition("rank")[2])] = int(path.read_text())
    return found


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    before = child_pids()  # this session's own children (the warm worlds other tests share)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *args, timeout=170)
    assert child_pids() - before == set(), "the inner session left a child process"
    return result


@pytest.mark.timeout(180)
def test_ranks_run_the_test_and_a_world_serves_many_tests(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    _write(pytester, pids, """
@pytest.mark.distbridge(nproc=2, backend="gloo")
def test_two_first():
    note_pid("two_first")
    assert idist.get_world_size() == 2
    assert idist.all_reduce(torch.tensor([idist.get_rank() + 1.0])).item() == 3.0


@pytest.mark.distbridge(nproc=2)
@pytest.mark.parametrize("base", [10, 20])
def test_two_again(base, tmp_path):
    note_pid(f"two_again{base}")
    assert tmp_path.is_dir()
    assert idist.all_reduce(base + idist.get_rank()) == 2 * base + 1


@pytest.mark.distbridge(nproc=4, backend="gloo")
def test_four():
    note_pid("four")
    total = idist.all_reduce(torch.tensor([float(idist.get_rank())]))
    assert (idist.get_world_size(), total.item()) == (4, 6.0)


@pytest.mark.distbridge(nproc=1, backend=None)
def test_serial():
    assert (idist.get_world_size(), idist.model_name()) == (1, "serial")
""")  # fmt: skip
    result = _run(pytester)
    result.assert_outcomes(passed=5)
    first = _pids(pids, "two_first")
    assert sorted(first) == [0, 1]
    assert first == _pids(pids, "two_again10") == _pids(pids, "two_again20"), "not one world"
    four = _pids(pids, "four")
    assert sorted(four) == [0, 1, 2, 3]
    assert_gone([*first.values(), *four.values()])


@pytest.mark.timeout(180)
def test_a_rank_that_fails_fails_the_test_with_what_every_rank_saw(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    _write(pytester, pids, """
@pytest.mark.distbridge(nproc=4, timeout=60)
def test_rank_1_fails():
    note_pid("fails")
    if idist.get_rank() == 1:
        raise ValueError("rank 1 has a bad batch")
    idist.all_reduce(torch.ones(2))


@pytest.mark.distbridge(nproc=4)
def test_after():
    note_pid("after")
    assert idist.all_reduce(1) == 4
""")  # fmt: skip
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "test_rank_1_fails failed on rank 1 of 4 gloo ranks" in out
    assert "---- rank 1: ValueError ----" in out
    assert 'raise ValueError("rank 1 has a bad batch")' in out
    for rank in (0, 2, 3):  # the others raised PeerFailed in their all_reduce, not a timeout
        assert (
            f"  rank {rank}: PeerFailed: Rank 1 failed: ValueError: rank 1 has a bad batch" in out
        )
        assert f"---- rank {rank}: PeerFailed ----" in out
    assert "ran past its timeout" not in out
    before, after = _pids(pids, "fails"), _pids(pids, "after")
    assert len(before) == len(after) == 4
    assert not set(before.values()) & set(after.values()), "the broken world was kept"


@pytest.mark.timeout(180)
def test_a_hung_test_shows_every_rank_stack_and_the_next_gets_a_fresh_world(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    _write(pytester, pids, """
def sleep_forever():
    time.sleep(1000)


@pytest.mark.distbridge(nproc=2, timeout=5)
def test_hangs():
    note_pid("hangs")
    if idist.get_rank() == 0:
        sleep_forever()
    idist.barrier()


@pytest.mark.distbridge(nproc=2)
def test_next():
    note_pid("next")
    assert idist.all_reduce(1) == 2
""")  # fmt: skip
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "test_hangs ran past its timeout of 5 s on 2 gloo ranks: ranks 0, 1 still running" in out
    stacks = out.split("---- rank 0: Python stack when stopped ----")[1]
    rank0, rank1 = stacks.split("---- rank 1: Python stack when stopped ----")
    assert "in sleep_forever" in rank0
    assert "in barrier" in rank1
    assert "in sleep_forever" not in rank1
    hung, fresh = _pids(pids, "hangs"), _pids(pids, "next")
    assert len(fresh) == 2
    assert not set(hung.values()) & set(fresh.values()), "the hung world was kept"
    assert_gone([*hung.values(), *fresh.values()])


@pytest.mark.timeout(120)
def test_ranks_die_with_a_killed_session(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    _write(pytester, pids, """
@pytest.mark.distbridge(nproc=2, timeout=300)
def test_waits():
    note_pid("waits")
    time.sleep(300)
""")  # fmt: skip
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 100
        while len(_pids(pids, "waits")) < 2:
            assert session.poll() is None, "the session ended before its ranks started"
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.2)
        ranks = list(_pids(pids, "waits").values())
    finally:
        os.kill(session.pid, signal.SIGKILL)
        session.wait()
    assert_gone(ranks, timeout=10)


@pytest.mark.timeout(120)
def test_mistakes_are_named_before_any_rank_starts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
import threading

import pytest


@pytest.fixture
def lock():
    return threading.Lock()


@pytest.mark.distbridge(nproc=2)
def test_unpicklable(lock):
    pass


@pytest.mark.distbridge(nprocs=2)
def test_misspelled():
    pass


@pytest.mark.distbridge(nproc=2, backend=None)
def test_serial_with_two():
    pass
""")  # fmt: skip
    result = _run(pytester)
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert "test_unpicklable's argument 'lock'" in out
    assert "cannot be sent to the ranks" in out
    assert "Unknown option 'nprocs'" in out
    assert "Did you mean 'nproc'?" in out
    assert "backend=None runs serially, on one rank; got nproc=2" in out


_LOADED = """
import sys

import pytest

def pytest_sessionfinish(session):
    loaded = sorted(m for m in ("torch", "distbridge", "multiprocessing") if m in sys.modules)
    print("\\nLOADED:", ",".join(loaded) or "none")
"""


@pytest.mark.timeout(120)
def test_the_plugin_module_imports_nothing_until_a_marked_test_runs(
    pytester: pytest.Pytester,
) -> None:
    """The plugin module, loaded on its own (not through the entry point), in a session of
    unmarked tests: no torch, no distbridge, no process."""
    plugin = Path(__file__).parents[2] / "src" / "distbridge_pytest.py"
    pytester.makepyfile(standalone_plugin=plugin.read_text())
    pytester.makeconftest(_LOADED)
    pytester.makepyfile("def test_plain():\n    assert 1 + 1 == 2\n")
    result = _run(pytester, "-s", "-p", "no:distbridge", "-p", "standalone_plugin")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["LOADED: none"])
    result = _run(pytester, "--markers", "-p", "no:distbridge", "-p", "standalone_plugin")
    result.stdout.fnmatch_lines(["@pytest.mark.distbridge(nproc=2, backend='gloo'*"])


@pytest.mark.timeout(120)
def test_a_session_without_marked_tests_imports_no_torch(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(_LOADED)
    pytester.makepyfile("def test_plain():\n    assert 1 + 1 == 2\n")
    result = _run(pytester, "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["LOADED: none"])
