"""Start worker processes, wait for them, and make sure none outlives the call.

``run_workers`` is the engine under ``spawn``. Every worker runs in its own process group,
so stopping a worker also stops whatever it started. The parent waits on the result pipes
and the process sentinels, which SIGINT and SIGTERM interrupt (`_signals`). A failure
(once the others had ``peer_window`` to report, e.g. `PeerFailed`), the job timeout or a
signal stops everything: SIGTERM to each group, ``grace_seconds`` to exit, then SIGKILL.

Each child sends one report (`_worker_reports.Report`) over its own one-way pipe, pickled
with plain ``pickle``: tensors travel by value, nothing depends on the child staying alive.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import functools
import multiprocessing
import numbers
import os
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any, cast

from distbridge.errors import SpawnTimeoutError, suggest
from distbridge.launch._output import OutputPlan, OutputRelay, redirect_output
from distbridge.launch._signals import SignalWatch
from distbridge.launch._worker_reports import (
    Worker,
    death,
    dump_report,
    failure,
    load_report,
    run_reported,
)
from distbridge.launch.pickling import check_main_module
from distbridge.launch.warm_start import (
    check_fork_is_safe,
    die_with_parent,
    fresh_worker_state,
    warm_context,
)
from distbridge.reliability.hang.signals import answer_report_signal

__all__ = [
    "PEER_WINDOW_SECONDS",
    "START_METHODS",
    "VERDICT_SECONDS",
    "ask_for_stacks",
    "check_seconds",
    "check_spawn_options",
    "join_all",
    "kill_workers",
    "positive_int",
    "run_workers",
    "signal_group",
    "timeout_error",
]

#: The multiprocessing start methods ``run_workers`` accepts.
START_METHODS = ("spawn", "fork", "forkserver")

#: After the first failure, how long the other workers (or ranks of a testing world) get to
#: raise PeerFailed themselves before they are stopped.
PEER_WINDOW_SECONDS = 3.0
#: How long workers get to answer for the hang verdict on a job timeout.
VERDICT_SECONDS = 2.0

_TICK_SECONDS = 1.0  # longest wait between checks, so a missed wake-up costs at most this
_STACK_DUMP_SECONDS = 1.0  # time given to workers to print their stacks on a timeout
_EXIT_SLACK_SECONDS = 1.0  # how much longer the parent waits than a worker's own exit watchdog


def positive_int(name: str, value: object) -> int:
    """``value``, a spawn option that must be an int >= 1."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}.")
    return value


def check_seconds(name: str, value: object, *, zero: bool = False, none: bool = False) -> None:
    """ValueError unless ``value`` is a number of seconds > 0 (>= 0 with ``zero``), or None
    with ``none``."""
    if value is None and none:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not (float(value) >= 0 if zero else float(value) > 0)
    ):
        bound = ">= 0" if zero else "> 0"
        alternative = " or None" if none else ""
        raise ValueError(f"{name} must be a number of seconds {bound}{alternative}, got {value!r}.")


def check_spawn_options(start_method: str, join: bool = True) -> None:
    """The checks of spawn's ``start_method`` and ``join`` for the backends started here."""
    if start_method not in START_METHODS:
        allowed = ", ".join(repr(m) for m in START_METHODS)
        raise ValueError(
            f"Unknown start_method {start_method!r}. Allowed: {allowed}."
            + suggest(str(start_method), START_METHODS)
        )
    if join is not True:
        raise ValueError(
            "join=False is not supported: spawn supervises its workers until they end."
        )


