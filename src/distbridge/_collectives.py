"""The facade's collectives: each function delegates to the active computation model.

Every collective works without a distributed context (the serial model answers as a
world of one would) and validates its arguments the same way on every model, so a
bad call fails on a laptop exactly as it would on a cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path, PurePath
from typing import Any, Literal, TypeVar, overload

import torch

from distbridge import _state
from distbridge._types import Group

__all__ = [
    "all_gather",
    "all_gather_tensors_with_shapes",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "gather",
    "new_group",
    "reduce",
    "reduce_scatter",
    "scatter",
]

_AVG = Literal["AVG", "avg", "AVERAGE", "average", "Avg", "Average"]
#: Python values a collective returns with their own type (a numpy float64 as a float)
_Number = TypeVar("_Number", int, float)
_Value = TypeVar("_Value", bool, int, float, str)


@overload
def all_reduce(
    tensor: torch.Tensor, op: str = "SUM", group: Group | None = None
) -> torch.Tensor: ...
@overload
def all_reduce(tensor: int, op: _AVG, group: Group | None = None) -> float: ...  # type: ignore[overload-overlap]
@overload
def all_reduce(tensor: _Number, op: str = "SUM", group: Group | None = None) -> _Number: ...
def all_reduce(tensor: Any, op: str = "SUM", group: Group | None = None) -> Any:
    """Reduce ``tensor`` over the ranks of ``group`` (default: all); every rank gets the result.

    Args:
        tensor: a tensor (reduced in place, like ``torch.distributed.all_reduce``, and returned on
            its own device), or a Python number (an int stays an int, a float is reduced
            in float64, a bool stays a bool under AND / OR / MIN / MAX).
        op: "SUM", "PRODUCT", "MIN", "MAX", "AND", "OR" (bitwise on ints) or "AVG" (also
            "AVERAGE"; floats only for tensors; a number's average is a float).
            Case-insensitive. Horovod adds "ADASUM". MIN and MAX of floats are IEEE
            754-2019's minimum and maximum on every backend: a NaN on any rank gives NaN,
            and -0.0 is below 0.0 (torch's gloo keeps whichever comes first in rank order).
        group: None for every rank, a list of ranks (the group is created once and cached),
            or a backend group object. Ranks outside the group get ``tensor`` back unchanged.

    Note:
        Without a distributed context, returns ``tensor`` (validated as on any backend).

    Example:
        >>> idist.all_reduce(idist.get_rank() + 1)
        3   # on each of 2 ranks
    """
    model = _state.active  # current() written out on the path issue 37 counts: one call fewer
    return (model if model.is_current() else _state.resync()).all_reduce(tensor, op, group)


@overload
def all_gather(tensor: torch.Tensor, group: Group | None = None) -> torch.Tensor: ...
@overload
def all_gather(tensor: _Value, group: Group | None = None) -> list[_Value]: ...
@overload
def all_gather(tensor: Any, group: Group | None = None) -> list[Any]: ...
def all_gather(tensor: Any, group: Group | None = None) -> Any:
    """Collect ``tensor`` (a tensor, number, str, Path or any picklable object) from every rank
    of ``group``.

    Returns:
        For a tensor of shape (n, ...): a tensor of shape (group_size * n, ...) in rank order
        (a 0-dim tensor gives (group_size,)); every rank's tensor must have the same shape.
        For anything else: a list with one entry per rank, each with its sender's exact type
        (another number type, such as a numpy scalar, arrives as ``x.item()`` gives it;
        `all_gather_object` keeps its type). Ranks outside ``group`` get ``x`` or ``[x]``.

    The shapes are not exchanged first (one collective, as in torch): where they differ, the
    backend fails (gloo aborts the process), or in debug mode (``DISTBRIDGE_DEBUG=1``) every
    rank raises `CollectiveMismatch` naming each shape. For tensors whose shapes differ use
    `gather`, `all_gather_tensors_with_shapes` or `all_gather_object`.

    Note:
        Without a distributed context: a tensor comes back as a copy (0-dim: shape (1,)),
        anything else as a one-item list. Objects are pickled: unpickling runs code from the
        sender, so gather objects only from ranks you trust (your own job).

    Example:
        >>> idist.all_gather(f"rank{idist.get_rank()}")
        ['rank0', 'rank1']   # on each of 2 ranks
    """
    return _state.current().all_gather(tensor, group)


@overload
def broadcast(
    tensor: torch.Tensor, src: int = 0, safe_mode: bool = False, group: Group | None = None
) -> torch.Tensor: ...
@overload
def broadcast(
    tensor: _Value, src: int = 0, safe_mode: bool = False, group: Group | None = None
) -> _Value: ...
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
    ranks passed (a numpy scalar arrives as the Python int, float or bool of its value, as
    ``x.item()`` gives; `broadcast_object` keeps its type). A tensor is received in place
    into each rank's tensor (same shape and dtype on every rank) unless ``safe_mode=True``,
    where the source sends dtype and shape first and the other ranks may pass None (they
    get a new tensor on ``device()``).
    A rank outside ``group`` gets its own ``tensor`` back, after the same checks as a
    non-source member (None without ``safe_mode`` or a sparse tensor is an error there too).

    Note:
        Without a distributed context, returns ``tensor`` (``src`` must be 0).

    Example:
        >>> value = 0.1 if idist.get_rank() == 0 else None
        >>> idist.broadcast(value, safe_mode=True)
        0.1   # on every rank, exactly
    """
    return _state.current().broadcast(tensor, src, safe_mode, group)


def new_group(ranks: Sequence[int], **kwargs: Any) -> Any:
    """A group of the global ``ranks``; created once per rank set and options, then reused.

    Every rank must call it (torch.distributed creates groups collectively). Without a
    distributed context, returns the validated list of ranks.
    """
    return _state.current().new_group(ranks, **kwargs)


def all_gather_tensors_with_shapes(
    tensor: torch.Tensor, shapes: Sequence[Sequence[int]], group: Group | None = None
) -> list[torch.Tensor]:
    """Gather tensors whose shapes differ across ranks, when every rank knows all shapes.

    The shapes may have different numbers of dims (``[[], [2, 3], [4]]``: a 0-dim tensor
    on group rank 0). Every tensor travels flat, padded to the most elements any has, in
    one all-gather (with one element more, which says whether this rank's own tensor
    passed its checks); nothing is exchanged first.

    ``tensor``'s shape must be ``shapes[group rank]``; ``shapes`` lists every member's, in
    group-rank order, the same on every rank; ``group`` as in `all_reduce`. Returns one tensor
    per group member, each with its own shape (``[tensor]`` on a rank outside ``group``).

    Raises:
        TypeError, ValueError: ``shapes`` is not one list of int dimensions (0 or more) per
            member with ``tensor``'s at this rank's place, or needs too large a buffer.
            When only some ranks' tensors do not match their entry (or are not dense),
            those ranks raise their own error and every other member a ValueError naming
            them, after the all-gather: no rank waits for ever.

    Note:
        Without a distributed context, returns ``[tensor]`` (``shapes`` is ``[tensor.shape]``).

    Example:
        >>> mine = torch.tensor(7.0) if idist.get_rank() == 0 else torch.ones(2, 3)
        >>> idist.all_gather_tensors_with_shapes(mine, [[], [2, 3]])
        [tensor(7.), tensor([[1., 1., 1.], [1., 1., 1.]])]   # on each of 2 ranks
    """
    return _state.current().all_gather_tensors_with_shapes(tensor, shapes, group)


@overload
def reduce(
    tensor: torch.Tensor, dst: int = 0, op: str = "SUM", group: Group | None = None
) -> torch.Tensor: ...
@overload
def reduce(
    tensor: _Number, dst: int = 0, op: str = "SUM", group: Group | None = None
) -> _Number: ...
def reduce(tensor: Any, dst: int = 0, op: str = "SUM", group: Group | None = None) -> Any:
    """Reduce ``tensor`` over the ranks of ``group`` onto global rank ``dst``.

    ``tensor`` is a tensor (on ``dst`` it holds the result afterwards, like
    ``torch.distributed.reduce``) or a Python number (exact type kept); ``op`` and ``group``
    are as in `all_reduce`. Returns the result on ``dst``; every other rank gets ``tensor``
    unchanged (never the scratch values some backends leave in non-destination buffers).

    Note:
        Without a distributed context, returns ``tensor`` (``dst`` must be 0).

    Example:
        >>> idist.reduce(idist.get_rank() + 1, dst=0)
        3   # on rank 0 of 2; rank 1 gets 2 (its own value) back
    """
    return _state.current().reduce(tensor, dst, op, group)


def gather(
    tensor: Any, dst: int = 0, group: Group | None = None, *, same_shape: bool = False
) -> list[Any]:
    """Collect every rank's ``tensor`` on global rank ``dst``.

    Shapes may differ across ranks, numbers of dims too (a 0-dim tensor here, a 3-dim one
    there): the ranks first exchange their shapes in one small collective, and each tensor
    comes back in its own shape. A dtype that differs is a TypeError on every rank. With
    ``same_shape=True`` (every rank passes one shape and dtype) that exchange is skipped: as
    fast as ``torch.distributed.gather``, and a rank that breaks the promise gets a backend
    error, or `CollectiveMismatch` in debug mode. Numbers, str, Path and other picklable
    values come back with their sender's exact type.

    Returns:
        On ``dst``, a list with one entry per group member, in rank order; ``[]`` elsewhere.

    Note:
        Without a distributed context, returns ``[tensor]``.

    Example:
        >>> idist.gather(torch.arange(idist.get_rank() + 1), dst=0)
        [tensor([0]), tensor([0, 1])]   # on rank 0 of 2; [] on rank 1
        >>> x = torch.tensor(5) if idist.get_rank() == 0 else torch.ones(1, 2, dtype=torch.int64)
        >>> idist.gather(x, dst=0)
        [tensor(5), tensor([[1, 1]])]   # on rank 0 of 2; [] on rank 1
    """
    return _state.current().gather(tensor, dst, group, same_shape)


def scatter(
    tensors: Sequence[torch.Tensor] | None,
    src: int = 0,
    group: Group | None = None,
    *,
    out: torch.Tensor | None = None,
) -> Any:
    """Give each rank of ``group`` its own tensor from global rank ``src``.

    ``src`` is a global rank; ``group`` as in `all_reduce`.

    Args:
        tensors: on ``src``, one tensor per group member in group-rank order (one dtype;
            shapes may differ, numbers of dims too: each receiver gets its own tensor's
            shape); ignored elsewhere (pass None).
        out: a tensor to receive into, on every rank: then every ``tensors[r]`` must have its
            dtype and shape, and the shape exchange that otherwise comes first is skipped (as
            fast as ``torch.distributed.scatter``). A rank whose ``out`` disagrees gets a
            backend error, or `CollectiveMismatch` in debug mode. When the source's
            ``tensors`` do not fit its ``out``, it sends zeros (the others are already
            waiting) and raises ValueError.

    Returns:
        Group rank r's ``tensors[r]``, on ``device()`` (on ``src``: on the input's device);
        ``out`` itself when given.

    Note:
        Without a distributed context, returns ``tensors[0]``.

    Example:
        >>> parts = [torch.zeros(1), torch.ones(2)] if idist.get_rank() == 0 else None
        >>> idist.scatter(parts, src=0)
        tensor([0.])   # on rank 0; tensor([1., 1.]) on rank 1
    """
    return _state.current().scatter(tensors, src, group, out)


def reduce_scatter(
    tensor: torch.Tensor, op: str = "SUM", group: Group | None = None
) -> torch.Tensor:
    """Split ``tensor`` along dim 0 into one chunk per group member, reduce each chunk over
    the ranks, and give group rank r the reduced chunk r.

    ``tensor.shape[0]`` must be a multiple of the group size (ValueError otherwise). The
    input is not modified. Where the backend has no reduce-scatter (gloo before torch 2.13,
    or a backend without the op) it is emulated exactly by an all-reduce of a copy and a
    slice, which moves group-size times more data.

    Note:
        Without a distributed context, returns a reduced copy: ``tensor`` itself as one chunk.

    Example:
        >>> idist.reduce_scatter(torch.arange(4.0))
        tensor([0., 2.])   # on rank 0 of 2; tensor([4., 6.]) on rank 1
    """
    return _state.current().reduce_scatter(tensor, op, group)  # type: ignore[no-any-return]


@overload
def all_to_all(
    tensors: torch.Tensor, group: Group | None = None, *, same_shape: bool = False
) -> torch.Tensor: ...
@overload
def all_to_all(
    tensors: Sequence[torch.Tensor], group: Group | None = None, *, same_shape: bool = False
) -> list[torch.Tensor]: ...
def all_to_all(
    tensors: Sequence[torch.Tensor] | torch.Tensor,
    group: Group | None = None,
    *,
    same_shape: bool = False,
) -> list[torch.Tensor] | torch.Tensor:
    """Send ``tensors[j]`` to group rank j and receive one tensor from every group rank.

    Sizes may be uneven: each tensor may have its own shape, its own number of dims too
    (one dtype everywhere), and receivers learn the shapes on the way (one small collective
    first). With ``same_shape=True`` every tensor on every rank has one shape and dtype, and
    that exchange is skipped: one ``torch.distributed.all_to_all_single`` where the backend
    has it. Tensors that lie end to end in one buffer (``list(x.chunk(n))``) are sent
    without a copy; the received tensors are views of one new buffer.

    One tensor instead of a list works as ``torch.distributed.all_to_all_single`` (and
    ``hvd.alltoall``) with equal splits: its dim 0 is cut into group-size chunks, chunk j
    goes to rank j, and a tensor of the same shape comes back whose chunk j came from rank
    j. Every rank passes the same shape; a dim 0 that does not divide is a ValueError.

    Returns:
        For a list, a list whose entry j is what group rank j sent to this rank; for one
        tensor, one tensor.

    Note:
        Without a distributed context, returns ``[tensors[0]]`` (a copy), or a copy of the
        one tensor.

    Example:
        >>> idist.all_to_all([torch.tensor([r * 10 + idist.get_rank()]) for r in range(2)])
        [tensor([0]), tensor([1])]   # on rank 0 of 2; [tensor([10]), tensor([11])] on rank 1
        >>> idist.all_to_all(torch.arange(4) + 10 * idist.get_rank())
        tensor([ 0,  1, 10, 11])     # on rank 0 of 2; tensor([ 2,  3, 12, 13]) on rank 1
    """
    return _state.current().all_to_all(tensors, group, same_shape)


@overload
def barrier(
    group: Group | None = None,
    async_op: Literal[False] = False,
    device_ids: list[int] | None = None,
    *,
    timeout: float | timedelta | None = None,
    name: str | None = None,
) -> None: ...
@overload
def barrier(
    group: Group | None = None,
    async_op: bool = False,
    device_ids: list[int] | None = None,
    *,
    timeout: float | timedelta | None = None,
    name: str | None = None,
) -> Any: ...
def barrier(
    group: Group | None = None,
    async_op: bool = False,
    device_ids: list[int] | None = None,
    *,
    timeout: float | timedelta | None = None,
    name: str | None = None,
) -> Any:
    """Wait until every rank of ``group`` (default: all) has called ``barrier``.

    The positional parameters are ``torch.distributed.barrier``'s (what ignite >= 0.5.1 hands
    to torch); ``timeout`` and ``name`` are distbridge's and keyword-only.

    Args:
        group: as in `all_reduce`; ranks outside the group return at once.
        async_op: True returns a handle with ``wait()``, ``is_completed()`` and
            ``is_success()`` instead of None (a ``torch.distributed.Work`` where the backend
            has asynchronous barriers; a finished handle on the serial, XLA and Horovod
            models, whose barrier has already returned). Not with ``timeout``.
        device_ids: CUDA device indices for NCCL's barrier (validated on every model; the
            native model already uses this process's GPU, the others ignore it).
        timeout: None: the backend's own barrier (no extra cost; a hang lasts until the
            process group's timeout). Seconds (or a ``timedelta``): a barrier through the
            coordination store that raises `BarrierTimeout` naming the ranks that did not
            arrive; ``math.inf`` waits without a limit. Either way, past a few seconds it logs
            the missing ranks (logger ``"distbridge"``, WARNING) at growing intervals.
        name: names the barrier in those messages, e.g. ``"after-eval"``.

    Raises:
        BarrierTimeout: ``timeout`` passed before every member arrived (on the waiting ranks;
            each logs its stacks and asks the others to log theirs).
        PeerFailed: with a timeout, a rank of the job failed while this one waited.
        TypeError, ValueError: an argument of another type or value than the above, or
            ``async_op=True`` with a ``timeout``.

    Note:
        Without a distributed context, returns at once (after validating its arguments).
        The backend options ignite forwards (Horovod's ``process_set``, XLA's ``tag``, ...)
        are not accepted: see docs/migration.md.

    Example:
        >>> idist.barrier(timeout=600, name="checkpoint-written")  # doctest: +SKIP
    """
    return _state.current().barrier(group, timeout, name, async_op=async_op, device_ids=device_ids)
