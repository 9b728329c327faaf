"""What a launcher tells a process about where it is in the job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LaunchEnvironment", "read_int"]


@dataclass(frozen=True)
class LaunchEnvironment:
    """A process's place in a job, as read from its launcher's environment variables.

    Fields that the launcher does not provide are None.
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

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(
                f"{self.launcher}: world size {self.world_size!r} must be at least 1; "
                "check the launcher's variables."
            )
        _check_index(self.launcher, "rank", self.rank, self.world_size)
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
