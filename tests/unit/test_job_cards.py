"""Job cards against what was written: a card is found by its own pid or by an ancestor's,
says the store's real address, and cards of processes that are gone are cleared."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed import FileStore, TCPStore

from distbridge.reliability.hang import job_cards
from distbridge.reliability.hang.job_cards import JobCard, find_card, user_dir, write_card


@pytest.fixture(autouse=True)
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture
def store() -> TCPStore:
    return TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=10))


def test_a_card_is_found_by_its_pid(store: TCPStore) -> None:
    path = write_card(store, 3)

    assert path == os.path.join(user_dir("cards"), f"{os.getpid()}.json")
    assert find_card(os.getpid()) == JobCard(os.getpid(), 3, f"127.0.0.1:{store.port}")


def test_a_card_is_found_from_an_ancestor(store: TCPStore, tmp_path: Path) -> None:
    # a child writes its card and waits; this process, its parent, finds it
    code = (
        "import sys, time, datetime\n"
        "from torch.distributed import TCPStore\n"
        "from distbridge.reliability.hang.job_cards import write_card\n"
        f"store = TCPStore('127.0.0.1', {store.port}, None, False,"
        " timeout=datetime.timedelta(seconds=10))\n"
        "print(write_card(store, 1), flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == os.path.join(
            user_dir("cards"), f"{child.pid}.json"
        )
        assert find_card(os.getpid()) == JobCard(child.pid, 1, f"127.0.0.1:{store.port}")
    finally:
        child.kill()
        child.wait()


def test_cards_of_processes_gone_are_cleared(store: TCPStore) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    os.makedirs(user_dir("cards"))
    stale = Path(user_dir("cards"), f"{gone.pid}.json")
    stale.write_text('{"rank": 0, "store": "127.0.0.1:1"}')

    write_card(store, 0)

    assert not stale.exists()


def test_a_store_without_an_address_gets_no_card(tmp_path: Path) -> None:
    assert write_card(FileStore(str(tmp_path / "store"), 1), 0) is None
    with pytest.raises(FileNotFoundError, match=f"Process {os.getpid()} has no distbridge"):
        find_card(os.getpid())


def test_a_store_bound_to_every_address_is_asked_on_the_loopback() -> None:
    class Everywhere:
        host = "0.0.0.0"
        port = 29500

    assert job_cards._store_address(Everywhere()) == "127.0.0.1:29500"


class _Address:
    """Anything with a TCPStore's ``host`` and ``port`` (all a card reads of a store)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rank=st.integers(0, 4095),
    host=st.sampled_from(["127.0.0.1", "node7", "10.1.2.3", "::1", "0.0.0.0", "::"]),
    port=st.integers(1, 65535),
)
def test_a_card_reads_back_as_written(rank: int, host: str, port: int) -> None:
    write_card(_Address(host, port), rank)

    expected_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    assert find_card(os.getpid()) == JobCard(os.getpid(), rank, f"{expected_host}:{port}")


@pytest.mark.parametrize("pid", [0, -1])
def test_a_pid_that_names_no_process_is_not_alive(pid: int) -> None:
    # os.kill(0 or -1, 0) signals a process group or every process: it said alive
    assert not job_cards.alive(pid)
    with pytest.raises(ProcessLookupError, match=f"There is no process {pid}"):
        find_card(pid)


def test_a_zombie_is_not_alive_and_its_card_is_stale() -> None:
    # A rank killed with its parent stays a zombie until init reaps it, which a busy machine
    # (or a container whose init does not reap) leaves for long: why must still prune its card.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        assert job_cards.alive(os.getpid())
        assert not job_cards.alive(child.pid)  # os.kill(pid, 0) still succeeds for a zombie
        os.makedirs(job_cards.user_dir("cards"), exist_ok=True)
        card = Path(job_cards.user_dir("cards"), f"{child.pid}.json")
        card.write_text("{}")
        job_cards.prune_cards()
        assert not card.exists()
    finally:
        child.wait()
