"""The facade: ``import distbridge as idist``. Each function delegates to the active model.

Every function works without a distributed context (the serial model answers as
a world of one would) and validates its arguments the same way on every model.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any

import torch

from distbridge._registry import registry
from distbridge._state import activated, current, install, resync, set_local_rank_hint
from distbridge._types import SpawnResult
from distbridge.errors import DistributedError
from distbridge.reliability.debug import debug_env
from distbridge.reliability.hang.signals import unwatch_signals, watch_signals

__all__ = [
    "available_backends",
    "backend",
    "device",
    "finalize",
    "get_local_rank",
    "get_nnodes",
    "get_node_rank",
    "get_nproc_per_node",
    "get_rank",
    "get_world_size",
    "hostname",
    "initialize",
    "model_name",
    "registry",
    "set_local_rank",
    "show_config",
    "spawn",
    "sync",
]

# ---- where am I -------------------------------------------------------------------------------


def backend() -> str | None:
    """The active backend: "nccl", "gloo", "mpi", "xla-tpu", "horovod", or None (serial)."""
    return current().backend()


def model_name() -> str:
    """The active computation model: "serial", "native-dist", "xla-dist" or "horovod-dist"."""
    return current().name


def device() -> torch.device:
    """The device this process computes on: ``cuda:<local rank>`` with NCCL (and with any
    native backend on a CUDA machine), the XLA device under XLA, else ``cpu``."""
    return current().device()


def get_rank() -> int:
    """This process's rank in the job; 0 without a distributed context."""
    return current().get_rank()


def get_world_size() -> int:
    """The number of processes in the job; 1 without a distributed context."""
    return current().get_world_size()


def get_local_rank() -> int:
    """This process's index on its machine; 0 without a distributed context."""
    return current().get_local_rank()


def get_nproc_per_node() -> int:
    """Processes per machine; 1 without a distributed context."""
    return current().get_nproc_per_node()


def get_nnodes() -> int:
    """Machines in the job; 1 without a distributed context."""
    return current().get_nnodes()


def get_node_rank() -> int:
    """This machine's index in the job; 0 without a distributed context."""
    return current().get_node_rank()


def hostname() -> str:
    """This machine's host name."""
    return socket.gethostname()


def available_backends() -> tuple[str, ...]:
    """The backends that can run on this machine, e.g. ``("gloo",)`` on a CPU-only machine."""
    return registry.available_backends()


# ---- lifecycle --------------------------------------------------------------------------------


def initialize(backend: str, **kwargs: Any) -> None:
    """Create the distributed context for ``backend`` in this process.

    Under a launcher (torchrun, ``spawn``'s workers) the rank and world come from its
    environment; with no launcher and no arguments, a world of one is created (no port is
    opened). Undo it with `finalize()`.

    Args:
        backend: "gloo", "nccl", "mpi", "xla-tpu", "horovod", ...
        kwargs: for the native backends ``timeout`` (timedelta or seconds), ``init_method``,
            ``rank``, ``world_size``. Every backend takes ``debug=True``: the debug mode,
            which compares each collective across ranks first (see "Debug mode" in
            docs/reliability.md). Unknown names raise TypeError.

    Raises:
        BackendUnavailableError: ``backend`` is unknown or cannot run here (says why).
        DistributedError: a context is already initialized.
    """
    active = current()
    if active.backend() is not None:
        raise DistributedError(
            f"distbridge is already initialized with backend {active.backend()!r}; "
            "call distbridge.finalize() first."
        )
    model = registry.for_backend(backend).from_backend(backend, **kwargs)
    install(model)
    watch_signals(model)  # the hang verdict on SIGTERM (and SIGUSR2, opted in)


def finalize() -> None:
    """Tear down the active context (e.g. destroy the process group) and restore the
    environment variables ``initialize`` set. Without a context, does nothing."""
    unwatch_signals()
    current().finalize()
    resync()


