"""The pytest plugin, run for real: inner pytest sessions (pytester) whose tests are marked
``@pytest.mark.distbridge``. The inner tests write each rank's pid to a folder, so the outer
test can tell one warm world from a fresh one and check that no rank outlives its session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
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


def _write(pytester: pytest.Pytester, pids: Path, body: str) -> Path:
    pids.mkdir(exist_ok=True)
    return pytester.makepyfile(_HEADER.format(pids=str(pids)) + body)


def _line_of(path: Path, text: str) -> str:
    """``name.py:12``: where ``text`` first appears in the file (1-based)."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return f"{path.name}:{number}"
    raise AssertionError(f"{text!r} is not in {path}")


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
    path = _write(pytester, pids, """
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
    # where each rank is, read from its stack: the user's innermost line and what it called
    sleeping, waiting = _line_of(path, "time.sleep(1000)"), _line_of(path, "idist.barrier()")
    assert f"(rank 0 in sleep_forever at {sleeping}, rank 1 in barrier at {waiting})" in out
    assert f"  rank 0: still running, stopped at the timeout, in sleep_forever at {sleeping}" in out
    assert f"  rank 1: still running, stopped at the timeout, in barrier at {waiting}" in out
    # the verdict from the ranks' ledgers (a fresh world: the barrier is its first collective)
    assert "Why, from every rank's collective ledger:" in out
    assert f"Hang in barrier #1 of the world ({waiting}): rank 1 is waiting in it." in out
    assert (
        "rank 0 did not reach it: it has called no collective of the world; it is at "
        f"{sleeping} in sleep_forever." in out
    )
    stacks = out.split("---- rank 0: Python stack when stopped ----")[1]
    rank0, rank1 = stacks.split("---- rank 1: Python stack when stopped ----")
    rank1 = rank1.split("short test summary info")[0]  # the summary repeats the message
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


@pytest.mark.distbridge(nproc=2)
def test_capsys(capsys):
    pass
""")  # fmt: skip
    result = _run(pytester)
    result.assert_outcomes(failed=4)
    out = result.stdout.str()
    # once in the report (the short summary after it repeats each message whole where the
    # CI variable is set, as pytest does there)
    report = out.split("short test summary info")[0]
    assert "test_unpicklable's argument 'lock'" in out
    assert "cannot be sent to the ranks" in out
    assert "Unknown option 'nprocs'" in out
    assert "backend=None runs serially, on one rank; got nproc=2" in out
    assert "test_capsys takes 'capsys', which captures this pytest process's output" in out
    # each said once, on its own: no chained exception around it
    assert report.count("Did you mean 'nproc'?") == 1
    assert report.count("cannot be sent to the ranks") == 1
    assert report.count("contextlib.redirect_stdout") == 1
    assert "During handling of the above exception" not in out
    assert "direct cause of the following exception" not in out
    assert "Can't pickle" not in out and "pickle local object" not in out


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


