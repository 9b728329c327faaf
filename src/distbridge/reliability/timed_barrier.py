"""Barriers with a timeout, through the coordination store: who is missing, by rank and name.

Each member counts its timed barriers per group, so all agree on the number ``seq`` of the
one they are in. Under ``barrier/<group>/<seq>/`` a member sets ``r<rank>`` and adds one to
``n``; the one that brings ``n`` to the group's size sets ``done`` and deletes the keys of
``seq - 1`` (which every member has left), so at most two barriers' keys exist per group.
The others wait for ``done`` (the store's own wait for a second, then polling every 0.25 s),
log the missing ranks at growing intervals after a few seconds, raise `BarrierTimeout` past
the timeout, and `PeerFailed` when a failed rank left its note (``fail_together``). A member
that will never arrive (``one_rank_first``'s rank, when its block raised) can ``abort`` the
barrier instead: ``done`` then holds its message, which the waiting members raise as
``DistributedError``.

A model makes its ``StoreBarrier`` and the stack watcher beside it on first use
(``model.timed_barriers()``); ``abort_barrier`` and ``dump_all_stacks`` act through them.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from distbridge.errors import BarrierTimeout, DistributedError
from distbridge.reliability.fail_together import ANSWER_WAIT_SECONDS, read_failure, stopped
from distbridge.reliability.hang.stacks import dump

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = [
    "CompletedBarrier",
    "StoreBarrier",
    "abort_barrier",
    "await_keys",
    "check_barrier_options",
    "check_timeout",
    "dump_all_stacks",
    "group_tag",
]

LOG = logging.getLogger("distbridge")
#: seconds of waiting before the first "still waiting for ranks ..." warning (at most half
#: the timeout); the interval then doubles up to MAX_WARNING_INTERVAL
FIRST_WARNING = 5.0
MAX_WARNING_INTERVAL = 60.0
#: how long a waiting rank blocks in the store's wait, then how often it polls ``done`` and
#: the failure note of a peer (`PeerFailed`)
BLOCKING_SECONDS = 1.0
POLL_SECONDS = 0.25
_OK = b"ok"


def check_timeout(timeout: object) -> float | None:
    """``timeout`` in seconds (None stays None); TypeError / ValueError naming a bad one."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, int | float) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(
            f"timeout must be a number of seconds or a datetime.timedelta, got {timeout!r}."
        )
    if not seconds > 0:  # also catches NaN
        raise ValueError(
            f"timeout must be positive (seconds or a timedelta), got {timeout!r}; pass None "
            "to wait without a limit."
        )
    return seconds


def check_barrier_options(
    timeout: object, name: object, async_op: object, device_ids: object
) -> tuple[float | None, list[int] | None]:
    """Validate ``barrier``'s options: the timeout in seconds (`check_timeout`) and
    ``device_ids`` as a list (each may be None)."""
    seconds = check_timeout(timeout)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str naming the barrier, got {name!r}.")
    if not isinstance(async_op, bool):
        hint = (
            f"; timeout is keyword-only: barrier(timeout={async_op!r})"
            if isinstance(async_op, int | float | timedelta)
            else ""
        )
        raise TypeError(f"async_op must be a bool, got {async_op!r}{hint}.")
    if async_op and seconds is not None:
        raise ValueError(
            "barrier(async_op=True) cannot have a timeout: a timed barrier blocks until every "
            "member arrives or the time is up; pass either async_op=True or timeout=..."
        )
    if device_ids is None:
        return seconds, None
    ids = list(device_ids) if isinstance(device_ids, list | tuple) else None
    if ids is None or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise TypeError(
            f"device_ids must be a list of CUDA device indices (ints) or None, got {device_ids!r}."
        )
    if any(i < 0 for i in ids):
        raise ValueError(f"device_ids must be non-negative device indices, got {device_ids!r}.")
    return seconds, ids


