"""Creating the default torch.distributed process group from what the launcher said."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore, PrefixStore, TCPStore  # where torch defines them
from torch.distributed import distributed_c10d as _c10d
from torch.distributed.constants import default_pg_timeout

from distbridge import environments
from distbridge.environments import LaunchEnvironment
from distbridge.errors import DistributedError
from distbridge.models._accelerator import backend_device_types, takes_cpu_tensors
from distbridge.models._layout import (
    Layout,
    export_layout,
    layout_from_env,
    layout_from_store,
    node_name,
    restore_env,
)
from distbridge.models.native.backends import check_nccl_gpus

__all__ = [
    "AGENT_STORE_VAR",
    "as_timeout",
    "bound_device",
    "init_process_group",
    "join_job",
    "rendezvous",
    "rendezvous_address",
]

#: set to "True" by a launcher that hosts the job's store itself (torchrun's agent, spawn)
AGENT_STORE_VAR = "TORCHELASTIC_USE_AGENT_STORE"
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
    launch: LaunchEnvironment | None,
    *,
    timeout: timedelta | None,
    init_method: str | None,
    rank: int | None,
    world_size: int | None,
    device_id: torch.device | None = None,
) -> None:
    """Call ``torch.distributed.init_process_group`` the way this process was launched
    (``launch``; None: by no launcher), with ``device_id``, when given, so that NCCL binds
    this rank's GPU at start-up.

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
    if device_id is not None:
        extra["device_id"] = device_id
    explicit = init_method is not None or rank is not None or world_size is not None
    how = "explicit" if explicit else rendezvous(launch, backend, os.environ)
    if how in ("explicit", "env"):
        # rank and world size not given: the launcher's (RANK / WORLD_SIZE), as ignite reads them
        if launch is not None:
            rank = launch.rank if rank is None else rank
            world_size = launch.world_size if world_size is None else world_size
        _meet_peers(backend, extra, init_method or "env://", rank, world_size)
        return
    if how == "in-memory":
        dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1, **extra)
        return
    assert launch is not None
    if how == "mpi":
        dist.init_process_group(backend, **extra)  # the MPI runtime knows rank and world
        return
    agent = how == "launcher-store"
    store = _agent_store_client(launch, timeout) if agent else _launcher_store(launch, timeout)
    try:
        dist.init_process_group(
            backend, store=store, rank=launch.rank, world_size=launch.world_size, **extra
        )
    except RuntimeError as err:  # DistStoreError: a peer never arrived
        if not agent:  # rank 0's store: torch's error as it is
            raise
        raise DistributedError(
            f"Rank {launch.rank}: not all {launch.world_size} ranks of the job joined "
            f"within the timeout (store at {launch.master_addr}:{launch.master_port}, "
            f"{launch.nnodes or 1} node(s)): a node never started its workers or failed at "
            f"start-up. Start every node with the same nnodes, master_addr and master_port. "
            f"({err})"
        ) from err


def rendezvous(launch: LaunchEnvironment | None, backend: str, env: Mapping[str, str]) -> str:
    """How `init_process_group` meets the peers when given no init_method, rank or world
    size: ``"in-memory"`` (a world of one, or no launcher: no port is opened), ``"mpi"`` (the
    MPI runtime knows the ranks), ``"rank0-store"`` (a launcher other than torchrun: rank 0
    hosts a TCPStore at its address), ``"launcher-store"`` (torchrun's agent hosts the
    store) or ``"env"`` (``env://``, at ignite's default address where none is set)."""
    if launch is None or (launch.world_size == 1 and launch.launcher != _TORCHELASTIC):
        return "in-memory"
    if launch.launcher != _TORCHELASTIC:
        return "mpi" if backend == "mpi" else "rank0-store"
    if env.get(AGENT_STORE_VAR) == "True":
        return "launcher-store"
    if launch.world_size == 1 and (launch.master_addr is None or launch.master_port is None):
        return "in-memory"  # RANK / WORLD_SIZE=1 set by hand: nobody to meet
    return "env"


#: What ignite fills in when RANK / WORLD_SIZE are set by hand without an address: every
#: process of the job computes the same, so they meet there.
DEFAULT_MASTER = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "15000"}


def _meet_peers(
    backend: str, extra: dict[str, Any], init_method: str, rank: int | None, world_size: int | None
) -> None:
    """``init_process_group`` at ``init_method`` (rank and world size None: read by torch;
    env://: at ignite's default address where MASTER_ADDR / MASTER_PORT are unset).
    DistributedError naming the address when the peers were not met there in time, or the
    address refused."""
    env = init_method.startswith("env://")
    filled: list[str] = []  # the names of DEFAULT_MASTER set here
    if env:  # ignite's default address where MASTER_ADDR / MASTER_PORT are unset
        for key, value in DEFAULT_MASTER.items():
            if not os.environ.get(key):
                os.environ[key] = value
                filled.append(key)
    try:
        dist.init_process_group(
            backend,
            init_method=init_method,
            rank=-1 if rank is None else rank,
            world_size=-1 if world_size is None else world_size,
            **extra,
        )
    except RuntimeError as err:  # DistNetworkError / DistStoreError: a timeout, a refusal
        where = init_method
        if env:
            where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        if filled:
            where += f" ({', '.join(filled)} unset: ignite's default)"
        raise DistributedError(
            f"Rank {rank} of {world_size} could not meet its peers at {where} "
            f"(init_method={init_method!r}) within the timeout: {str(err).rstrip('.')}. Start "
            "every rank, rank 0 too, with the same init_method (for env://: MASTER_ADDR and "
            "MASTER_PORT) and world_size, and check that the address is reachable."
        ) from err


