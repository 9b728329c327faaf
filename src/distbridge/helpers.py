"""Rank-selective and process helpers, built only on the facade."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from distbridge import _api, _collectives, environments
from distbridge.errors import DistributedError

__all__ = [
    "get_local_group",
    "get_local_size",
    "gpu_mem_usage",
    "is_main_process",
    "is_module_wrapper",
    "one_rank_first",
    "one_rank_only",
    "rank_zero_only",
    "synchronize",
]

F = TypeVar("F", bound=Callable[..., Any])


def _check_rank(rank: object, size: int, what: str) -> int:
    if not isinstance(rank, int) or isinstance(rank, bool):
        raise TypeError(f"rank must be an int, got {rank!r}.")
    if not 0 <= rank < size:
        raise ValueError(f"rank={rank} is not a valid {what} (0..{size - 1}).")
    return rank


def one_rank_only(rank: int = 0, with_barrier: bool = False) -> Callable[[F], F]:
    """Decorator: run the function on rank ``rank`` only; other ranks get None.

    Args:
        rank: the global rank that runs the function.
        with_barrier: every rank waits in a barrier after the call.

    Note:
        Without a distributed context the function runs (this process is rank 0).

    Example:
        >>> @one_rank_only()           # doctest: +SKIP
        ... def log_metrics(metrics): print(metrics)
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = None
            if _api.get_rank() == _check_rank(rank, _api.get_world_size(), "rank"):
                result = func(*args, **kwargs)
            if with_barrier:
                _collectives.barrier()
            return result

        return wrapper  # type: ignore[return-value]

    return decorate


@contextmanager
def one_rank_first(rank: int = 0, local: bool = False) -> Iterator[None]:
    """Context manager: rank ``rank`` runs the block first, then all the others.

    Typical use: one process downloads or preprocesses a dataset, the others then read it.

    Args:
        rank: the rank that goes first.
        local: if True, ``rank`` is a local rank: the first of each machine goes first.

    Note:
        Without a distributed context the block simply runs.
    """
    me = _api.get_local_rank() if local else _api.get_rank()
    size = _api.get_nproc_per_node() if local else _api.get_world_size()
    _check_rank(rank, size, "local rank" if local else "rank")
    if me != rank:
        _collectives.barrier()
    yield
    if me == rank:
        _collectives.barrier()


# ---- detectron2 / Lightning / mmengine style process helpers ----------------------------------


def is_main_process() -> bool:
    """True on global rank 0 (and without a distributed context)."""
    return _api.get_rank() == 0


def synchronize() -> None:
    """A barrier across all ranks; returns at once in a world of one (detectron2's name)."""
    if _api.get_world_size() > 1:
        _collectives.barrier()


def get_local_size() -> int:
    """Processes on this machine (``get_nproc_per_node``)."""
    return _api.get_nproc_per_node()


def get_local_group() -> Any:
    """The group of the ranks on this machine.

    Every machine's group is created on first use (torch.distributed creates groups
    collectively, so every rank must make its first call at the same point) and cached.
    Without a distributed context it is ``[0]``.

    Raises:
        DistributedError: the machines run different numbers of processes, so the
            machine groups cannot be derived from the layout.
    """
    world, per_node, nodes = _api.get_world_size(), _api.get_nproc_per_node(), _api.get_nnodes()
    if per_node * nodes != world:
        raise DistributedError(
            f"Cannot derive the machine groups: {world} ranks are not {nodes} machines x "
            f"{per_node} processes. Start the same number of processes on every machine "
            "(nproc_per_node / --ntasks-per-node), or build groups with new_group()."
        )
    groups = [_collectives.new_group(range(n * per_node, (n + 1) * per_node)) for n in range(nodes)]
    return groups[_api.get_node_rank()]


def _rank_for_logging() -> int:
    """The rank from the live context, else from the launcher's environment, else 0."""
    if _api.backend() is not None:
        return _api.get_rank()
    launched = environments.detect()
    return launched.rank if launched is not None else 0


def rank_zero_only(func: F) -> F:
    """Decorator: call ``func`` on rank 0 only; other ranks get None.

    Works before initialization too: the rank then comes from the launcher's
    environment (torchrun's RANK, ...), so logging setup can use it.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs) if _rank_for_logging() == 0 else None

    return wrapper  # type: ignore[return-value]


def gpu_mem_usage() -> float:
    """Peak GPU memory allocated by this process, in GiB (0.0 without CUDA)."""
    if not torch.cuda.is_available():
        return 0.0
    return torch.cuda.max_memory_allocated() / 1024**3


def is_module_wrapper(module: object) -> bool:
    """True for DataParallel, DistributedDataParallel and FullyShardedDataParallel modules."""
    wrappers: list[type] = [torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel]
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        wrappers.append(FullyShardedDataParallel)
    except ImportError:  # pragma: no cover - torch built without distributed
        pass
    return isinstance(module, tuple(wrappers))