class CompletedBarrier:
    """What ``barrier(async_op=True)`` returns on a model whose barrier has already completed
    when the call returns: the subset of ``torch.distributed.Work`` that a barrier's caller
    uses, answering as a finished barrier does."""

    def wait(self, timeout: object = None) -> bool:
        """The barrier is done: returns True at once."""
        return True

    def is_completed(self) -> bool:
        """Always True."""
        return True

    def is_success(self) -> bool:
        """Always True."""
        return True

    def __repr__(self) -> str:
        return "CompletedBarrier()"


def await_keys(
    store: Any, keys: list[str], until: float, rank: int, doing: str, block: bool = True
) -> bool:
    """Wait until every key of ``keys`` is set (True) or ``time.monotonic()`` reaches
    ``until`` (False): with ``block``, first in the store's own wait for up to a second (a
    barrier usually passes within it), then polling, since a TCPStore wait that times out
    logs two lines from C++. `PeerFailed` (``rank`` stopped ``doing``) once a rank left a
    failure note: it will never arrive."""
    if block:
        try:
            left = min(until - time.monotonic(), BLOCKING_SECONDS)
            store.wait(keys, timedelta(seconds=max(left, 1e-3)))
            return True
        except RuntimeError:  # timed out (a dead store shows below)
            pass
    while not store.check(keys):
        note = read_failure(store)
        if note is not None:  # the failed rank will never arrive
            raise stopped(note, rank, doing)
        now = time.monotonic()
        if now >= until:
            return False
        time.sleep(min(POLL_SECONDS, until - now))
    return True


def group_tag(members: tuple[int, ...]) -> str:
    """A group's name in store keys: ``0-1-2``, or for a large group a short, stable digest."""
    if len(members) <= 8:
        return "-".join(map(str, members))
    digest = hashlib.sha1(repr(members).encode(), usedforsecurity=False).hexdigest()
    return f"{len(members)}x{digest[:12]}"


def _key(members: tuple[int, ...], seq: int) -> str:
    """The store keys' prefix of barrier ``seq`` of the group ``members``."""
    return f"barrier/{group_tag(members)}/{seq}"


def _describe(name: str | None) -> str:
    return "barrier" if name is None else f"barrier {name!r}"


def dump_all_stacks(model: ModelContract, reason: str) -> str:
    """Log this rank's stacks and ask every rank that has a stack watcher for theirs."""
    text = dump(model.get_rank(), reason)
    if model.stack_watcher is not None:
        model.stack_watcher.request(reason)
    return text


def abort_barrier(model: ModelContract, message: str) -> None:
    """Skip this rank's next timed barrier of the whole world: the ranks waiting there raise
    ``DistributedError(message)`` instead of waiting for this rank."""
    timed = model.timed_barriers()
    if timed is not None:
        timed.abort(model._group_members(model.groups.resolve(None)), message)