def bound_device(backend: str, local_rank: int | None) -> torch.device | None:
    """The ``device_id`` for ``init_process_group``: ``<accelerator>:<local rank>`` when
    ``backend`` communicates accelerator tensors only (NCCL: ``cuda``, XCCL: ``xpu``) and the
    local rank is known before the rendezvous, so that the communicator binds its device at
    start-up and its errors surface in ``initialize``; None otherwise (torch binds lazily)."""
    if local_rank is None or takes_cpu_tensors(backend):
        return None
    return torch.device(backend_device_types(backend)[0], local_rank)


def _set_current(device: torch.device | None) -> None:
    """Make ``device`` this process's current accelerator device (None: leave it as it is)."""
    if device is not None and device.type == "cuda":
        torch.cuda.set_device(device)
    elif device is not None and hasattr(torch, "accelerator"):
        torch.accelerator.set_device_index(device.index)


def rendezvous_address(launch: LaunchEnvironment) -> tuple[str, int]:
    """Rank 0's address and port from ``launch``.

    Raises:
        DistributedError: either is unknown; the message says how to export them for this
            launcher.
    """
    if launch.master_addr is not None and launch.master_port is not None:
        return launch.master_addr, launch.master_port
    given = {"MASTER_ADDR": launch.master_addr, "MASTER_PORT": launch.master_port}
    missing = " and ".join(name for name, value in given.items() if value is None)
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
    wait = timeout or default_pg_timeout
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
    return TCPStore(addr, port, is_master=True, wait_for_workers=False, timeout=default_pg_timeout)


#: The longest a worker waits to reach the store of a job started by another machine (node 0
#: of a multi-node ``spawn``, torchrun's agent); ``timeout=`` makes it shorter.
RENDEZVOUS_TIMEOUT = timedelta(minutes=10)


def _agent_store_client(launch: LaunchEnvironment, timeout: timedelta | None) -> Any:
    """A client of the store the launcher hosts (torchrun's agent)."""
    if launch.master_addr is None or launch.master_port is None:
        raise DistributedError(
            f"{AGENT_STORE_VAR}=True but MASTER_ADDR / MASTER_PORT are not set: the launcher's "
            "store cannot be found. Set both, or unset the variable."
        )
    wait = timeout or default_pg_timeout
    connect = min(wait, RENDEZVOUS_TIMEOUT)
    try:
        store = TCPStore(
            launch.master_addr,
            launch.master_port,
            launch.world_size,
            is_master=False,
            timeout=connect,
        )
    except RuntimeError as err:  # DistNetworkError: nobody listens there
        where = f"{launch.master_addr}:{launch.master_port}"
        node = "" if launch.node_rank is None else f" on node {launch.node_rank}"
        raise DistributedError(
            f"Rank {launch.rank}{node} could not reach the job's store at {where} (MASTER_ADDR /"
            f" MASTER_PORT) within {connect.total_seconds():g} s: node 0 never started its "
            f"workers or failed at start-up. Start node 0 with the same master_addr and "
            f"master_port, or check that {where} is reachable from here. ({err})"
        ) from err
    store.set_timeout(wait)
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
        if not 0 < timeout < math.inf:  # NaN too
            raise ValueError(
                f"timeout must be a positive, finite number of seconds, got {timeout!r}."
            )
        return timedelta(seconds=timeout)
    raise TypeError(f"timeout must be a datetime.timedelta or seconds, got {timeout!r}.")


def join_job(
    backend: str,
    *,
    timeout: timedelta | None,
    init_method: str | None,
    rank: int | None,
    world_size: int | None,
) -> tuple[Layout, dict[str, str | None]]:
    """Create the default process group the way this process was launched; with NCCL (XCCL),
    make ``cuda:<local rank>`` (``xpu:...``) the current device, bound at start-up where the
    local rank is known before. Returns this process's place in the job, and the variables
    set for it (``DEFAULT_MASTER``'s, ``export_layout``'s) with their values before (None:
    unset), which ``finalize`` restores; a failure restores them at once, and destroys the
    process group if it was made.

    Raises:
        DistributedError: as ``init_process_group``, or NCCL without a GPU for this process
            (said before the rendezvous where the launcher tells the local layout).
    """
    launch = environments.detect()
    explicit = init_method is not None or rank is not None or world_size is not None
    if backend == "nccl" and launch is not None and not explicit:
        check_nccl_gpus(launch.local_world_size, launch.local_rank)  # before the peers wait
    # the local rank before the rendezvous: the launcher's, 0 without one (a world of one);
    # None when only the peers can tell (explicit init arguments, a launcher that does not say)
    local_rank = None if explicit else 0 if launch is None else launch.local_rank
    device = bound_device(backend, local_rank)
    _set_current(device)
    before = {key: os.environ.get(key) for key in DEFAULT_MASTER}
    try:
        init_process_group(
            backend,
            launch,
            timeout=timeout,
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            device_id=device,
        )
        me, world = dist.get_rank(), dist.get_world_size()
        store = _c10d._get_default_store  # asked only where the launcher does not say
        layout = layout_from_env(
            launch, me, world, lambda: layout_from_store(store(), me, world, node_name(launch))
        )
        if backend == "nccl":
            check_nccl_gpus(layout.nproc_per_node, layout.local_rank)
        _set_current(bound_device(backend, layout.local_rank))  # NCCL, XCCL: this rank's device
    except BaseException:
        if dist.is_initialized():  # the group made before the failure goes too
            dist.destroy_process_group()
        restore_env(before)
        raise
    filled = {key: old for key, old in before.items() if os.environ.get(key) != old}
    return layout, {**filled, **export_layout(layout)}