def run_workers(
    target: Callable[[int], Any],
    nprocs: int,
    *,
    rank_offset: int = 0,
    start_method: str = "forkserver",
    job_timeout: float | None = None,
    grace_seconds: float = 3.0,
    peer_window: float = 0.0,
    on_death: Callable[[int, str], None] | None = None,
    output: OutputPlan | None = None,
    explain: Callable[[float], str | None] | None = None,
) -> list[Any]:
    """Run ``target(i)`` in ``nprocs`` child processes and return their results in order;
    every worker is stopped (and reaped) before it returns or raises.

    ``target`` must pickle unless ``start_method`` is "fork" ("forkserver": a fork of the
    warm starter, see `warm_start`; "spawn": a fresh interpreter). Child ``i`` has the global
    rank ``rank_offset + i`` (for messages). ``job_timeout``: seconds for the whole job (None:
    no limit). ``grace_seconds``: how long a stopped worker gets between SIGTERM and SIGKILL,
    and a worker that reported gets to exit. ``on_death(rank, note)``: called for a worker
    that died without a report ("its process was killed by signal SIGKILL"). ``output``: the
    streams relayed through the parent (see `_output`; None: raw). ``explain(wait)``: the
    hang verdict from the workers' ledgers, or None, added to the error of a failure or of
    the job timeout; it must not raise.

    Raises `WorkerFailedError` naming the first worker that failed by itself (with what the
    others reported), `SpawnTimeoutError` past ``job_timeout`` (the stacks are in stderr),
    KeyboardInterrupt or SystemExit (exit code 143) when the parent gets SIGINT or SIGTERM.
    """
    positive_int("nprocs", nprocs)
    if isinstance(rank_offset, bool) or not isinstance(rank_offset, int) or rank_offset < 0:
        raise ValueError(f"rank_offset must be an int >= 0, got {rank_offset!r}.")
    check_spawn_options(start_method)
    if start_method == "fork":
        check_fork_is_safe()
    check_seconds("job_timeout", job_timeout, none=True)
    check_seconds("grace_seconds", grace_seconds, zero=True)
    check_seconds("peer_window", peer_window, zero=True)
    check_main_module(start_method)
    exit_seconds = max(grace_seconds, 1.0)
    # typeshed declares Process only on the concrete contexts, not on BaseContext.
    context: SpawnContext | ForkContext | ForkServerContext
    if start_method == "forkserver":
        context = warm_context()
    else:
        context = cast("SpawnContext | ForkContext", multiprocessing.get_context(start_method))
    # A fork of the server has the environment of the server's start: send today's.
    environ = dict(os.environ) if start_method == "forkserver" else None
    deadline = None if job_timeout is None else time.monotonic() + job_timeout
    workers: list[Worker] = []
    results: list[Any] | None = None
    relay = OutputRelay(output or OutputPlan())
    with SignalWatch(workers) as signals:
        try:
            for index in range(nprocs):
                receiver, sender = context.Pipe(duplex=False)
                streams = relay.pipes(rank_offset + index, context.Pipe)
                if start_method == "forkserver":  # our stdout and stderr of now, not the server's
                    streams = {**_current_streams(), **streams}
                process = context.Process(
                    target=_worker_main,
                    args=(target, index, sender, exit_seconds, streams, environ, signals.reports),
                    name=f"distbridge-worker-{rank_offset + index}",
                )
                workers.append(Worker(index, rank_offset + index, process, receiver))
                try:
                    process.start()
                finally:
                    for end in (sender, *streams.values()):
                        end.close()  # the child has its copy; EOF must not wait for ours
            relay.start()
            results = _supervise(
                workers, signals, deadline, job_timeout, peer_window, on_death, explain
            )
        finally:
            try:
                _shutdown(workers, grace_seconds, exit_seconds, let_finish=results is not None)
            finally:
                relay.close()  # the workers' last lines come before the error or the result
        signals.raise_if_received()  # a signal that came while the workers were exiting
    return results


def _current_streams() -> dict[int, Connection]:
    """This process's stdout and stderr as they are now (pytest, a notebook and ``exec >``
    swap them), for a worker forked from the warm starter."""
    streams = {}
    for fd in (1, 2):
        with contextlib.suppress(OSError):  # closed: the worker keeps the server's
            streams[fd] = Connection(os.dup(fd))
    return streams


def _worker_main(
    target: Callable[[int], Any],
    index: int,
    conn: Connection,
    exit_seconds: float,
    streams: dict[int, Connection],
    environ: dict[str, str] | None,
    reports: str,
) -> None:
    """Entry point of every child: set up, run ``target(index)``, send one report, and make
    sure the process ends within ``exit_seconds`` even if an ``atexit`` handler hangs.
    ``streams``: pipes to the parent's output relay, by file descriptor (1, 2); ``environ``:
    the parent's environment variables, for a child forked from the warm starter; SIGUSR2
    writes this worker's report to folder ``reports`` (see `reliability.hang.signals`)."""
    answer_report_signal(index, reports)  # first thing: SIGUSR2 must not end the worker
    die_with_parent()
    if environ is not None:  # forked from the warm starter
        fresh_worker_state(environ)
    redirect_output(streams)
    os.setpgrp()  # own process group: the parent stops us together with what we start
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # "fork" children inherit the parent's
    signal.signal(signal.SIGINT, signal.default_int_handler)
    conn.send_bytes(dump_report(run_reported(functools.partial(target, index))))
    conn.close()
    # A watchdog thread in C: it needs no GIL, so it also ends a destructor that hangs while
    # the interpreter shuts down, after printing every thread's stack.
    faulthandler.dump_traceback_later(exit_seconds, exit=True)
    if environ is not None:  # forked from the warm starter: multiprocessing ends a forked
        atexit._run_exitfuncs()  # child without its atexit handlers; "spawn" runs them


