"""The parent's signals while it supervises workers: SIGINT and SIGTERM become something a
supervisor loop can wait on; SIGUSR2, the report signal, is passed on to the workers (each
writes its hang report and goes on, see `distbridge.reliability.hang.signals`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

from distbridge.launch._worker_reports import Worker
from distbridge.reliability.hang.job_cards import descends_from, prune_cards, remove_cards
from distbridge.reliability.hang.signals import DUMP_SIGNAL, report_dir

__all__ = ["SignalWatch", "handlers_kept", "leave_pid", "passing_on", "pids_left", "running_pids"]


class SignalWatch:
    """Turn SIGINT/SIGTERM into KeyboardInterrupt/SystemExit(128 + N) while workers are
    supervised: at once while the supervisor is ``waiting``, else at its next
    `raise_if_received` (so a shutdown under way completes). Pass SIGUSR2 on to ``workers``
    (a list filled as they start), whose reports go to `reports` (`report_dir` of this
    process). On exit the previous handlers come back and the workers' job cards go, with
    those of processes that are gone.

    Handlers are installed only in the main thread (Python allows no other). A signal that
    was ignored stays ignored.
    """

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.received: int | None = None
        self.waiting = False
        self.workers = workers
        self.reports = report_dir(os.getpid())
        self._kept = contextlib.ExitStack()  # the handlers to put back, last first

    def __enter__(self) -> SignalWatch:
        prune_cards()
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._kept.enter_context(handlers_kept(signum))
                    signal.signal(signum, self._handle)
        self._kept.enter_context(passing_on(lambda: running_pids(self.workers), self.reports))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._kept.close()
        remove_cards(w.process.pid for w in self.workers if w.process.pid is not None)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if self.waiting:
            self.raise_if_received()

    def raise_if_received(self) -> None:
        if self.received == signal.SIGINT:
            raise KeyboardInterrupt
        if self.received is not None:
            raise SystemExit(128 + self.received)


def running_pids(workers: Sequence[Worker]) -> dict[int, int]:
    """The pids of the started workers still running, by rank."""
    running = [w for w in workers if w.process.exitcode is None]
    return {w.rank: w.process.pid for w in running if w.process.pid is not None}


@contextlib.contextmanager
def passing_on(ranks: Callable[[], Mapping[int, int]], reports: str) -> Iterator[None]:
    """While the block runs, SIGUSR2 goes on to the processes of ``ranks()`` (``{rank:
    pid}``), whose reports go to folder ``reports``; then the handler that was there (a
    Python one is also called). Nothing without ``reports``, outside the main thread, or
    where SIGUSR2 is ignored."""
    main = threading.current_thread() is threading.main_thread()
    if not reports or not main or signal.getsignal(DUMP_SIGNAL) is signal.SIG_IGN:
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        _pass_on(ranks(), reports)
        if callable(previous):  # another feature's handler (a stop request): chained
            previous(signum, frame)

    with handlers_kept(DUMP_SIGNAL):
        previous = signal.signal(DUMP_SIGNAL, handle)
        yield


@contextlib.contextmanager
def handlers_kept(*signums: int) -> Iterator[None]:
    """The handlers of ``signums`` come back as they are now once the block ends."""
    saved = {signum: signal.getsignal(signum) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def _pass_on(pids: Mapping[int, int], reports: str) -> None:
    """Send SIGUSR2 to the ranks' processes (``{rank: pid}``), and say where they write."""
    asked = []
    for rank, pid in sorted(pids.items()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, DUMP_SIGNAL)
            asked.append(str(rank))
    ranks = f"rank{'s' if len(asked) > 1 else ''} {', '.join(asked)}" if asked else "no rank"
    line = (
        f"distbridge: got SIGUSR2, passed on to {ranks}: "
        f"each writes its hang report to {reports} and goes on; the verdict: python -m "
        f"distbridge why {reports}\n"
    )
    try:
        print(line, end="", file=sys.stderr, flush=True)
    except (RuntimeError, OSError, ValueError):  # stderr busy in this very thread: raw write
        with contextlib.suppress(OSError):
            os.write(2, line.encode())


def leave_pid(folder: str, rank: int) -> None:
    """In a worker whose pid its parent does not know (Horovod's, an XLA pool's replica):
    leave it in the parent's temporary ``folder`` (``.pid-rank<r>``) for `pids_left`; not
    on another machine, where there is no such folder."""
    with contextlib.suppress(OSError):
        Path(folder, f".pid-rank{rank}").write_text(str(os.getpid()), encoding="utf-8")


def pids_left(folder: str) -> dict[int, int]:
    """The workers of this process that left their pid in ``folder``, by rank (one that is
    not a process below this one is passed over)."""
    pids = {}
    with contextlib.suppress(OSError):
        for path in Path(folder).glob(".pid-rank*"):
            rank = path.name.removeprefix(".pid-rank")
            with contextlib.suppress(OSError, ValueError):
                pid = int(path.read_text(encoding="utf-8"))
                if rank.isdigit() and descends_from(pid, os.getpid()):
                    pids[int(rank)] = pid
    return pids
