"""The coordination store's building blocks, with in-process stores and a fake broadcast."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch
from torch._C._distributed_c10d import HashStore

from distbridge.models.serial import SerialModel
from distbridge.reliability import coordination


def test_prefixed_store_keeps_keys_apart() -> None:
    raw = HashStore()
    store = coordination.prefixed(raw)
    store.set("barrier/x", b"1")
    assert raw.get("distbridge/barrier/x") == b"1"
    assert not raw.check(["barrier/x"])
    assert store.add("n", 2) == 2
    assert store.compare_set("k", "", "v") == b"v"
    store.wait(["barrier/x"], timedelta(seconds=1))


def test_broadcast_bytes_round_trip() -> None:
    sent: list[torch.Tensor] = []

    def broadcast(t: torch.Tensor) -> torch.Tensor:
        sent.append(t.clone())
        return t

    assert coordination.broadcast_bytes(broadcast, b"10.0.0.1:1234") == b"10.0.0.1:1234"
    assert sent[0].dtype == torch.uint8 and sent[0].numel() == 512
    with pytest.raises(ValueError, match="too long"):
        coordination.broadcast_bytes(broadcast, b"x" * 600)


def test_reachable_address() -> None:
    assert coordination.reachable_address(1, "192.0.2.1") == "127.0.0.1"
    assert coordination.reachable_address(2, "127.0.0.1") == "127.0.0.1"
    assert coordination.reachable_address(2, None)  # this host's name


def test_host_store_reaches_rank_zero() -> None:
    """Two "ranks" in threads: rank 0 hosts a TCPStore, the fake broadcast carries its address."""
    payload: list[torch.Tensor] = []
    ready = threading.Event()

    def broadcast(t: torch.Tensor) -> torch.Tensor:
        if not payload:  # rank 0 calls first (rank 1 waits for it)
            payload.append(t.clone())
            ready.set()
            return t
        return payload[0].clone()

    stores: dict[int, object] = {}

    def rank(r: int) -> None:
        if r == 1:
            assert ready.wait(30)
        stores[r] = coordination.host_store(r, "127.0.0.1", broadcast, timedelta(seconds=30))

    zero = threading.Thread(target=rank, args=(0,))
    zero.start()
    zero.join(30)
    rank(1)
    s0, s1 = stores[0], stores[1]
    s1.set("hello", b"world")  # type: ignore[attr-defined]
    assert s0.get("hello") == b"world"  # type: ignore[attr-defined]


def test_serial_model_has_no_store() -> None:
    assert SerialModel()._coordination_store() is None


def test_job_store_uses_the_process_groups_store_or_hosts_one() -> None:
    own = HashStore()
    coordination.job_store(0, 1, own, lambda t: t).set("k", b"v")
    assert own.get("distbridge/k") == b"v"
    sent: list[bytes] = []

    def broadcast(t: torch.Tensor) -> torch.Tensor:
        sent.append(bytes(t.tolist()).rstrip(b"\0"))
        return t

    hosted = coordination.job_store(0, 1, None, broadcast)  # rank 0 of a group without a store
    hosted.set("k", b"v")
    assert hosted.get("k") == b"v"
    assert sent and sent[0].startswith(b"127.0.0.1:")
