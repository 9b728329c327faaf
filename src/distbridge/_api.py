"""The facade: ``import distbridge as idist``. Each function delegates to the active model.

Every function works without a distributed context (the serial model answers as
a world of one would) and validates its arguments the same way on every model.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any, Literal, overload

import torch

from distbridge._registry import registry
from distbridge._state import current, install, resync, set_local_rank_hint
from distbridge._types import Group, SpawnResult
from distbridge.errors import DistributedError

__all__ = [
    "all_gather",
    "all_gather_tensors_with_shapes",
    "all_reduce",
    "available_backends",
    "backend",
    "barrier",
    "broadcast",
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
    "new_group",
    "registry",
    "set_local_rank",
    "show_config",
    "spawn",
    "sync",
]

_AVG = Literal["AVG", "avg", "AVERAGE", "average", "Avg", "Average"]

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
            ``rank``, ``world_size``. Unknown names raise TypeError.

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
    install(registry.for_backend(backend).from_backend(backend, **kwargs))


def finalize() -> None:
    """Tear down the active context (e.g. destroy the process group) and restore the
    environment variables ``initialize`` set. Without a context, does nothing."""
    current().finalize()
    resync()


def sync(temporary: bool = False) -> None:
    """Find the live context again (after creating or destroying one by hand).

    distbridge re-checks the context on every call already, so this is rarely needed;
    ``temporary`` is accepted for ignite compatibility and has no effect.
    """
    resync()


def set_local_rank(index: int) -> None:
    """Tell distbridge this process's local rank when the launcher's environment does not
    (a process group created by hand without LOCAL_RANK)."""
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
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

    A supervisor watches the workers: when one raises or dies, the others are stopped
    within seconds and `WorkerFailedError` names the rank and
    shows its traceback. Ctrl-C and SIGTERM stop every worker; no process outlives the call.

    Args:
        backend: "gloo", "nccl", "mpi", "xla-tpu", "horovod", ...
        fn: a function defined at the top level of a module (workers import it).
        args: positional arguments for ``fn`` after the local rank.
        kwargs_dict: keyword arguments for ``fn``.
        nproc_per_node: workers to start on this machine.
        kwargs: native backends: ``nnodes`` (1), ``node_rank`` (0), ``master_addr``
            ("127.0.0.1" or MASTER_ADDR), ``master_port`` (a free port, or MASTER_PORT),
            ``init_method``, ``timeout`` (process group timeout), ``start_method``
            ("spawn"), ``job_timeout`` (seconds for the whole job). Unknown names raise
            TypeError.

    Returns:
        Every worker's return value on this machine, in local-rank order.

    Example:
        >>> def work(local_rank, base):
        ...     return base + idist.get_rank()
        >>> idist.spawn("gloo", work, args=(10,), nproc_per_node=2)
        [10, 11]
    """
    model = registry.for_backend(backend)
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


# ---- collectives ------------------------------------------------------------------------------


@overload
def all_reduce(
    tensor: torch.Tensor, op: str = "SUM", group: Group | None = None
) -> torch.Tensor: ...
@overload
def all_reduce(tensor: int, op: _AVG, group: Group | None = None) -> float: ...  # type: ignore[overload-overlap]
@overload
def all_reduce(tensor: int, op: str = "SUM", group: Group | None = None) -> int: ...
@overload
def all_reduce(tensor: float, op: str = "SUM", group: Group | None = None) -> float: ...
def all_reduce(tensor: Any, op: str = "SUM", group: Group | None = None) -> Any:
    """Reduce ``tensor`` over the ranks of ``group`` (default: all); every rank gets the result.

    Args:
        tensor: a tensor (reduced in place, like ``torch.distributed.all_reduce``, and returned on
            its own device), or a Python number (an int stays an int, a float is reduced
            in float64, a bool stays a bool under AND / OR / MIN / MAX).
        op: "SUM", "PRODUCT", "MIN", "MAX", "AND", "OR" (bitwise on ints) or "AVG" (also
            "AVERAGE"; floats only for tensors; a number's average is a float).
            Case-insensitive. Horovod adds "ADASUM".
        group: None for every rank, a list of ranks (the group is created once and cached),
            or a backend group object. Ranks outside the group get ``tensor`` back unchanged.

    Note:
        Without a distributed context, returns ``tensor`` (validated as on any backend).

    Example:
        >>> idist.all_reduce(idist.get_rank() + 1)
        3   # on each of 2 ranks
    """
    return current().all_reduce(tensor, op, group)


