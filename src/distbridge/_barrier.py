"""The facade's barrier: ``torch.distributed.barrier``'s parameters, plus timeouts and names.

It delegates to the active computation model, which validates the same way on every model.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal, overload

from distbridge import _state
from distbridge._types import Group

__all__ = ["barrier"]


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
    model = _state.active  # current(), written out: one call fewer
    return (model if model.is_current() else _state.resync()).barrier(
        group, timeout, name, async_op=async_op, device_ids=device_ids
    )
