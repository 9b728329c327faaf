"""The pieces of fail-together in one process: the failure watcher and cutting connections."""

from __future__ import annotations

import socket
import threading
from datetime import timedelta

import pytest
from torch._C._distributed_c10d import TCPStore

from distbridge.reliability.connections import Connections
from distbridge.reliability.fail_together import FailureWatch, record_failure

pytestmark = pytest.mark.timeout(60)


def _store() -> tuple[TCPStore, TCPStore]:
    server = TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=30))
    return server, TCPStore("127.0.0.1", server.port, None, False, timeout=timedelta(seconds=30))


def test_a_note_wakes_every_watcher_and_they_keep_it() -> None:
    _server, client = _store()  # the server lives as long as the test
    fired = threading.Semaphore(0)
    watches = [FailureWatch(client, rank, fired.release) for rank in range(3)]
    record_failure(client, 1, "ValueError: bad batch", world_size=3)
    for _ in watches:
        assert fired.acquire(timeout=10)
    assert [w.note for w in watches] == [(1, "ValueError: bad batch")] * 3


def test_stop_ends_the_watcher_without_a_failure() -> None:
    _server, client = _store()  # the server lives as long as the test
    fired: list[int] = []
    watch = FailureWatch(client, 0, lambda: fired.append(1))
    watch.stop()
    assert not watch._thread.is_alive()
    assert (watch.note, fired) == (None, [])
    assert not client.check(["distbridge/attempt0/wake/0"])  # the next watcher starts clean


def test_cutting_ends_the_connections_opened_in_the_block_only() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        kept = socket.create_connection(("127.0.0.1", port))
        kept_peer, _ = listener.accept()
        found = Connections()
        with found.opening(lambda: set()):
            ours = socket.create_connection(("127.0.0.1", port))
            ours_peer, _ = listener.accept()
        assert found.cut() == 2  # both ends live in this process
        assert ours_peer.recv(1) == b""  # the peer sees the connection closed
        kept.sendall(b"x")
        assert kept_peer.recv(1) == b"x"  # a connection from before the block is untouched
        for s in (kept, kept_peer, ours, ours_peer):
            s.close()
