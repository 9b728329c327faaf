"""Start worker processes, wait for them, and make sure none outlives the call.

``run_workers`` is the engine under ``spawn``. Every worker runs in its own process group,
so stopping a worker also stops whatever it started. The parent waits on the result pipes,
the process sentinels and a self-pipe written by its SIGINT/SIGTERM handlers; the first
failure, the job timeout or a signal stops everything: SIGTERM to each group,
``grace_seconds`` to exit, then SIGKILL.

Each child sends one report over its own one-way pipe, pickled with plain ``pickle`` (so
tensors travel by value and nothing depends on the child staying alive): ``("ok", value)``
or ``("error", traceback, exception_type_name, message)``.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import multiprocessing
import os
import pickle
import reprlib
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, cast

from distbridge.errors import SpawnTimeoutError, WorkerFailedError, suggest

__all__ = ["START_METHODS", "run_workers"]

_REPR = reprlib.Repr()  # repr() shortened for messages
_REPR.maxother = _REPR.maxstring = 160

#: The multiprocessing start methods ``run_workers`` accepts.
START_METHODS = ("spawn", "fork", "forkserver")

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_TICK_SECONDS = 1.0  # longest wait between checks, so a missed wake-up costs at most this
_STACK_DUMP_SECONDS = 1.0  # time given to workers to print their stacks on a timeout

Report = tuple[Any, ...]


def run_workers(
    target: Callable[[int], Any],
    nprocs: int,
    *,
    rank_offset: int = 0,
    start_method: str = "spawn",
    job_timeout: float | None = None,
    grace_seconds: float = 3.0,
) -> list[Any]:
    """Run ``target(i)`` in ``nprocs`` child processes and return their results in order.

    Args:
        target: called as ``target(local_index)`` in each child; must be picklable unless
            ``start_method`` is "fork" (see :func:`distbridge.launch.pickling.check_picklable`).
        nprocs: how many processes to start.
        rank_offset: the global rank of child ``i`` is ``rank_offset + i`` (used in messages).
        start_method: "spawn", "fork" or "forkserver".
        job_timeout: seconds the whole job may take; None means no limit.
        grace_seconds: how long a stopped worker gets between SIGTERM and SIGKILL.

    Returns:
        The return values of ``target``, indexed by local rank.

    Raises:
        ValueError: an argument is out of range.
        WorkerFailedError: a worker raised, exited without a result, exited with a non-zero
            code or was killed by a signal. The other workers were stopped first.
        SpawnTimeoutError: ``job_timeout`` passed; the workers' Python stacks were written to
            their stderr and every worker was stopped.
        KeyboardInterrupt: the parent got SIGINT; every worker was stopped.
        SystemExit: the parent got SIGTERM (exit code 143); every worker was stopped.

    Note:
        On Linux the children are SIGKILLed by the kernel if the thread that started them
        dies, so a worker cannot outlive a parent that was killed with SIGKILL either.
    """
    _validate(nprocs, rank_offset, start_method, job_timeout, grace_seconds)
    # typeshed declares Process only on the concrete contexts, not on BaseContext.
    context = cast(
        "SpawnContext | ForkContext | ForkServerContext", multiprocessing.get_context(start_method)
    )
    deadline = None if job_timeout is None else time.monotonic() + job_timeout
    workers: list[_Worker] = []
    results: list[Any] | None = None
    with _SignalWatch() as signals:
        try:
            for index in range(nprocs):
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(
                    target=_worker_main,
                    args=(target, index, sender),
                    name=f"distbridge-worker-{rank_offset + index}",
                )
                workers.append(_Worker(index, rank_offset + index, process, receiver))
                try:
                    process.start()
                finally:
                    sender.close()  # the child has its copy; EOF must not wait for ours
            results = _supervise(workers, signals, deadline, job_timeout)
        finally:
            _shutdown(workers, grace_seconds, let_finish=results is not None)
        signals.raise_if_received()  # a signal that came while the workers were exiting
    return results


@dataclass
class _Worker:
    index: int
    rank: int
    process: BaseProcess
    conn: Connection
    report: Report | None = None
    conn_closed: bool = False  # the pipe hit EOF without a report

    def describe(self) -> str:
        return f"Worker rank {self.rank} (local rank {self.index}, pid {self.process.pid})"


def _validate(
    nprocs: int, rank_offset: int, start_method: str, job_timeout: float | None, grace: float
) -> None:
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be an integer >= 1, got {nprocs!r}.")
    if isinstance(rank_offset, bool) or not isinstance(rank_offset, int) or rank_offset < 0:
        raise ValueError(f"rank_offset must be an integer >= 0, got {rank_offset!r}.")
    if start_method not in START_METHODS:
        allowed = ", ".join(repr(m) for m in START_METHODS)
        raise ValueError(
            f"Unknown start_method {start_method!r}. Allowed: {allowed}."
            + suggest(str(start_method), START_METHODS)
        )
    if job_timeout is not None and not job_timeout > 0:
        raise ValueError(
            f"job_timeout must be a number of seconds > 0 or None, got {job_timeout!r}."
        )
    if not grace >= 0:
        raise ValueError(f"grace_seconds must be a number of seconds >= 0, got {grace!r}.")


def _worker_main(target: Callable[[int], Any], index: int, conn: Connection) -> None:
    """Entry point of every child: set up, run ``target(index)``, send one report."""
    os.setpgrp()  # own process group: the parent stops us together with what we start
    _die_with_parent()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # "fork" children inherit the parent's
    signal.signal(signal.SIGINT, signal.default_int_handler)
    report: Report
    try:
        report = ("ok", target(index))
    except SystemExit as exc:
        report = ("ok", None) if exc.code in (None, 0) else _error_report(exc)
    except BaseException as exc:
        report = _error_report(exc)
    try:
        payload = pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        message = (
            f"its return value {_REPR.repr(report[1])} cannot be pickled to send it to the "
            f"parent ({type(exc).__name__}: {exc}). Return picklable values such as numbers, "
            "strings, tensors and containers of these"
        )
        payload = pickle.dumps(("error", traceback.format_exc(), "PicklingError", message))
    conn.send_bytes(payload)
    conn.close()


def _error_report(exc: BaseException) -> Report:
    try:
        message = str(exc)
    except Exception:
        message = "<str() of the exception failed>"
    return ("error", traceback.format_exc(), type(exc).__name__, message)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the thread that started it dies."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _supervise(
    workers: list[_Worker],
    signals: _SignalWatch,
    deadline: float | None,
    job_timeout: float | None,
) -> list[Any]:
    """Wait until every worker reported ok; raise on the first failure, timeout or signal."""
    running = list(workers)
    while running:
        signals.raise_if_received()
        timeout = _TICK_SECONDS
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
            if timeout <= 0:
                _raise_timeout(running, job_timeout)
        watched: list[Any] = [signals.fd]
        for worker in running:
            watched.append(worker.process.sentinel)
            if not worker.conn_closed:
                watched.append(worker.conn)
        ready = set(wait(watched, timeout))
        if signals.fd in ready:
            signals.drain()
        for worker in list(running):
            # Read a report before looking at the exit code: a worker that reported and
            # exited must not be mistaken for one that died without a report.
            if worker.conn in ready or worker.process.exitcode is not None:
                _receive(worker)
            if worker.report is not None:
                if worker.report[0] != "ok":
                    raise _failure(worker)
                running.remove(worker)
            elif worker.process.exitcode is not None:
                raise _failure(worker)
    return [worker.report[1] for worker in workers if worker.report is not None]


def _receive(worker: _Worker) -> None:
    if worker.report is not None or worker.conn_closed or not worker.conn.poll(0):
        return
    try:
        worker.report = pickle.loads(worker.conn.recv_bytes())
    except EOFError:  # closed without a report; the exit code tells the rest
        worker.conn_closed = True
    except Exception as exc:
        worker.report = ("error", "", "PicklingError", f"its result could not be unpickled: {exc}")


def _failure(worker: _Worker) -> WorkerFailedError:
    stopped = "The other workers were stopped."
    if worker.report is not None:
        _, worker_traceback, type_name, message = worker.report
        raised = f"{type_name}: {message}" if message else type_name
        return WorkerFailedError(
            f"{worker.describe()} raised {raised}. {stopped}\n\n"
            f"Traceback of rank {worker.rank}:\n{worker_traceback}",
            rank=worker.rank,
            local_rank=worker.index,
            exitcode=None,
            worker_traceback=worker_traceback,
        )
    exitcode = worker.process.exitcode or 0
    if exitcode < 0:
        try:
            what = f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            what = f"was killed by signal number {-exitcode}"
    elif exitcode > 0:
        what = f"exited with code {exitcode}"
    else:
        what = "exited without reporting a result (exit code 0, e.g. after os._exit(0))"
    return WorkerFailedError(
        f"{worker.describe()} {what}. {stopped}",
        rank=worker.rank,
        local_rank=worker.index,
        exitcode=exitcode,
    )


def _raise_timeout(running: list[_Worker], job_timeout: float | None) -> None:
    # One worker at a time, so that the stacks faulthandler writes do not interleave.
    for worker in running:
        print(f"distbridge: Python stacks of {worker.describe()}:", file=sys.stderr, flush=True)
        if worker.process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.process.pid, signal.SIGUSR1)
        time.sleep(_STACK_DUMP_SECONDS / len(running))
    ranks = ", ".join(str(worker.rank) for worker in running)
    still = f"ranks {ranks} were" if len(running) > 1 else f"rank {ranks} was"
    raise SpawnTimeoutError(
        f"The job ran past its job_timeout of {job_timeout} s; {still} still running and "
        "stopped (their Python stacks are in stderr above). Raise job_timeout, or look at "
        "those stacks for the place where they hang."
    )


def _shutdown(workers: list[_Worker], grace_seconds: float, *, let_finish: bool) -> None:
    """Stop and reap every worker and its process group; never raises for dead processes."""
    if let_finish:  # every worker reported ok: let them exit on their own first
        _join_all(workers, grace_seconds)
    _signal_groups(workers, signal.SIGTERM)
    _join_all(workers, grace_seconds)
    _signal_groups(workers, signal.SIGKILL)  # also reaches what a worker left behind
    for worker in workers:
        if worker.process.pid is not None:
            worker.process.join()
        worker.conn.close()


def _join_all(workers: list[_Worker], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for worker in workers:
        if worker.process.pid is not None:
            worker.process.join(max(0.0, deadline - time.monotonic()))


def _signal_groups(workers: list[_Worker], signum: signal.Signals) -> None:
    for worker in workers:
        pid = worker.process.pid
        if pid is None:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)
        if worker.process.exitcode is None:  # not in its group yet, or it left it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


class _SignalWatch:
    """Turn SIGINT/SIGTERM into a readable file descriptor while workers are supervised.

    Handlers are installed only in the main thread (Python allows no other), and the
    previous ones are restored on exit. A signal that was ignored stays ignored.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[signal.Signals, Any] = {}
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)

    def __enter__(self) -> _SignalWatch:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous = signal.getsignal(signum)
                if previous is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        os.close(self.fd)
        os.close(self._write_fd)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"\0")

    def drain(self) -> None:
        with contextlib.suppress(OSError):  # nothing to read: another wake-up drained it
            os.read(self.fd, 4096)

    def raise_if_received(self) -> None:
        if self.received == signal.SIGINT:
            raise KeyboardInterrupt
        if self.received is not None:
            raise SystemExit(128 + self.received)
