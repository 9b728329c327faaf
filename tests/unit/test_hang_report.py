"""The reporter and `ask_job` over a real TCPStore, in this process: a rank's ledger and
whereabouts reach whoever asks by the store's address, and the published ledger stays for a
rank that no longer answers."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from torch._C._distributed_c10d import TCPStore

import distbridge as idist
from distbridge._state import current
from distbridge.reliability.hang import report as hang_report
from distbridge.reliability.hang.ledger import Record
from distbridge.reliability.hang.report import Reporter, ask_job, collect


@pytest.fixture
def store() -> TCPStore:
    return TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=10))


def test_a_job_is_asked_by_its_store_address(store: TCPStore) -> None:
    ledger = current().ledger
    idist.all_reduce(torch.ones(2))  # recorded in this process's (serial) ledger
    done = threading.Event()
    reporter = Reporter(store, 0, ledger, lambda: not done.is_set(), world_size=1)
    try:
        reports, world_size = ask_job(f"127.0.0.1:{store.port}", wait=5)
    finally:
        done.set()
        reporter.stop()
    assert world_size == 1
    (report,) = reports
    assert report.answered and report.rank == 0
    assert report.records[-1].op == "all_reduce" and report.records[-1].state == "done"
    assert report.where is not None and "test_hang_report.py" in report.where


def test_a_silent_rank_is_described_by_what_it_published(
    store: TCPStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hang_report, "POLL_SECONDS", 0.05)
    ledger = current().ledger
    idist.barrier()
    reporter = Reporter(store, 1, ledger, lambda: True, world_size=2)
    deadline = time.monotonic() + 5
    while not store.check([f"{hang_report.PREFIX}/ledger/1"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    reporter.stop()  # from now on rank 1 answers nothing
    time.sleep(0.2)

    reports = collect(store, 2, wait=0.3, notes={0: "its process was killed"})
    assert [r.rank for r in reports] == [0, 1]
    assert reports[0].note == "its process was killed" and not reports[0].records
    assert not reports[1].answered and reports[1].asked
    assert reports[1].records[-1].op == "barrier"


def test_an_answer_that_is_no_report_counts_as_no_answer(store: TCPStore) -> None:
    # The first request's answer key, set before the request: JSON, but not a report.
    store.set(hang_report.answer_key(1, 0), "[1, 2]")
    (report,) = collect(store, 1, wait=0.3)
    assert report.rank == 0 and not report.answered and report.asked


def test_a_bad_store_address_is_named() -> None:
    with pytest.raises(ValueError, match=r"must be host:port, got 'nowhere'"):
        ask_job("nowhere")


def _publish_and_fall_silent(store: TCPStore, rank: int) -> None:
    """A reporter of this process's ledger as ``rank``: one barrier recorded, its ledger
    published to ``store``, then stopped (from then on it answers nothing)."""
    idist.barrier()
    reporter = Reporter(store, rank, current().ledger, lambda: True, world_size=2)
    deadline = time.monotonic() + 5
    while not store.check([f"{hang_report.PREFIX}/ledger/{rank}"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    reporter.stop()
    reporter.join(5)


_HOST = """
import sys
from datetime import timedelta
from torch._C._distributed_c10d import TCPStore
store = TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=30))
print(store.port, flush=True)
sys.stdin.readline()
"""


def test_a_store_whose_host_ends_during_the_wait_leaves_what_was_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Horovod's store lives in rank 0's process: when a launcher stops every rank at once,
    # rank 0 may end while rank 1 still waits for answers. What rank 1 read stands.
    monkeypatch.setattr(hang_report, "POLL_SECONDS", 0.05)
    host = subprocess.Popen(
        [sys.executable, "-c", _HOST], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert host.stdout is not None and host.stdin is not None
        port = int(host.stdout.readline())
        store = TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=10))
        _publish_and_fall_silent(store, 1)
        threading.Timer(0.5, host.stdin.close).start()  # the host ends during the wait
        reports = collect(store, 2, me=(0, current().ledger), wait=30)
    finally:
        host.kill()
        host.wait(10)
    assert reports[0].answered
    assert not reports[1].answered and reports[1].asked
    assert reports[1].records[-1].op == "barrier"


def test_a_rank_the_store_has_nothing_of_is_described_by_its_dump(
    store: TCPStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(hang_report.DIR_ENV_VAR, str(tmp_path))
    idist.all_gather(torch.ones(1))
    written = hang_report.report(1, current().ledger)
    hang_report.write_report(str(tmp_path), 1, written)  # as rank 1's reporter did

    reports = collect(store, 2, me=(0, current().ledger), wait=0.3)
    assert not reports[1].answered and reports[1].asked
    assert reports[1].records[-1].op == "all_gather"
    assert reports[1].records == tuple(Record.from_dict(r) for r in written["records"])


def test_a_dump_directory_that_cannot_be_written_leaves_the_reporter_answering(
    store: TCPStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dump directory removed during the job (a temporary folder's cleaner, a full disk):
    # its write's OSError ended the reporter's thread, so the rank stopped answering.
    monkeypatch.setattr(hang_report, "POLL_SECONDS", 0.05)
    dumps = tmp_path / "dumps"
    monkeypatch.setenv(hang_report.DIR_ENV_VAR, str(dumps))
    done = threading.Event()
    reporter = Reporter(store, 0, current().ledger, lambda: not done.is_set(), world_size=1)
    try:
        dumps.rmdir()
        idist.all_reduce(torch.ones(2))  # a new ledger version: the next tick writes
        time.sleep(0.3)
        reports, _ = ask_job(f"127.0.0.1:{store.port}", wait=5)
    finally:
        done.set()
        reporter.stop()
    assert reports[0].answered and reports[0].records[-1].op == "all_reduce"


@pytest.mark.parametrize("where", ["a_file", "a_file/below"])
def test_a_dump_directory_that_is_no_folder_is_named_with_the_fix(
    store: TCPStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # it was a bare FileExistsError / NotADirectoryError from os.makedirs inside initialize
    (tmp_path / "a_file").write_text("")
    bad = str(tmp_path / where)
    monkeypatch.setenv(hang_report.DIR_ENV_VAR, bad)
    with pytest.raises(ValueError, match=r"DISTBRIDGE_HANG_DIR=.*writable folder, or unset it"):
        Reporter(store, 0, current().ledger, lambda: True, world_size=1)
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        hang_report.hang_dir()


def test_a_dump_directory_without_write_permission_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(hang_report.DIR_ENV_VAR, str(tmp_path))
    assert hang_report.hang_dir() == str(tmp_path)
    monkeypatch.setattr(hang_report.os, "access", lambda path, mode: False)  # root writes all
    with pytest.raises(ValueError, match="permission denied"):
        hang_report.hang_dir()


class _Unreachable:
    def __getattr__(self, name: str) -> object:
        def fail(*args: object) -> None:
            raise RuntimeError("Connection refused")

        return fail


def test_a_store_out_of_reach_leaves_no_fault_dump_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # start_reporter takes the RuntimeError for "no verdicts"; the fault dump it had turned
    # on stayed on for the life of the process, its file never removed
    enabled: list[str] = []
    monkeypatch.setattr(hang_report, "enable_fault_dump", lambda: enabled.append("on"))
    with pytest.raises(RuntimeError, match="Connection refused"):
        Reporter(_Unreachable(), 0, current().ledger, lambda: True, world_size=2)
    assert enabled == []