class StoreBarrier:
    """The timed barriers of ``model``'s process over the coordination ``store``: their
    sequence numbers, the waiting and the errors. Before `BarrierTimeout` is raised it dumps
    the stacks of this rank and asks the others for theirs (`dump_all_stacks`), and adds the
    model's hang verdict to its message; a store that stopped answering is named as the
    failure note the model's watcher read, if any (its host failed and is gone)."""

    def __init__(self, store: Any, model: ModelContract) -> None:
        self._store = store
        self._model = model
        self._rank = model.get_rank()
        self._calls: dict[tuple[int, ...], int] = {}

    def wait(self, members: tuple[int, ...], timeout: float, name: str | None) -> None:
        """Arrive at the next barrier of the group ``members`` (global ranks, this one among
        them) and wait up to ``timeout`` seconds (``math.inf``: no limit, still logging) for
        the others; ``name`` is named in the warnings and errors. `BarrierTimeout` when some
        did not arrive in time; `DistributedError` when a member aborted the barrier or the
        store stopped answering."""
        key = self._next_key(members)
        store = self._store
        store.set(f"{key}/r{self._rank}", b"1")
        if int(store.add(f"{key}/n", 1)) == len(members):
            store.set(f"{key}/done", _OK)
            if self._calls[members] >= 2:  # every member has left the one before
                for leaf in ("n", "done", *(f"r{m}" for m in members)):
                    store.delete_key(f"{_key(members, self._calls[members] - 2)}/{leaf}")
            return
        try:
            status = self._wait_done(key, members, timeout, name)
        except DistributedError:  # PeerFailed (a rank left a failure note), BarrierTimeout
            raise
        except RuntimeError as err:  # the store's own error: it stopped answering
            together = self._model.together
            note = None if together is None else together.known_failure()
            if note is not None:  # the store's host failed: its note says why
                raise stopped(note, self._rank, f"waiting in {_describe(name)}") from err
            raise DistributedError(
                f"The coordination store stopped answering while rank {self._rank} waited in "
                f"{_describe(name)} ({err}); the rank that hosts it (rank 0) may have died."
            ) from err
        if status != _OK:
            raise DistributedError(status.decode("utf-8", errors="replace"))

    def abort(self, members: tuple[int, ...], message: str) -> None:
        """Take this rank's place in the group's next barrier without arriving: the members
        waiting there raise ``DistributedError(message)``."""
        self._store.set(f"{self._next_key(members)}/done", message.encode())

    def _next_key(self, members: tuple[int, ...]) -> str:
        seq = self._calls.get(members, 0)
        self._calls[members] = seq + 1
        return _key(members, seq)

    def _wait_done(
        self, key: str, members: tuple[int, ...], timeout: float, name: str | None
    ) -> bytes:
        """Wait for ``done`` and return its value (``_OK`` also when every member arrived but
        ``done`` never came: the last one died in between), warning at growing intervals of
        the members still missing; `BarrierTimeout` when some are missing past ``timeout``."""
        done = f"{key}/done"
        start = time.monotonic()
        deadline = start + timeout
        interval = min(FIRST_WARNING, timeout / 2)
        doing = f"waiting in {_describe(name)}"
        block = True
        while True:
            until = min(time.monotonic() + interval, deadline)
            if await_keys(self._store, [done], until, self._rank, doing, block):
                return bytes(self._store.get(done))
            block = False
            now = time.monotonic()
            missing = [m for m in members if not self._store.check([f"{key}/r{m}"])]
            if now >= deadline:
                if not missing:
                    return _OK
                raise self._timed_out(missing, members, timeout, name)
            LOG.warning(
                "Rank %d has waited %.1f s in %s: ranks %s of %s have not arrived%s.",
                self._rank, now - start, _describe(name), missing, list(members),
                "" if math.isinf(timeout) else f" (timeout {timeout:g} s)",
            )  # fmt: skip
            interval = min(interval * 2, MAX_WARNING_INTERVAL)

    def _timed_out(
        self, missing: list[int], members: tuple[int, ...], timeout: float, name: str | None
    ) -> BarrierTimeout:
        what = _describe(name)
        reason = f"{what} timed out on rank {self._rank}; missing ranks {missing}"
        dump_all_stacks(self._model, reason)
        together, why = self._model.together, None
        with contextlib.suppress(Exception):  # a verdict must never hide the timeout
            why = None if together is None else together.verdict({}, ANSWER_WAIT_SECONDS)
        return BarrierTimeout(
            f"{what[0].upper()}{what[1:]} timed out after {timeout:g} s on rank {self._rank}: "
            f"ranks {missing} of the group {list(members)} did not arrive. Their Python stacks "
            "were requested in the log (distbridge.dump_stacks); look there for where they "
            "are stuck, or raise the timeout."
            + (f"\nWhy, from every rank's collective ledger:\n{why}" if why else ""),
            missing_ranks=tuple(missing),
            name=name,
            timeout=timeout,
        )