@overload
def all_gather(tensor: torch.Tensor, group: Group | None = None) -> torch.Tensor: ...
@overload
def all_gather(tensor: bool, group: Group | None = None) -> list[bool]: ...
@overload
def all_gather(tensor: int, group: Group | None = None) -> list[int]: ...
@overload
def all_gather(tensor: float, group: Group | None = None) -> list[float]: ...
@overload
def all_gather(tensor: str, group: Group | None = None) -> list[str]: ...
@overload
def all_gather(tensor: Any, group: Group | None = None) -> list[Any]: ...
def all_gather(tensor: Any, group: Group | None = None) -> Any:
    """Collect ``tensor`` (a tensor, number, str, Path or any picklable object) from every rank
    of ``group``.

    Returns:
        For a tensor of shape (n, ...): a tensor of shape (group_size * n, ...), rank order
        (a 0-dim tensor gives shape (group_size,)); every rank's tensor must have the same
        shape. For a number, str, Path or any picklable object: a list with one entry per
        rank, each with its sender's exact type. Ranks outside ``group`` get ``x`` (a tensor)
        or ``[x]`` back.

    Note:
        Without a distributed context: a tensor comes back as a copy (0-dim: shape (1,)),
        anything else as a one-item list. Objects are pickled: unpickling runs code from the sender,
        so gather objects only from ranks you trust (your own job).

    Example:
        >>> idist.all_gather(f"rank{idist.get_rank()}")
        ['rank0', 'rank1']   # on each of 2 ranks
    """
    return current().all_gather(tensor, group)


@overload
def broadcast(
    tensor: torch.Tensor, src: int = 0, safe_mode: bool = False, group: Group | None = None
) -> torch.Tensor: ...
@overload
def broadcast(
    tensor: bool, src: int = 0, safe_mode: bool = False, group: Group | None = None
) -> bool: ...
@overload
def broadcast(
    tensor: int, src: int = 0, safe_mode: bool = False, group: Group | None = None
) -> int: ...
@overload
def broadcast(
    tensor: float, src: int = 0, safe_mode: bool = False, group: Group | None = None
) -> float: ...
@overload
def broadcast(
    tensor: str, src: int = 0, safe_mode: bool = False, group: Group | None = None
) -> str: ...
@overload
def broadcast(
    tensor: PurePath, src: int = 0, safe_mode: bool = False, group: Group | None = None
) -> Path: ...
@overload
def broadcast(
    tensor: None, src: int = 0, safe_mode: bool = True, group: Group | None = None
) -> Any: ...
def broadcast(
    tensor: Any, src: int = 0, safe_mode: bool = False, group: Group | None = None
) -> Any:
    """Give every rank of ``group`` the value ``tensor`` of rank ``src`` (a global rank).

    Numbers, str and Path arrive with the source's exact type and value, whatever the other
    ranks passed. A tensor is received in place into each rank's tensor (same shape and
    dtype on every rank) unless ``safe_mode=True``, where the source sends dtype and shape
    first and the other ranks may pass None (they get a new tensor on ``device()``).

    Note:
        Without a distributed context, returns ``tensor`` (``src`` must be 0).

    Example:
        >>> value = 0.1 if idist.get_rank() == 0 else None
        >>> idist.broadcast(value, safe_mode=True)
        0.1   # on every rank, exactly
    """
    return current().broadcast(tensor, src, safe_mode, group)


def barrier(group: Group | None = None) -> None:
    """Wait until every rank of ``group`` (default: all) has called ``barrier``.

    Note:
        Without a distributed context, returns at once.
    """
    current().barrier(group)


def new_group(ranks: Sequence[int], **kwargs: Any) -> Any:
    """A group of the global ``ranks``; created once per rank set and options, then reused.

    Every rank must call it (torch.distributed creates groups collectively). Without a
    distributed context, returns the validated list of ranks.
    """
    return current().new_group(ranks, **kwargs)


def all_gather_tensors_with_shapes(
    tensor: torch.Tensor, shapes: Sequence[Sequence[int]], group: Group | None = None
) -> list[torch.Tensor]:
    """Gather tensors whose shapes differ across ranks, when every rank knows all shapes.

    Args:
        tensor: this rank's tensor; its shape must be ``shapes[group rank]``.
        shapes: the shape of every group member's tensor, in group-rank order.
        group: as in `all_reduce`.

    Returns:
        One tensor per group member, each with its own shape.
    """
    return current().all_gather_tensors_with_shapes(tensor, shapes, group)
