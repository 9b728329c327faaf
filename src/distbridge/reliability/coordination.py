"""The coordination store: a key-value store every rank shares, beside the communicator.

Barriers with a timeout, debug-mode fingerprints and stack-dump requests travel through
it, so they keep working when a collective is wedged. Each model's
``_coordination_store`` builds it with the functions here:

- torch.distributed: the default process group's own store (no new connection);
- Horovod and several XLA replicas without a process group: rank 0 hosts a ``TCPStore``
  on a free port and sends its address once, with one broadcast, at first use.

Either way the store is seen through a ``distbridge`` prefix, so its keys never meet
torch's own (``distbridge/<key>``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
from torch._C._distributed_c10d import PrefixStore, TCPStore  # where torch defines them
from torch.distributed import distributed_c10d as c10d

__all__ = [
    "PREFIX",
    "broadcast_bytes",
    "default_store",
    "host_store",
    "job_store",
    "prefixed",
    "reachable_address",
]

PREFIX = "distbridge"
#: how long a rank waits to reach rank 0's store, and a store operation's default limit
STORE_TIMEOUT = timedelta(seconds=300)
_ADDRESS_BYTES = 512  # "host:port", padded with zero bytes


def prefixed(store: Any) -> Any:
    """``store`` seen through the ``distbridge/`` prefix: ``set("x")`` writes ``distbridge/x``."""
    return PrefixStore(PREFIX, store)


def reachable_address(nnodes: int, toward: str | None) -> str:
    """An address of this host that the other ranks can connect to: "127.0.0.1" when the
    job has one machine (``nnodes``), else this host's address on the route to ``toward`` (a
    host the other machines also reach, e.g. the launcher's rendezvous server), else its
    fully qualified name."""
    if nnodes <= 1:
        return "127.0.0.1"
    if toward:
        try:  # a UDP "connect" sends nothing; it only picks the route and the local address
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((toward, 9))
                return str(probe.getsockname()[0])
        except OSError:
            pass
    return socket.getfqdn()


Broadcast = Callable[[torch.Tensor], torch.Tensor]


def broadcast_bytes(broadcast: Broadcast, payload: bytes | None) -> bytes:
    """Send ``payload`` (at most 512 bytes, on rank 0; None elsewhere) to every rank with one
    ``broadcast``, which fills a uint8 CPU tensor with rank 0's bytes on every rank and
    returns it (a model's ``_do_broadcast`` from rank 0 over the world)."""
    buffer = torch.zeros(_ADDRESS_BYTES, dtype=torch.uint8)
    if payload is not None:
        if len(payload) >= _ADDRESS_BYTES or b"\0" in payload:
            raise ValueError(f"The store address {payload!r} is too long or holds a zero byte.")
        buffer[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    received = broadcast(buffer).cpu()
    return bytes(received.tolist()).rstrip(b"\0")


def host_store(
    rank: int,
    address: str,
    broadcast: Broadcast,
    timeout: timedelta = STORE_TIMEOUT,
) -> Any:
    """A store hosted by rank 0 on a free port, reached by every other rank; prefixed.

    Every rank must call it at the same point: rank 0 starts a ``TCPStore`` server (on every
    interface) and broadcasts ``"<address>:<port>"`` (``address``: rank 0's as the others
    reach it, see `reachable_address`); the others connect. ``timeout`` limits connecting,
    and a store operation without its own limit.
    """
    if rank == 0:
        server = TCPStore(address, 0, None, True, timeout=timeout, wait_for_workers=False)
        broadcast_bytes(broadcast, f"{address}:{server.port}".encode())
        return prefixed(server)
    text = broadcast_bytes(broadcast, None).decode()
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise RuntimeError(f"Rank 0 sent a malformed store address {text!r}.")
    return prefixed(TCPStore(host, int(port), None, False, timeout=timeout))


def default_store() -> Any | None:
    """The default process group's store; None without a default process group, or for one
    made without a store (as MPI's)."""
    try:
        return c10d._get_default_store()
    except Exception:  # no default process group
        return None


def job_store(rank: int, nnodes: int, store: Any | None, broadcast: Broadcast) -> Any:
    """``store`` (a process group's own) when there is one, else one rank 0 hosts; prefixed.

    Every rank must call it at the same point (without ``store`` it broadcasts once).
    """
    if store is not None:
        return prefixed(store)
    return host_store(rank, reachable_address(nnodes, None), broadcast)