def sync(temporary: bool = False) -> None:
    """Find the live context again (after creating or destroying one by hand).

    distbridge re-checks the context on every call already, so this is rarely needed;
    ``temporary`` is accepted for ignite compatibility and has no effect. Without a context,
    it also reads the launcher's environment again (the rank queries answer with it before
    ``initialize()``): call it after changing RANK, OMPI_COMM_WORLD_RANK, ... yourself.
    """
    resync()


def set_local_rank(index: int) -> None:
    """Tell distbridge this process's local rank when the launcher's environment does not
    (a process group created by hand without LOCAL_RANK)."""
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"set_local_rank needs an int >= 0, got {index!r}.")
    if index < 0:
        raise ValueError(f"set_local_rank needs an int >= 0, got {index!r}.")
    set_local_rank_hint(index)
    current().set_local_rank(index)


def spawn(
    backend: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs_dict: Mapping[str, Any] | None = None,
    nproc_per_node: int = 1,
    **kwargs: Any,
) -> SpawnResult:
    """Start ``nproc_per_node`` workers that each run ``fn(local_rank, *args, **kwargs_dict)``
    in an initialized context of ``backend``, and wait for them.

    A supervisor watches the workers: when one raises or dies, the others raise
    `PeerFailed` at their next collective and are stopped within seconds, and
    `WorkerFailedError` names the rank, shows its traceback and lists what the others
    reported. Ctrl-C and SIGTERM stop every worker; no process outlives the call.

    Args:
        backend: "gloo", "nccl", "mpi", "xla-tpu", "horovod", ...
        fn: a function defined at the top level of a module (workers import it), or in a
            notebook, IPython or ``python -c`` (sent to the workers by value).
        args: positional arguments for ``fn`` after the local rank.
        kwargs_dict: keyword arguments for ``fn``.
        nproc_per_node: workers to start on this machine.
        kwargs: native backends: ``nnodes`` (1), ``node_rank`` (0), ``master_addr``
            ("127.0.0.1" or MASTER_ADDR), ``master_port`` (a free port, or MASTER_PORT),
            ``init_method``, ``timeout`` (process group timeout), ``start_method``
            ("forkserver", the default: forked from a warm server; "spawn"; "fork"),
            ``job_timeout`` (seconds for the whole job), ``tag_output`` and ``output_ranks``
            (see "The workers' output" in docs/launching.md). Every backend takes
            ``debug=True`` (the workers run in the debug mode); unknown names raise TypeError.

    Returns:
        Every worker's return value on this machine, in local-rank order.

    Example:
        >>> def work(local_rank, base):
        ...     return base + idist.get_rank()
        >>> idist.spawn("gloo", work, args=(10,), nproc_per_node=2)
        [10, 11]
    """
    model = registry.for_backend(backend)
    if not callable(fn):  # before any worker starts
        raise TypeError(f"spawn() needs a callable fn (a top-level function), got {fn!r}.")
    with debug_env(kwargs.pop("debug", None)):  # the workers inherit DISTBRIDGE_DEBUG
        if model.spawn_takes_activate:  # its workers make their model the active one
            if "activate" in kwargs:
                raise TypeError("spawn() got an unexpected keyword argument 'activate'.")
            kwargs["activate"] = activated
        return model.spawn(
            fn, tuple(args), kwargs_dict or {}, nproc_per_node, backend=backend, **kwargs
        )


_log = logging.getLogger("distbridge")


def show_config() -> None:
    """Log (INFO, logger "distbridge") the model, backend, device and layout of this process."""
    if not _log.hasHandlers():
        _log.addHandler(logging.StreamHandler())
        _log.setLevel(logging.INFO)
    model = current()
    for label, value in (
        ("distributed configuration", model.name),
        ("backend", model.backend()),
        ("device", model.device().type),
        ("hostname", hostname()),
        ("world size", model.get_world_size()),
        ("rank", model.get_rank()),
        ("local rank", model.get_local_rank()),
        ("num processes per_node", model.get_nproc_per_node()),
        ("num nodes", model.get_nnodes()),
        ("node rank", model.get_node_rank()),
    ):
        _log.info("%s: %s", label, value)
