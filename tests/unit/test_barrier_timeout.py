"""Timed barriers without processes: validation on the serial model, and the store algorithm
with two or three "ranks" in threads sharing one HashStore."""

from __future__ import annotations

import logging
import math
import pickle
import re
import threading
import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from torch._C._distributed_c10d import HashStore

import distbridge as idist
from distbridge.errors import BarrierTimeout, DistributedError, PeerFailed
from distbridge.reliability import fail_together as _fail_together
from distbridge.reliability import timed_barrier as _barrier
from distbridge.reliability.hang import stacks as _stacks
from distbridge.reliability.hang.stacks import StackWatcher
from distbridge.reliability.timed_barrier import StoreBarrier


@pytest.mark.parametrize("timeout", ["5", True, [1], object()])
def test_timeout_of_wrong_type(timeout: object) -> None:
    with pytest.raises(
        TypeError, match=f"timeout must be a number .*got {re.escape(repr(timeout))}"
    ):
        idist.barrier(timeout=timeout)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1, -0.5, math.nan, timedelta(0), timedelta(seconds=-3)])
def test_timeout_not_positive(timeout: object) -> None:
    with pytest.raises(ValueError, match="timeout must be positive"):
        idist.barrier(timeout=timeout)  # type: ignore[arg-type]


def test_name_must_be_a_str() -> None:
    with pytest.raises(TypeError, match="name must be a str naming the barrier, got 5"):
        idist.barrier(name=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [None, 0.01, 3, math.inf, timedelta(minutes=1)])
def test_serial_barrier_returns_at_once(timeout: Any) -> None:
    started = time.monotonic()
    idist.barrier(timeout=timeout, name="x")
    idist.barrier([0], timeout=timeout)
    assert time.monotonic() - started < 1.0


def test_serial_one_rank_first() -> None:
    with idist.one_rank_first(timeout=5):
        ran = True
    assert ran
    with pytest.raises(ValueError, match="boom"), idist.one_rank_first(timeout=5):
        raise ValueError("boom")
    with pytest.raises(TypeError, match="got 'soon'"), idist.one_rank_first(timeout="soon"):  # type: ignore[arg-type]
        pass


def test_barrier_timeout_is_a_timeout_error_and_pickles() -> None:
    err = BarrierTimeout("late", missing_ranks=(2, 3), name="x", timeout=1.5)
    assert isinstance(err, TimeoutError) and isinstance(err, DistributedError)
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.missing_ranks, back.name, back.timeout) == ("late", (2, 3), "x", 1.5)


class _Model:
    """What a `StoreBarrier` takes from its model: ``rank``, a stack watcher that keeps the
    ``reasons`` it is asked for stacks, no hang verdict, and the failure ``note`` it knows
    (it is its own part in failing together, ``together``)."""

    def __init__(self, rank: int, note: tuple[int, str] | None = None) -> None:
        self.rank, self.note, self.reasons = rank, note, []
        self.stack_watcher = SimpleNamespace(request=self.reasons.append)
        self.together = self

    def get_rank(self) -> int:
        return self.rank

    def verdict(self, notes: Any, wait: float) -> None:
        return None

    def known_failure(self) -> tuple[int, str] | None:
        return self.note


def _ranks(store: Any, n: int) -> list[StoreBarrier]:
    return [StoreBarrier(store, _Model(r)) for r in range(n)]  # type: ignore[arg-type]


def _run(targets: dict[int, Any]) -> dict[int, BaseException | None]:
    """Run each rank's target in a thread; what each raised (None: returned)."""
    outcome: dict[int, BaseException | None] = {}

    def run(rank: int) -> None:
        try:
            targets[rank]()
            outcome[rank] = None
        except BaseException as err:  # reported to the test
            outcome[rank] = err

    threads = [threading.Thread(target=run, args=(r,)) for r in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return outcome


def test_store_barrier_passes_and_forgets_old_keys() -> None:
    store = HashStore()
    ranks = _ranks(store, 3)
    members = (0, 1, 2)
    for _ in range(5):
        outcome = _run({r: (lambda b=b: b.wait(members, 10, "loop")) for r, b in enumerate(ranks)})
        assert outcome == {0: None, 1: None, 2: None}
    kept = [s for s in range(5) if store.check([f"barrier/0-1-2/{s}/n"])]
    assert kept == [4]
    assert not store.check(["barrier/0-1-2/3/r0"])


def test_store_barrier_times_out_naming_the_missing_rank(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_barrier, "FIRST_WARNING", 0.2)
    store = HashStore()
    models = [_Model(0), _Model(1)]
    waiting = [StoreBarrier(store, m) for m in models]  # type: ignore[arg-type]
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="distbridge"):
        outcome = _run(
            {r: (lambda b=b: b.wait((0, 1, 2), 1.0, "late")) for r, b in enumerate(waiting)}
        )
    assert time.monotonic() - started < 5
    for err in outcome.values():
        assert isinstance(err, BarrierTimeout)
        assert err.missing_ranks == (2,) and err.name == "late" and err.timeout == 1.0
        assert "ranks [2] of the group [0, 1, 2] did not arrive" in str(err)
    assert "in barrier 'late': ranks [2] of [0, 1, 2] have not arrived (timeout 1 s)" in caplog.text
    reasons = [reason for m in models for reason in m.reasons]
    assert len(reasons) == 2 and "missing ranks [2]" in reasons[0]