@pytest.mark.timeout(240)
def test_a_skip_on_some_ranks_is_a_skip_at_the_test_line(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    path = _write(pytester, pids, """
@pytest.mark.distbridge(nproc=2)
def test_together():
    from distbridge.testing import skip_if_any_rank

    note_pid("together")
    skip_if_any_rank(idist.get_rank() == 1, "no GPU")
    idist.all_reduce(1)


@pytest.mark.distbridge(nproc=2)
def test_kept():
    note_pid("kept")
    assert idist.all_reduce(1) == 2


@pytest.mark.distbridge(nproc=2)
def test_one_rank_alone():
    if idist.get_rank() == 1:
        pytest.skip("rank 1 has no data")


@pytest.mark.distbridge(nproc=2)
def test_every_rank():
    pytest.skip("not today")


@pytest.mark.distbridge(nproc=2, timeout=60)
def test_one_rank_while_the_other_waits():
    note_pid("waits")
    if idist.get_rank() == 1:
        pytest.skip("rank 1 skips on its own")
    idist.all_reduce(1)


@pytest.mark.distbridge(nproc=2)
def test_fresh():
    note_pid("fresh")
    assert idist.all_reduce(1) == 2
""")  # fmt: skip
    result = _run(pytester)
    result.assert_outcomes(passed=2, skipped=4)
    out = result.stdout.str()
    # each skip is placed at its line in the test file, with the ranks that asked
    assert f"{_line_of(path, 'skip_if_any_rank(idist')}: no GPU (rank 1 of 2)" in out
    alone = _line_of(path, 'pytest.skip("rank 1 has no data")')
    assert f"{alone}: skipped on rank 1 of 2 gloo ranks: rank 1 has no data" in out
    every = _line_of(path, 'pytest.skip("not today")')
    assert f"{every}: not today" in out
    waited = _line_of(path, 'pytest.skip("rank 1 skips on its own")')
    assert (
        f"{waited}: skipped on rank 1 of 2 gloo ranks: rank 1 skips on its own (rank 0 still "
        "ran and was stopped, waiting for the skipped ranks: skip on every rank together with "
        "distbridge.testing.skip_if_any_rank)"
    ) in out
    assert "distbridge_pytest.py" not in out
    # skipping together keeps the world; a rank left waiting gets a fresh one
    together, kept = _pids(pids, "together"), _pids(pids, "kept")
    assert len(together) == 2 and together == kept, "the world was replaced after a skip"
    waits, fresh = _pids(pids, "waits"), _pids(pids, "fresh")
    assert len(fresh) == 2 and not set(waits.values()) & set(fresh.values())


@pytest.mark.timeout(180)
def test_dash_s_shows_each_rank_output_live(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Each rank prints, then waits for a file that the outer test writes only once it has
    read both lines from the inner session's live output."""
    go = tmp_path / "go"
    _write(pytester, tmp_path / "pids", f"""
GO = Path({str(go)!r})


@pytest.mark.distbridge(nproc=2, timeout=90)
def test_waits_for_go():
    print(f"rank {{idist.get_rank()}} waits for go")
    deadline = time.monotonic() + 80
    while not GO.exists():
        assert time.monotonic() < deadline, "nobody saw the output live"
        time.sleep(0.05)
    print("went")
""")  # fmt: skip
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-q"],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(session.stdout or ()), daemon=True)
    reader.start()
    try:
        wanted = {"[rank 0] rank 0 waits for go", "[rank 1] rank 1 waits for go"}
        deadline = time.monotonic() + 100
        while not wanted <= {line.strip() for line in list(lines)}:
            assert session.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "no live output:\n" + "".join(lines)
            time.sleep(0.05)
        go.touch()
        assert session.wait(timeout=60) == 0, "".join(lines)
    finally:
        if session.poll() is None:
            os.kill(session.pid, signal.SIGKILL)
            session.wait()
    reader.join(10)
    out = "".join(lines)
    assert "[rank 0] went" in out and "[rank 1] went" in out
    assert "1 passed" in out


@pytest.mark.timeout(180)
def test_the_marker_combines_with_parametrize_and_param_marks(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    _write(pytester, pids, """
@pytest.mark.distbridge(nproc=2)
@pytest.mark.parametrize(
    "size", [2, pytest.param(4, marks=pytest.mark.distbridge(nproc=4), id="four")]
)
def test_world(size, tmp_path):
    note_pid(f"world{size}")
    assert tmp_path.is_dir()
    assert idist.get_world_size() == size


@pytest.mark.parametrize(
    "nproc",
    [
        pytest.param(1, marks=pytest.mark.distbridge(nproc=1, backend=None)),
        pytest.param(2, marks=pytest.mark.distbridge(nproc=2)),
        pytest.param(0),  # no marker: runs in the pytest process
    ],
)
def test_only_marked_params_spread(nproc):
    assert idist.get_world_size() == max(nproc, 1)
    assert idist.all_reduce(1) == max(nproc, 1)
""")  # fmt: skip
    result = _run(pytester, "-v")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*test_world?four? PASSED*"])
    assert sorted(_pids(pids, "world2")) == [0, 1]
    assert sorted(_pids(pids, "world4")) == [0, 1, 2, 3]


@pytest.mark.timeout(180)
def test_a_debug_mode_failure_heads_the_report_with_what_each_rank_called(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    _write(pytester, tmp_path / "pids", """
from distbridge.testing import faults


@pytest.mark.distbridge(nproc=2, debug=True)
def test_wrong_dtype():
    with faults.inject(faults.WrongDtype(torch.float64), op="all_reduce", rank=1):
        idist.all_reduce(torch.ones(4))
""")  # fmt: skip
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    head = out.partition("test_wrong_dtype failed on rank")[2].partition("What each rank did:")[0]
    assert "they differ in dtype. What each rank called:" in head
    assert "all_reduce(type=tensor, dtype=float32, shape=[4], op=SUM)" in head
    assert "all_reduce(type=tensor, dtype=float64, shape=[4], op=SUM)" in head
    assert "Every rank must call the same collectives" in head


@pytest.mark.timeout(180)
def test_monkeypatch_works_on_the_ranks_and_is_undone_after_the_test(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    _write(pytester, pids, """
import sys

SETTING = "original"
START = Path.cwd()  # where the ranks run (the module is imported before the first test)


def read_setting():
    return SETTING


@pytest.mark.distbridge(nproc=2)
def test_patches(monkeypatch, tmp_path):
    note_pid("patches")
    monkeypatch.setattr(sys.modules[__name__], "SETTING", f"rank {idist.get_rank()}")
    monkeypatch.setenv("DISTBRIDGE_TEST_SETTING", "patched")
    monkeypatch.chdir(tmp_path)
    assert read_setting() == f"rank {idist.get_rank()}"
    assert os.environ["DISTBRIDGE_TEST_SETTING"] == "patched"
    assert Path.cwd() == tmp_path


@pytest.mark.distbridge(nproc=2)
def test_next_sees_the_originals(tmp_path):
    note_pid("next")
    assert read_setting() == "original"
    assert "DISTBRIDGE_TEST_SETTING" not in os.environ
    assert Path.cwd() == START
""")  # fmt: skip
    result = _run(pytester)
    result.assert_outcomes(passed=2)
    assert _pids(pids, "patches") == _pids(pids, "next"), "not one world"
