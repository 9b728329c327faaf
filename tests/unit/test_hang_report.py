"""The reporter and `ask_job` over a real TCPStore, in this process: a rank's ledger and
whereabouts reach whoever asks by the store's address, and the published ledger stays for a
rank that no longer answers."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch
from torch._C._distributed_c10d import TCPStore

import distbridge as idist
from distbridge._state import current
from distbridge.reliability import hang_report
from distbridge.reliability.hang_report import Reporter, ask_job, collect


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


def test_a_bad_store_address_is_named() -> None:
    with pytest.raises(ValueError, match=r"must be host:port, got 'nowhere'"):
        ask_job("nowhere")
