"""What a launcher tells a process about where it is in the job."""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "LOOPBACK",
    "LaunchEnvironment",
    "derived_port",
    "master_addr",
    "master_port",
    "read_int",
]

#: the address of rank 0 when every rank runs on this machine
LOOPBACK = "127.0.0.1"
_PORT_BASE, _PORT_SPAN = 20000, 10000  # derived ports: below Linux's ephemeral range (32768+)


@dataclass(frozen=True)
class LaunchEnvironment:
    """A process's place in a job, as read from its launcher's environment variables.

    Fields that the launcher does not provide are None. ``node_id`` names this process's
    node (the same on every rank of the node, different elsewhere) where the launcher gives
    a better name than the host name; ``initialize()`` groups ranks by it when it must ask
    the peers for the layout.
    """

    launcher: str
    rank: int
    world_size: int
    local_rank: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None
    nnodes: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    node_id: str | None = None

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(
                f"{self.launcher}: world size {self.world_size!r} must be at least 1; "
                "check the launcher's variables."
            )
        _check_index(self.launcher, "rank", self.rank, self.world_size)
        if self.local_world_size is not None and not 1 <= self.local_world_size <= self.world_size:
            raise ValueError(
                f"{self.launcher}: local world size {self.local_world_size!r} is outside "
                f"[1, {self.world_size}] (the world size); check the launcher's variables."
            )
        _check_index(self.launcher, "local rank", self.local_rank, self.local_world_size)
        _check_index(self.launcher, "node rank", self.node_rank, self.nnodes)


def _check_index(launcher: str, what: str, index: int | None, size: int | None) -> None:
    """ValueError unless ``0 <= index < size`` (skipped when either is unknown)."""
    if index is not None and size is not None and not 0 <= index < size:
        raise ValueError(
            f"{launcher}: {what} {index!r} is outside [0, {size}); check the launcher's variables."
        )


def read_int(env: Mapping[str, str], key: str) -> int | None:
    """Return ``env[key]`` as an int, None when absent; ValueError naming the key when malformed."""
    raw = env.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError as err:
        raise ValueError(
            f"Environment variable {key}={raw!r} is not an integer; fix or unset it."
        ) from err


def master_addr(env: Mapping[str, str], *, one_node: bool) -> str | None:
    """MASTER_ADDR when set; else the loopback address when every rank is on this machine
    (``one_node``); else None: rank 0's host is unknown."""
    return env.get("MASTER_ADDR") or (LOOPBACK if one_node else None)


def master_port(env: Mapping[str, str], job_key: str | None) -> int | None:
    """MASTER_PORT when set; else a port derived from ``job_key`` (see ``derived_port``); else
    None. ``job_key`` is a value the launcher gives every rank of one job alike."""
    port = read_int(env, "MASTER_PORT")
    if port is not None:
        return port
    return derived_port(job_key) if job_key else None


def derived_port(job_key: str) -> int:
    """A port in [20000, 30000) that every rank computes alike from ``job_key``, without
    talking: a stable hash (crc32, not Python's salted ``hash``). Two jobs on one machine get
    different ports unless their keys collide (1 in 10,000); set MASTER_PORT to choose."""
    return _PORT_BASE + zlib.crc32(job_key.encode("utf-8")) % _PORT_SPAN
