"""Rank-selective helpers built only on the facade."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from distbridge import _api, _collectives

__all__ = ["one_rank_first", "one_rank_only"]

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