def test_store_barrier_abort_wakes_the_waiting_ranks() -> None:
    store = HashStore()
    ranks = _ranks(store, 3)

    def abort_later() -> None:
        time.sleep(0.2)
        ranks[0].abort((0, 1, 2), "rank 0 gave up")

    outcome = _run(
        {
            0: abort_later,
            1: lambda: ranks[1].wait((0, 1, 2), math.inf, None),
            2: lambda: ranks[2].wait((0, 1, 2), math.inf, None),
        }
    )
    assert outcome[0] is None
    for rank in (1, 2):
        err = outcome[rank]
        assert type(err) is DistributedError and str(err) == "rank 0 gave up"
    # The sequence numbers stay in step: the next barrier passes.
    outcome = _run({r: (lambda b=b: b.wait((0, 1, 2), 10, None)) for r, b in enumerate(ranks)})
    assert set(outcome.values()) == {None}


def test_dump_stacks_without_a_context(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="distbridge"):
        text = idist.dump_stacks("checking")
    assert text.startswith("==== distbridge: Python stacks of rank 0 (pid ")
    assert "checking ====" in text and "test_dump_stacks_without_a_context" in text
    assert text in caplog.text
    with pytest.raises(TypeError, match="reason must be a str, got 3"):
        idist.dump_stacks(3)  # type: ignore[arg-type]


def test_stack_watcher_answers_another_ranks_request(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_stacks, "POLL_SECONDS", 0.05)
    store = HashStore()
    running = [True]
    watchers = [StackWatcher(store, rank, lambda: running[0]) for rank in (0, 1)]
    with caplog.at_level(logging.WARNING, logger="distbridge"):
        watchers[0].request("why not")
        deadline = time.monotonic() + 10
        while "Python stacks of rank 1" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # rank 0's own watcher must stay quiet
        running[0] = False
        for watcher in watchers:
            watcher._thread.join(5)
            assert not watcher._thread.is_alive()
    assert "Python stacks of rank 1" in caplog.text
    assert "rank 0 asked: why not" in caplog.text
    assert "Python stacks of rank 0" not in caplog.text


def test_store_barrier_raises_peer_failed_from_a_failure_note() -> None:
    store = HashStore()
    waiting = _ranks(store, 2)

    def fail_later() -> None:
        time.sleep(1.2)  # past the blocking wait: the waiting ranks poll
        store.set(_fail_together.failure_key(), "2\nValueError: bad batch")

    started = time.monotonic()
    outcome = _run(
        {
            0: lambda: waiting[0].wait((0, 1, 2), 30, "x"),
            1: lambda: waiting[1].wait((0, 1, 2), 30, "x"),
            2: fail_later,
        }
    )
    assert time.monotonic() - started < 10
    for rank in (0, 1):
        err = outcome[rank]
        assert isinstance(err, PeerFailed) and err.rank == 2, err
        assert "Rank 2 failed: ValueError: bad batch. Rank" in str(err)
        assert f"Rank {rank} stopped waiting in barrier 'x'" in str(err)


class _DiesWhileWaiting:
    """A store whose host ends while this rank waits in a barrier (Horovod's rank 0 hosts it)."""

    def set(self, key: str, value: bytes) -> None:
        pass

    def add(self, key: str, amount: int) -> int:
        return 1

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        raise RuntimeError("Socket Timeout")

    def check(self, keys: list[str]) -> bool:
        raise RuntimeError("Connection reset by peer")


def test_store_barrier_names_the_failed_host_its_watcher_heard_of() -> None:
    # The store's host failed, left its note (read by this rank's failure watcher) and ended:
    # the barrier said only that the store stopped answering, not the failed rank's error
    barrier = StoreBarrier(_DiesWhileWaiting(), _Model(1))  # type: ignore[arg-type]
    with pytest.raises(DistributedError, match="The coordination store stopped answering"):
        barrier.wait((0, 1), 10, "after")
    note = (0, "ValueError: bad batch")
    barrier = StoreBarrier(_DiesWhileWaiting(), _Model(1, note))  # type: ignore[arg-type]
    with pytest.raises(PeerFailed) as raised:
        barrier.wait((0, 1), 10, "after")
    assert raised.value.rank == 0 and raised.value.summary == "ValueError: bad batch"
    assert "Rank 1 stopped waiting in barrier 'after' because of it" in str(raised.value)
