"""Creating the default torch.distributed process group from what the launcher said."""

from __future__ import annotations

import functools
import os
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from torch._C._distributed_c10d import HashStore, PrefixStore, TCPStore  # where torch defines them

from distbridge import environments
from distbridge.environments import LaunchEnvironment
from distbridge.errors import DistributedError

__all__ = ["as_timeout", "init_process_group", "rendezvous_address"]

_AGENT_STORE_VAR = "TORCHELASTIC_USE_AGENT_STORE"
_TORCHELASTIC = "torchelastic"
_EXPORT_HINTS = {  # how to give every process MASTER_ADDR / MASTER_PORT, per launcher
    "openmpi": "mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port> ...",
    "mpich": "mpiexec -genv MASTER_ADDR <host> -genv MASTER_PORT <port> ...",
    "horovodrun": "MASTER_ADDR=<host> MASTER_PORT=<port> horovodrun ...",
    "lsf": "export MASTER_ADDR=<host> MASTER_PORT=<port> in the job script before jsrun",
    "": "export MASTER_ADDR=<host> MASTER_PORT=<port> before the launcher starts the processes",
}


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
    - torchrun or ``distbridge.spawn`` (torchelastic variables): ``env://``, or a client of
      the launcher's store when it hosts one (``TORCHELASTIC_USE_AGENT_STORE=True``);
    - any other launcher (mpirun, srun, jsrun, horovodrun, ...): rank 0 hosts a TCPStore at the
      environment's rank 0 address and port, the other ranks connect to it (the ``mpi``
      backend needs no store: the MPI runtime knows the ranks);
    - a world of one, or no launcher at all: an in-memory store (no port is opened).

    Raises:
        DistributedError: rank 0's address or port is unknown (the message says what to
            export for this launcher), the port is taken, or rank 0's store cannot be reached.
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
    elif launch is None or (launch.world_size == 1 and launch.launcher != _TORCHELASTIC):
        dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1, **extra)
    elif launch.launcher != _TORCHELASTIC and backend == "mpi":
        dist.init_process_group(backend, **extra)  # the MPI runtime knows rank and world
    elif launch.launcher != _TORCHELASTIC:
        store = _launcher_store(launch, timeout)
        dist.init_process_group(
            backend, store=store, rank=launch.rank, world_size=launch.world_size, **extra
        )
    elif os.environ.get(_AGENT_STORE_VAR) == "True":
        store = _agent_store_client(launch, timeout)
        dist.init_process_group(
            backend, store=store, rank=launch.rank, world_size=launch.world_size, **extra
        )
    else:
        dist.init_process_group(backend, init_method="env://", **extra)


def rendezvous_address(launch: LaunchEnvironment) -> tuple[str, int]:
    """Rank 0's address and port from ``launch``.

    Raises:
        DistributedError: either is unknown; the message says how to export them for this
            launcher.
    """
    if launch.master_addr is not None and launch.master_port is not None:
        return launch.master_addr, launch.master_port
    missing = " and ".join(
        name
        for name, value in (
            ("MASTER_ADDR", launch.master_addr),
            ("MASTER_PORT", launch.master_port),
        )
        if value is None
    )
    how = _EXPORT_HINTS.get(launch.launcher, _EXPORT_HINTS[""])
    raise DistributedError(
        f"Launched by {launch.launcher} (rank {launch.rank} of {launch.world_size}), but "
        f"{missing} cannot be derived from its environment: rank 0 hosts the rendezvous store "
        f"there. Export MASTER_ADDR (rank 0's host) and MASTER_PORT (a free port) to every "
        f"process, e.g. {how}"
    )


def _launcher_store(launch: LaunchEnvironment, timeout: timedelta | None) -> Any:
    """Rank 0 hosts a TCPStore at the launcher's rank 0 address; the others connect to it."""
    addr, port = rendezvous_address(launch)
    wait = timeout or _default_timeout()
    try:
        if launch.rank == 0:
            store = _hosted_store(addr, port)
            store.set_timeout(wait)
        else:
            store = TCPStore(addr, port, launch.world_size, is_master=False, timeout=wait)
    except RuntimeError as err:  # DistNetworkError / DistStoreError
        where = "host" if launch.rank == 0 else "reach"
        raise DistributedError(
            f"Rank {launch.rank} could not {where} the rendezvous store at {addr}:{port} "
            f"({launch.launcher}): {err}. Export MASTER_PORT with a free port (and MASTER_ADDR "
            "with rank 0's host) to every process."
        ) from err
    return _per_initialization(store, launch.world_size, "launch")


@functools.cache
def _hosted_store(addr: str, port: int) -> Any:
    """The store rank 0 hosts on ``port``, created once per process and kept.

    Like torchrun's agent store, it outlives ``finalize()``: a peer that finalizes and
    initializes again before rank 0 has finalized would otherwise reach the old store just
    before it closes. Each initialization uses keys of its own (``_per_initialization``).
    """
    return TCPStore(addr, port, is_master=True, wait_for_workers=False, timeout=_default_timeout())


def _default_timeout() -> timedelta:
    from torch.distributed.constants import default_pg_timeout

    return default_pg_timeout


def _agent_store_client(launch: LaunchEnvironment, timeout: timedelta | None) -> Any:
    """A client of the store the launcher hosts (torchrun's agent)."""
    if launch.master_addr is None or launch.master_port is None:
        raise DistributedError(
            f"{_AGENT_STORE_VAR}=True but MASTER_ADDR / MASTER_PORT are not set: the launcher's "
            "store cannot be found. Set both, or unset the variable."
        )
    store = TCPStore(
        launch.master_addr,
        launch.master_port,
        launch.world_size,
        is_master=False,
        timeout=timeout or _default_timeout(),
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return _per_initialization(store, launch.world_size, f"attempt{attempt}")


def _per_initialization(store: Any, world_size: int, scope: str) -> Any:
    """``store`` under a prefix unique to this initialization.

    Every rank counts its arrival; since ``init_process_group`` waits for all ranks, arrivals
    ``k*world+1 .. (k+1)*world`` belong to initialization ``k``, so ranks agree on the prefix
    without talking, and a finalize() / initialize() cycle never sees stale keys.
    """
    arrivals = store.add(f"distbridge/{scope}/arrivals", 1)
    epoch = (arrivals - 1) // world_size
    return PrefixStore(f"distbridge/{scope}/init{epoch}/", store)


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
