"""The signal handlers of the hang verdict, in this process: SIGUSR2 makes a thread write
this rank's report while the main thread is busy, SIGTERM's handler is left alone where the
user set one, and `unwatch_signals` puts everything back. The real case (ranks stuck in a
collective, torchrun's SIGTERM) runs in tests/distributed/test_hang_signal.py and
test_hang_verdict.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import distbridge as idist
from distbridge._state import current
from distbridge.reliability.hang import signals as hang_signals
from distbridge.reliability.hang.ledger import CollectiveLedger
from distbridge.reliability.hang.signals import DUMP_SIGNAL, unwatch_signals, watch_signals


class _TwoRanks:
    """Rank 0 of 2 that fails together (it is its own part in it, ``together``), with the
    serial model's real ledger (what ``watch_signals`` reads)."""

    _engine_trace = None

    def __init__(self, ledger: CollectiveLedger) -> None:
        self.ledger = ledger
        self.together = self

    def get_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 2

    def verdict(self, notes: Any, wait: float) -> str | None:
        return None


@pytest.fixture
def restored() -> Iterator[None]:
    unwatch_signals()  # an earlier test's initialize() without finalize()
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, DUMP_SIGNAL)}
    yield
    unwatch_signals()
    for signum, handler in before.items():
        signal.signal(signum, handler)


def test_sigusr2_writes_the_report_from_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restored: None
) -> None:
    monkeypatch.setenv("DISTBRIDGE_HANG_DIR", str(tmp_path))
    idist.all_reduce(torch.ones(2))
    watch_signals(_TwoRanks(current().ledger))
    assert signal.getsignal(DUMP_SIGNAL) is not signal.SIG_DFL  # else the kill ends pytest
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    os.kill(os.getpid(), DUMP_SIGNAL)
    deadline = time.monotonic() + 10
    while not (tmp_path / "rank0.json").exists():
        assert time.monotonic() < deadline, "no report within 10 s"
        time.sleep(0.01)
    data = json.loads((tmp_path / "rank0.json").read_text())
    assert data["rank"] == 0
    assert data["records"][-1]["op"] == "all_reduce"
    assert "test_hang_signals.py" in data["records"][-1]["site"]
    unwatch_signals()
    assert signal.getsignal(DUMP_SIGNAL) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.set_wakeup_fd(-1) == -1  # the wake-up descriptor was given back


def test_a_report_that_cannot_be_written_is_said_on_stderr(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    restored: None,
) -> None:
    # the OSError was swallowed: SIGUSR2 left no file and no word of why
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("DISTBRIDGE_HANG_DIR", str(tmp_path / "a_file"))
    watch_signals(_TwoRanks(current().ledger))
    os.kill(os.getpid(), DUMP_SIGNAL)
    said, deadline = "", time.monotonic() + 10
    while "could not write" not in said:
        assert time.monotonic() < deadline, f"no word on stderr within 10 s: {said!r}"
        time.sleep(0.01)
        said += capfd.readouterr().err
    assert "a_file" in said and "set DISTBRIDGE_HANG_DIR to a writable folder" in said


def test_a_handler_of_the_user_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, restored: None
) -> None:
    monkeypatch.delenv("DISTBRIDGE_HANG_DIR", raising=False)

    def mine(signum: int, frame: object) -> None:
        pass

    signal.signal(signal.SIGTERM, mine)
    watch_signals(_TwoRanks(current().ledger))
    assert signal.getsignal(signal.SIGTERM) is mine
    assert list(hang_signals._installed[0].saved) == [DUMP_SIGNAL]  # the report signal only


def test_a_report_signal_handler_of_the_user_is_called_after_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restored: None
) -> None:
    monkeypatch.setenv("DISTBRIDGE_HANG_DIR", str(tmp_path))
    calls: list[int] = []
    signal.signal(DUMP_SIGNAL, lambda signum, frame: calls.append(signum))
    watch_signals(_TwoRanks(current().ledger))
    os.kill(os.getpid(), DUMP_SIGNAL)
    deadline = time.monotonic() + 10
    while not (tmp_path / "rank0.json").exists() or not calls:
        assert time.monotonic() < deadline, f"report or chained call missing: {calls}"
        time.sleep(0.01)
    assert calls == [DUMP_SIGNAL]


def test_trouble_is_a_collective_not_returned_or_raised() -> None:
    ledger = CollectiveLedger(lambda group: None, capacity=4)
    assert not hang_signals._in_trouble(ledger)
    ledger.world.seq = 1  # started, not returned
    assert hang_signals._in_trouble(ledger)
    ledger.world.passed = 1
    assert not hang_signals._in_trouble(ledger)
    ledger.world.raised[1] = 1
    assert hang_signals._in_trouble(ledger)


_LATER_HANDLER = """
import os, signal, sys, time
from distbridge._state import current
from distbridge.reliability.hang.signals import watch_signals
from tests.unit.test_hang_signals import _TwoRanks

watch_signals(_TwoRanks(current().ledger))  # SIGTERM: the verdict's handler and thread
got = []
signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))  # a stop request
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(3 * {wait})  # the thread would end a process in no trouble after {wait} s
print("alive", got == [signal.SIGTERM])
"""


def test_a_sigterm_handler_installed_later_decides_what_sigterm_does() -> None:
    code = _LATER_HANDLER.format(wait=hang_signals.MAIN_THREAD_SECONDS)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "src")]))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert (done.returncode, done.stdout.strip()) == (0, "alive True"), done.stderr[-2000:]
