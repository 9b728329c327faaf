"""Creating the default torch.distributed process group from what the launcher said."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from torch._C._distributed_c10d import HashStore, PrefixStore, TCPStore  # where torch defines them

from distbridge import environments
from distbridge.environments import LaunchEnvironment
from distbridge.errors import DistributedError

__all__ = ["as_timeout", "init_process_group"]

_AGENT_STORE_VAR = "TORCHELASTIC_USE_AGENT_STORE"


def init_process_group(
    backend: str,
    *,
    timeout: timedelta | None,
    init_method: str | None,
    rank: int | None,
    world_size: int | None,
) -> None:
    """Call ``torch.distributed.init_process_group`` the way this process was launched.

    - explicit ``init_method`` / ``rank`` / ``world_size``: passed through;
    - a launcher's environment (torchrun, ``distbridge.spawn``): ``env://``, or a client of the
      launcher's store when it hosts one (``TORCHELASTIC_USE_AGENT_STORE=True``);
    - no launcher at all: a world of one on an in-memory store (no port is opened).
    """
    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    launch = environments.detect()
    if init_method is not None or rank is not None or world_size is not None:
        dist.init_process_group(
            backend,
            init_method=init_method or "env://",
            rank=-1 if rank is None else rank,
            world_size=-1 if world_size is None else world_size,
            **extra,
        )
    elif launch is None:
        dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1, **extra)
    elif os.environ.get(_AGENT_STORE_VAR) == "True":
        store = _agent_store_client(launch, timeout)
        dist.init_process_group(
            backend, store=store, rank=launch.rank, world_size=launch.world_size, **extra
        )
    else:
        dist.init_process_group(backend, init_method="env://", **extra)


def _agent_store_client(launch: LaunchEnvironment, timeout: timedelta | None) -> Any:
    """A client of the store the launcher hosts, under a prefix unique to this initialization.

    Every rank counts its arrival; since ``init_process_group`` waits for all ranks, arrivals
    ``k*world+1 .. (k+1)*world`` belong to initialization ``k``, so ranks agree on the prefix
    without talking, and a finalize() / initialize() cycle never sees stale keys.
    """
    if launch.master_addr is None or launch.master_port is None:
        raise DistributedError(
            f"{_AGENT_STORE_VAR}=True but MASTER_ADDR / MASTER_PORT are not set: the launcher's "
            "store cannot be found. Set both, or unset the variable."
        )
    from torch.distributed.constants import default_pg_timeout

    store = TCPStore(
        launch.master_addr,
        launch.master_port,
        launch.world_size,
        is_master=False,
        timeout=timeout or default_pg_timeout,
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    arrivals = store.add(f"distbridge/attempt{attempt}/arrivals", 1)
    epoch = (arrivals - 1) // launch.world_size
    return PrefixStore(f"distbridge/attempt{attempt}/init{epoch}/", store)


def as_timeout(timeout: object) -> timedelta | None:
    """``timeout`` (a timedelta, seconds, or None) as a timedelta; errors name the value."""
    if timeout is None or isinstance(timeout, timedelta):
        if isinstance(timeout, timedelta) and timeout.total_seconds() <= 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}.")
        return timeout
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        if timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}.")
        return timedelta(seconds=timeout)
    raise TypeError(f"timeout must be a datetime.timedelta or seconds, got {timeout!r}.")