def _supervise(
    workers: list[Worker],
    signals: SignalWatch,
    deadline: float | None,
    job_timeout: float | None,
    peer_window: float,
    on_death: Callable[[int, str], None] | None,
    explain: Callable[[float], str | None] | None,
) -> list[Any]:
    """Wait until every worker reported ok. After the first failure, wait up to
    ``peer_window`` seconds more for the others' reports, then raise; raise at once on the
    job timeout (``deadline``) or a signal."""
    verdict = explain or (lambda wait: None)
    running = list(workers)
    failed: list[Worker] = []
    window_end: float | None = None
    while running:
        signals.raise_if_received()
        end = deadline if window_end is None else window_end  # the window ends the job first
        left = _TICK_SECONDS if end is None else end - time.monotonic()
        if left <= 0 and window_end is not None:
            break
        if left <= 0:
            _raise_timeout(running, job_timeout, verdict(VERDICT_SECONDS))
        _wait(running, signals, min(left, _TICK_SECONDS))
        for worker in list(running):
            # The exit code before the report: a worker that exited has sent all it will, so
            # one that reported and exited is never mistaken for one that died without a word.
            exited = worker.process.exitcode is not None
            _receive(worker)
            if worker.report is None and not exited:
                continue
            running.remove(worker)
            if worker.report is None:
                failed.append(worker)
                if on_death is not None:
                    on_death(worker.rank, f"its process {death(worker.process.exitcode)}")
            elif worker.report[0] != "ok":
                failed.append(worker)
        if failed and window_end is None:
            window_end = time.monotonic() + peer_window
    if failed:  # the ledgers the workers published: the ones still running may be stuck
        raise failure(failed, workers, verdict(0.0))
    return [worker.report[1] for worker in workers if worker.report is not None]


def _wait(running: list[Worker], signals: SignalWatch, timeout: float) -> None:
    """Block until a report or an exit arrives, or ``timeout`` passes; a signal raises."""
    watched: list[Any] = [w.process.sentinel for w in running]
    watched += [w.conn for w in running if not w.conn.closed]
    signals.waiting = True
    try:
        wait(watched, timeout)
    finally:
        signals.waiting = False


def _receive(worker: Worker) -> None:
    if worker.report is not None or worker.conn.closed or not worker.conn.poll(0):
        return
    try:
        worker.report = load_report(worker.conn.recv_bytes())
    except EOFError:  # closed without a report; the exit code tells the rest
        worker.conn.close()


def _raise_timeout(running: list[Worker], job_timeout: float | None, verdict: str | None) -> None:
    # One worker at a time, so that the stacks faulthandler writes do not interleave.
    for worker in running:
        print(f"distbridge: Python stacks of {worker.describe()}:", file=sys.stderr, flush=True)
        ask_for_stacks(worker)
        time.sleep(_STACK_DUMP_SECONDS / len(running))
    ranks = ", ".join(str(worker.rank) for worker in running)
    still = f"ranks {ranks} were" if len(running) > 1 else f"rank {ranks} was"
    raise timeout_error(job_timeout, f"{still} still running and stopped", verdict)


def ask_for_stacks(worker: Worker) -> None:
    """SIGUSR1 to a started worker: it writes every thread's Python stack to its stderr."""
    if worker.process.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.process.pid, signal.SIGUSR1)


def timeout_error(
    job_timeout: float | None, stopped: str, verdict: str | None = None
) -> SpawnTimeoutError:
    """The error of a job that ran past ``job_timeout``; ``stopped`` says which workers were."""
    why = "" if not verdict else f"\n\nWhy, from every rank's collective ledger:\n{verdict}"
    return SpawnTimeoutError(
        f"The job ran past its job_timeout of {job_timeout} s; {stopped} (their Python stacks "
        "are in stderr above). Raise job_timeout, or look at those stacks for the place where "
        f"they hang.{why}"
    )


def _shutdown(
    workers: list[Worker], grace_seconds: float, exit_seconds: float, *, let_finish: bool
) -> None:
    """Stop and reap every worker and its process group; never raises for dead processes."""
    if let_finish:  # every worker reported ok: let them exit on their own (or by watchdog)
        join_all(workers, exit_seconds + _EXIT_SLACK_SECONDS)
    for worker in workers:
        signal_group(worker.process, signal.SIGTERM)
    join_all(workers, grace_seconds)
    kill_workers(workers)


def kill_workers(workers: list[Worker]) -> None:
    """SIGKILL each worker's process group, reap the workers and close their pipes."""
    for worker in workers:
        signal_group(worker.process, signal.SIGKILL)  # also reaches what a worker left behind
        if worker.process.pid is not None:
            worker.process.join()
        worker.conn.close()


def join_all(workers: list[Worker], timeout: float) -> None:
    """Wait up to ``timeout`` seconds in all for the started workers to exit."""
    deadline = time.monotonic() + timeout
    for worker in workers:
        if worker.process.pid is not None:
            worker.process.join(max(0.0, deadline - time.monotonic()))


def signal_group(process: BaseProcess, signum: int) -> None:
    """Send ``signum`` to a started worker's process group, and to the worker itself while it
    is not in it (not yet, or it left)."""
    if process.pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
    if process.exitcode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, signum)
