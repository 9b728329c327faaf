"""A free TCP port for a test's rendezvous, chosen where no other process will take it.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range (32768-60999 on
Linux), the same range every outgoing connection draws from: between the test choosing it
and rank 0 listening on it, an mpirun daemon or a store client may connect from it, and
rank 0 fails with EADDRINUSE. Ports below that range are only ever taken by listeners.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

_LOW, _HIGH = 20_000, 32_000  # below Linux's default ephemeral range


def free_port() -> int:
    """A port in [20000, 32000) that nothing listens on now (any address, IPv4)."""
    pick = random.SystemRandom()
    for _ in range(200):
        port = pick.randrange(_LOW, _HIGH)
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"No free TCP port in [{_LOW}, {_HIGH}) after 200 tries.")
