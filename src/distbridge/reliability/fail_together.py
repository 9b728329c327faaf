"""Fail together: when a rank fails, its peers raise `PeerFailed` instead of hanging.

A failing rank leaves a note, ``"<rank>\\n<one-line summary>"``, under one key of the store
the whole job shares (`job_root`: the native default group's root store, which is the
``spawn`` parent's, torchrun's agent's or rank 0's; Horovod: the coordination store rank 0
hosts); the first note wins. ``spawn``'s worker writes it when the user's function raises
(and ``finalize``, run while an exception propagates), ``sys.excepthook`` under a launcher
(`install_excepthook`: while a context made by ``initialize`` lives, it writes the note, lets
the previous hook show the traceback, then tears the communicator down; ``finalize`` puts
the previous hook back), and ``spawn``'s parent for a worker that died silently.

Right after its note, a failing rank aborts its communicator (gloo: cuts its connections,
`Connections`; NCCL: aborts its process groups; Horovod: shuts its engine down), so its
peers' collectives fail at once even while its process lingers. A rank that leaves normally
(``finalize``) marks itself as gone instead. When a primitive then fails on another rank
(gloo: "Connection closed by peer"), the model's collective asks `peer_failure`, which reads
the note (the failure watcher's copy, else the store), gives the `PeerFailed` naming the
failed rank (or the rank that left while this one waited for it), and aborts this rank's
communicator in turn. A lost connection that no note explains keeps the backend's error
type, with the hang verdict added. While nothing fails, the collectives pay one ``try``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

from torch._C._distributed_c10d import PrefixStore  # where torch defines it
from torch.distributed import distributed_c10d as c10d

from distbridge.errors import CollectiveTimeout, DistributedError, PeerFailed
from distbridge.reliability import coordination
from distbridge.reliability.connections import Connections
from distbridge.reliability.hang.stacks import StoreThread
from distbridge.reliability.hang.verdict import headline

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract, Together

__all__ = [
    "FailureWatch",
    "abort_communicator",
    "failure_key",
    "install_excepthook",
    "job_root",
    "leave",
    "peer_failure",
    "read_failure",
    "record_failure",
    "record_for_launcher",
    "stopped",
    "store_ports",
    "summarize",
    "uninstall_excepthook",
    "wake_key",
]

#: How long a rank whose collective failed waits for a note that is on its way (the spawn
#: parent writes one for a killed worker as soon as it notices the death).
NOTE_WAIT_SECONDS = 2.0
_POLL_SECONDS = 0.02
#: How long a rank whose collective timed out waits for the other ranks' ledgers (a rank
#: that answers does so within half a second; one stuck in C never does).
ANSWER_WAIT_SECONDS = 3.0
_SUMMARY_CHARS = 300
# Backend errors that say a peer's connection went away: only then is a note worth waiting for.
_CONNECTION_LOST = (
    "closed by peer",
    "reset by peer",
    "broken pipe",
    "connection refused",
    "horovod has been shut down",  # Horovod's engine stops on every rank when one shuts down
)
#: Horovod's word when the ranks passed tensors of other shapes or dtypes to one collective
_MISMATCHED = "mismatched"
_LEFT_KEY = "distbridge/left/{rank}"
_NO_NOTE = (
    "A peer's connection was lost and it left no note (killed by a signal, or its process "
    "ended without a word)."
)

Teardown = Callable[[], object]
_Hook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]


def _lost_peer(err: BaseException) -> bool:
    text = str(err).lower()
    return any(marker in text for marker in _CONNECTION_LOST)


def _explained(op: str, err: RuntimeError, together: Together, failure: PeerFailed | None) -> Any:
    """``failure`` with the hang verdict added; for a timeout without a failed peer, a
    `CollectiveTimeout` with the verdict; for a lost peer that left no note (Horovod's
    engine shuts down on every rank when one is killed) or a mismatch the engine found
    without naming the rank (Horovod's "Mismatched ALLREDUCE tensor shapes"), ``err``'s type
    with the verdict; else None."""
    said = str(err).lower()
    timed_out = failure is None and ("timed out" in said or "timeout" in said)
    mismatched = failure is None and not timed_out and _MISMATCHED in said
    lost = failure is None and not timed_out and _lost_peer(err)
    if failure is None and not (timed_out or mismatched or lost):
        return None
    notes = {} if failure is None else {failure.rank: f"it failed: {failure.summary}"}
    wait = ANSWER_WAIT_SECONDS if timed_out else 1.0
    try:
        text = together.verdict(notes, wait)
    except Exception:  # a verdict must never hide the error it explains
        text = None
    if not text:
        return failure
    if failure is not None:
        return PeerFailed(failure.rank, failure.summary, f"{failure.detail}\n{text}")
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if mismatched or lost:  # err's own type, so that ``except HorovodInternalError`` holds
        why = "The ranks passed different tensors." if mismatched else _NO_NOTE
        try:
            return type(err)(f"{first}\n{why} Why, from every rank's collective ledger:\n{text}")
        except Exception:  # a type that cannot be made from one message
            return None
    return CollectiveTimeout(
        f"{op} timed out. {text}\n(From the ranks' collective ledgers and stacks, and torch's "
        f"flight recorder where it keeps one; the backend said: {first})",
        verdict=text,
    )


def _attempt() -> str:
    return f"distbridge/attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def failure_key() -> str:
    """The key of the failure note on the job's root store, one per torchelastic restart."""
    return f"{_attempt()}/failed"


def wake_key(rank: int) -> str:
    """The key that ``rank``'s failure watcher waits for (set with every failure note)."""
    return f"{_attempt()}/wake/{rank}"


def job_root(store: Any) -> Any:
    """The store under every ``PrefixStore`` wrapping ``store``: the one the launcher hosts."""
    while isinstance(store, PrefixStore):
        store = store.underlying_store
    return store


def store_ports() -> set[int]:
    """The TCP port of the default process group's root store (and ``MASTER_PORT``): the
    connections a failing rank must keep, so that its note reaches the peers."""
    ports: set[int] = set()
    with contextlib.suppress(Exception):
        ports.add(int(job_root(coordination.default_store()).port))
    with contextlib.suppress(KeyError, ValueError):
        ports.add(int(os.environ["MASTER_PORT"]))
    return ports


def abort_communicator(backend: str, connections: Connections) -> None:
    """End this rank's part of the job's communicators, so that the peers' collectives fail
    at once: cut gloo's connections (gloo has no abort of its own); with NCCL, abort every
    process group too (``ncclCommAbort``). Never raises: it runs while this rank fails."""
    if backend == "nccl" and c10d._world.pg_map:
        with contextlib.suppress(Exception):
            c10d._abort_process_group()
    connections.cut()


def summarize(exc: BaseException) -> str:
    """One line naming ``exc``: ``"ValueError: bad batch"`` (shortened past 300 characters)."""
    try:
        text = str(exc)
    except Exception:
        text = "<str() of the exception failed>"
    first = text.strip().splitlines()[0] if text.strip() else ""
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return line if len(line) <= _SUMMARY_CHARS else line[: _SUMMARY_CHARS - 3] + "..."


def record_failure(store: Any, rank: int, summary: str, world_size: int = 0) -> None:
    """Write the failure note of ``rank`` on ``store``'s root unless a note is there already,
    and wake the failure watchers of ranks ``0 .. world_size - 1``.

    Never raises: a rank that is failing must not fail differently because the store is gone.
    """
    with contextlib.suppress(Exception):  # the store's host is gone: the peers keep their error
        root = job_root(store)
        root.compare_set(failure_key(), "", f"{rank}\n{summary}")
        if world_size > 0:  # one request, whatever the world size
            root.multi_set([wake_key(r) for r in range(world_size)], ["failed"] * world_size)


def read_failure(store: Any) -> tuple[int, str] | None:
    """The ``(rank, summary)`` of the failure note, if one is there."""
    root, key = job_root(store), failure_key()
    try:
        if not root.check([key]):
            return None
        rank, _, summary = root.get(key).decode("utf-8", "replace").partition("\n")
        return int(rank), summary
    except Exception:  # unreachable store or a foreign value under our key
        return None


def leave(rank: int, world_size: int, teardown: Teardown, store: Any) -> None:
    """Tell the peers through ``store`` that this rank leaves the job (``finalize``): as a
    failure when an exception is propagating (other than a clean ``SystemExit``), then
    ``teardown()`` (abort the communicator); else as a normal exit."""
    exc = sys.exc_info()[1]
    if exc is not None and not (isinstance(exc, SystemExit) and exc.code in (None, 0)):
        record_failure(store, rank, summarize(exc), world_size)
        with contextlib.suppress(Exception):
            teardown()
        return
    with contextlib.suppress(Exception):  # the store's host is gone: nobody to tell
        store.set(_LEFT_KEY.format(rank=rank), "1")


def record_for_launcher(exc: BaseException | None) -> None:
    """Under torchrun, where ``exc`` (the error this rank ends with) carries a verdict, write
    it to the rank's error file (``TORCHELASTIC_ERROR_FILE``) with the line naming the rank
    at fault first: torchrun's summary, the last thing it prints, then shows that line. A
    file already there (``@record``'s) is left alone."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    culprit = headline(str(exc)) if exc is not None else None
    if not path or culprit is None or os.path.exists(path):
        return
    said = f"{type(exc).__name__}: {exc}"
    stamp = str(int(time.time()))
    data = {
        "message": said,
        "extraInfo": {"py_callstack": f"{culprit}\n{said}", "timestamp": stamp},
    }
    with contextlib.suppress(OSError), open(path, "w", encoding="utf-8") as out:
        json.dump({"message": data}, out)


@dataclass(frozen=True)
class _FailureHook:
    """``sys.excepthook`` while a native context lives: note the failure, chain on (the
    traceback is shown), then tear the communicator down."""

    rank: int
    world_size: int
    previous: _Hook
    teardown: Teardown
    store_of: Callable[[], Any]

    def __call__(
        self, kind: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> Any:
        record_for_launcher(exc)  # torchrun's summary names the rank at fault
        with contextlib.suppress(Exception):  # no process group any more: nobody to tell
            store = self.store_of()
            if store is not None:
                record_failure(store, self.rank, summarize(exc), self.world_size)
        try:
            return self.previous(kind, exc, tb)
        finally:
            with contextlib.suppress(Exception):
                self.teardown()


def install_excepthook(
    rank: int, world_size: int, teardown: Teardown, store_of: Callable[[], Any]
) -> None:
    """Make an uncaught exception on this rank leave a failure note for its peers (on the
    store ``store_of()`` gives), then call ``teardown()`` (abort the communicator, so that
    peers blocked in a collective fail now even if this process lingers)."""
    uninstall_excepthook()
    sys.excepthook = _FailureHook(rank, world_size, sys.excepthook, teardown, store_of)


def uninstall_excepthook() -> None:
    """Restore the excepthook `install_excepthook` replaced, if it is still in place."""
    hook = sys.excepthook
    if isinstance(hook, _FailureHook):
        sys.excepthook = hook.previous


def stopped(note: tuple[int, str], rank: int, doing: str) -> PeerFailed:
    """The `PeerFailed` of rank ``rank``, which stopped ``doing`` ("in all_reduce") because of
    failure ``note``."""
    failed, summary = note
    return PeerFailed(
        failed,
        summary,
        f"Rank {rank} stopped {doing} because of it; rank {failed}'s own error says why.",
    )


def _peer_failure(
    op: str, err: RuntimeError, owner: ModelContract, together: Together
) -> PeerFailed | None:
    """The `PeerFailed` that explains ``err`` raised by ``op``, or None if nothing does."""
    known = together.known_failure()
    if known is not None:  # read by the watcher, maybe while the store still lived
        return stopped(known, owner.get_rank(), f"in {op}")
    store, me = together.store_of(), owner.get_rank()
    if store is None:
        return None
    note = read_failure(store)
    if note is None:
        others = [rank for rank in range(owner.get_world_size()) if rank != me]
        try:
            gone = next((r for r in others if store.check([_LEFT_KEY.format(rank=r)])), None)
        except Exception:
            gone = None
        if gone is not None:
            return PeerFailed(
                gone,
                f"it left the job (finalize) while rank {me} waited for it in {op}",
                "Every rank must call the same collectives in the same order: look for a "
                f"collective that rank {gone} skips.",
            )
    # a lost peer's note may be on its way (from the watcher, or the store)
    deadline = time.monotonic() + (NOTE_WAIT_SECONDS if _lost_peer(err) else 0.0)
    while note is None and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
        note = together.known_failure() or read_failure(store)
    return None if note is None else stopped(note, me, f"in {op}")


def peer_failure(op: str, err: BaseException, owner: ModelContract) -> BaseException | None:
    """What to raise instead of ``err``, raised by the engine in ``op``: `PeerFailed` naming
    the failed peer, or the backend's error or `CollectiveTimeout` with the hang verdict;
    None when nothing explains it (then ``err`` stands). Aborts this rank's communicator when
    a peer failed, so that the ranks waiting for this one fail too. Only backend errors
    (``RuntimeError``, not distbridge's own) of a model that fails together are looked at."""
    if not isinstance(err, RuntimeError) or isinstance(err, DistributedError):
        return None
    together = owner.together
    if together is None:  # the serial and XLA models
        return None
    peer = _peer_failure(op, err, owner, together)
    failure: BaseException | None = _explained(op, err, together, peer)
    if failure is not None:
        with contextlib.suppress(Exception):
            owner.abort_communicator()
    return failure


class FailureWatch(StoreThread):
    """The failure watcher: waits, without polling, for a failure note of the job on
    ``store``'s root (through a clone), at the wake key of this process's global ``rank``,
    which every note sets (`record_failure`); then keeps the note (named even once the
    store's host is gone) and calls ``on_failure()`` (abort the communicator) once, from its
    thread. A `StoreThread` whose one tick is the blocking wait; `stop` sets the key too."""

    def __init__(self, store: Any, rank: int, on_failure: Callable[[], object]) -> None:
        self._root = job_root(store)  # this rank's connection: wakes the watcher on ``stop``
        # the blocking wait needs a connection of its own: a store client runs one request at
        # a time, so this rank's own store calls must not queue behind it
        super().__init__(self._root, lambda: True, "distbridge-failure-watcher", 0.0, True)
        self._key = wake_key(rank)
        self._on_failure = on_failure
        self.note: tuple[int, str] | None = None
        self._start()

    def _run(self) -> None:
        try:
            self._store.wait([self._key], timedelta(days=3650))  # a timeout prints from C++
            if self._stopped.is_set():
                self._store.delete_key(self._key)
                return
            self.note = read_failure(self._store)
        except Exception:  # the store's host is gone: the job is over
            return
        if self.note is not None:
            with contextlib.suppress(Exception):
                self._on_failure()

    def stop(self) -> None:
        """End the thread (``finalize``, and at exit): wake it without a failure, and wait
        up to a second for it."""
        if self._stopped.is_set() or not self._thread.is_alive():
            return
        super().stop()
        with contextlib.suppress(Exception):
            self._root.set(self._key, "stop")
            self.join(1.0)
