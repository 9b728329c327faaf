"""What fail-together costs when nothing fails, and how fast it acts when something does.

The ``try`` that translates a failed peer's error is the ledger's wrapper's own (one ``try`` for
both, ``models/base.py``'s ``collective``): ``bench_ledger.py`` times that wrapper.

1. The failure watcher in a real gloo world of two (``spawn``): all_reduce latency with the
   watcher running and after it was stopped, alternating blocks.
2. The watchers against one TCPStore, at 4 and 64 simulated ranks: a store round trip
   (``add``) from another client while the watchers wait, versus none waiting; the store
   requests they send while nothing fails (data segments counted by ``ss`` over 5 s); how
   long a failure note takes to wake all of them; what finding a communicator's connections costs
   at initialize (``Connections.opening``).

Usage (from the repository root)::

    python bench/bench_fail_together.py [--loops N] [--repeats R] [--skip-world]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import threading
import time
import timeit
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore

import distbridge as idist
from distbridge import _state
from distbridge.models.native import NativeModel
from distbridge.reliability.connections import Connections, socket_inodes, tcp_connections
from distbridge.reliability.fail_together import FailureWatch, record_failure

IDLE_SECONDS = 5.0  # how long the watchers' requests are counted while nothing fails


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000, help="calls per timed block")
    parser.add_argument("--repeats", type=int, default=15, help="timed blocks per variant")
    parser.add_argument("--skip-world", action="store_true", help="skip the world of two")
    options = parser.parse_args()
    for ranks in (4, 64):
        watchers_on_one_store(ranks, options.repeats)
    connections_cost(options.repeats)
    if not options.skip_world:
        times = idist.spawn("gloo", _world_latency, args=(options.repeats,), nproc_per_node=2)
        for name, samples in times[0].items():
            print(f"world of 2, all_reduce {name:16s} median {statistics.median(samples):7.1f} µs"
                  f"  min {min(samples):7.1f} µs")  # fmt: skip


def _world_latency(local_rank: int, repeats: int) -> dict[str, list[float]]:
    """all_reduce latency (µs) with the watcher running and stopped, in alternating blocks."""
    model = _state.current()
    assert isinstance(model, NativeModel)
    tensor, loops = torch.ones(4), 500
    times: dict[str, list[float]] = {"watcher running": [], "watcher stopped": []}

    def block() -> float:
        idist.barrier()
        start = time.perf_counter()
        for _ in range(loops):
            idist.all_reduce(tensor)
        return (time.perf_counter() - start) / loops * 1e6

    store = dist.distributed_c10d._get_default_store()
    together = model.together  # the watcher is its FailingTogether's
    assert together is not None, "the native model fails together"
    watch = together._watch
    assert watch is not None, "no watcher to stop"
    for _ in range(repeats):
        times["watcher running"].append(block())
        watch.stop()
        together._watch = None
        times["watcher stopped"].append(block())
        watch = together._watch = FailureWatch(store, idist.get_rank(), model.abort_communicator)
    return times


def watchers_on_one_store(ranks: int, repeats: int) -> None:
    """Store round trips with ``ranks`` watchers waiting on the same server, and wake-up time."""
    server = TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=60))
    client = TCPStore("127.0.0.1", server.port, None, False, timeout=timedelta(seconds=60))
    loops = 2_000

    def round_trip() -> float:
        return timeit.timeit(lambda: client.add("x", 1), number=loops) / loops * 1e6

    woken = threading.Semaphore(0)
    idle, busy = [], []
    for _ in range(repeats):
        idle.append(round_trip())
        watches = [FailureWatch(client, rank, woken.release) for rank in range(ranks)]
        busy.append(round_trip())
        for watch in watches:
            watch.stop()
    watches = [FailureWatch(client, rank, woken.release) for rank in range(ranks)]
    time.sleep(0.5)  # every watcher has sent its wait
    before = _data_segments_to(server.port)
    time.sleep(IDLE_SECONDS)
    sent = _data_segments_to(server.port) - before
    rate = sent / IDLE_SECONDS / ranks
    start = time.perf_counter()
    record_failure(client, 0, "ValueError: bench", ranks)
    for _ in watches:
        woken.acquire(timeout=30)
    wake = (time.perf_counter() - start) * 1e3
    print(f"{ranks:3d} watchers: store add median {statistics.median(busy):6.1f} µs "
          f"(none waiting: {statistics.median(idle):6.1f} µs); a note woke all in {wake:.1f} ms; "
          f"idle {IDLE_SECONDS:g} s: {sent} data segments sent to the store, "
          f"{rate:.2f} requests per second per rank")  # fmt: skip


def _data_segments_to(port: int) -> int:
    """Data segments this machine's connections to ``port`` have sent (``ss -ti``, Linux):
    an upper bound of the store requests sent over them."""
    out = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( dport = :{port} )"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return sum(int(n) for n in re.findall(r"\bdata_segs_out:(\d+)", out))


def connections_cost(repeats: int) -> None:
    """What ``Connections.opening`` adds to creating a communicator (two /proc scans)."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        before = socket_inodes()
        found = Connections()
        with found.opening(set):
            socket_inodes(), tcp_connections()  # what the end of a block that opened some does
        samples.append((time.perf_counter() - start) * 1e3)
    print(f"Connections.opening (2 fd scans + TCP tables, {len(before)} sockets open): "
          f"median {statistics.median(samples):.2f} ms per communicator created")  # fmt: skip


if __name__ == "__main__":
    main()
