"""The TCP connections of this process's gloo communicators, and cutting them on a failure.

Gloo has no abort (``ProcessGroup.abort()`` and ``shutdown()`` do nothing for it), and
``destroy_process_group`` closes nothing while DDP or a traceback holds the group, so a
failing rank whose process lingers kept its peers blocked. ``shutdown(SHUT_RDWR)`` on each
of its connections ends their collectives at once ("Connection closed by peer", which
fail-together turns into `PeerFailed`). The connections are those that appeared while the
communicator was created (`Connections.opening`), connected (not the listener: gloo aborts
when it fails) and not to or from the store's port; found through ``/proc`` (Linux only).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

__all__ = ["Connections", "socket_inodes", "tcp_connections"]

_FD_DIR = Path("/proc/self/fd")
_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_ESTABLISHED = "01"  # the state column of /proc/net/tcp


def socket_inodes() -> dict[int, int]:
    """This process's sockets: inode -> file descriptor ({} where /proc is missing)."""
    found: dict[int, int] = {}
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return found
    for name in names:
        try:
            link = os.readlink(_FD_DIR / name)
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            found[int(link[8:-1])] = int(name)
    return found


def tcp_connections() -> dict[int, tuple[int, int]]:
    """Established TCP connections of this network namespace: inode -> (local, remote) port."""
    found: dict[int, tuple[int, int]] = {}
    for table in _TCP_TABLES:
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _ESTABLISHED:
                local = int(fields[1].rpartition(":")[2], 16)
                remote = int(fields[2].rpartition(":")[2], 16)
                found[int(fields[9])] = (local, remote)
    return found


class Connections:
    """The connections of this process's communicators, found while they are created."""

    def __init__(self) -> None:
        self._inodes: set[int] = set()

    @contextlib.contextmanager
    def opening(
        self, store_ports: Callable[[], Collection[int]], enabled: bool = True
    ) -> Iterator[None]:
        """Add the connections that the block opens, except those of ``store_ports()``
        (called after the block, when the store exists); nothing when not ``enabled``."""
        if not enabled:
            yield
            return
        before = set(socket_inodes())
        yield
        new = set(socket_inodes()) - before
        if not new:
            return
        ports = set(store_ports())
        for inode, (local, remote) in tcp_connections().items():
            if inode in new and local not in ports and remote not in ports:
                self._inodes.add(inode)

    def cut(self) -> int:
        """Shut down every connection found (both directions); returns how many were open.

        Never raises: it runs while this rank is failing.
        """
        if not self._inodes:
            return 0
        cut = 0
        for inode, fd in socket_inodes().items():
            if inode not in self._inodes:
                continue
            try:  # a duplicate of the descriptor: shutting it down ends the shared socket
                with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as dup:
                    dup.shutdown(socket.SHUT_RDWR)
                cut += 1
            except OSError:  # closed meanwhile, or not connected any more
                continue
        self._inodes.clear()
        return cut
