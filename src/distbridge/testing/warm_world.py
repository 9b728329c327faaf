"""A warm world: ranks that start once and run many test functions, one after another.

``WarmWorld(nproc, backend)`` starts ``nproc`` processes ("spawn") that join one
torch.distributed job, kept up between tests. ``run(fn, kwargs)`` has every rank import
``fn``'s module (once) and call ``fn(**kwargs)``; each answers passed, or its traceback.

A rank that raises fails together (`_worker`): its peers raise `PeerFailed` and get
``PEER_WINDOW_SECONDS`` to answer. The ranks still running past the timeout (or that
window) write their Python stacks to their logs for the `WorldRun` report, which at the
timeout also gives the hang verdict from the ranks' collective ledgers. After any failure
the world is stopped and the next ``run`` starts a fresh one. SIGUSR2 to the parent while a
test runs is passed on to the ranks, which write their hang reports and go on.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from distbridge._registry import registry
from distbridge.errors import DistributedError, suggest
from distbridge.launch._signals import passing_on, running_pids
from distbridge.launch._worker_reports import Worker, death
from distbridge.launch.native import host_store, job_env, job_verdict
from distbridge.launch.pickling import check_main_module
from distbridge.launch.supervisor import (
    PEER_WINDOW_SECONDS,
    VERDICT_SECONDS,
    ask_for_stacks,
    check_seconds,
    join_all,
    kill_workers,
    positive_int,
)
from distbridge.reliability.fail_together import record_failure
from distbridge.reliability.hang.signals import report_dir
from distbridge.testing._report import RanksFailedError, WorldRun
from distbridge.testing._worker import Outcome, make_task, serve

__all__ = ["RanksFailedError", "WarmWorld", "WorldPool", "WorldRun"]

_STACK_SECONDS = 2.0  # longest wait for the stopped ranks' stacks
_GRACE_SECONDS = 2.0  # how long ranks told to stop get before SIGKILL
_LIVE_SECONDS = 0.05  # how often the logs are read when a test's output is shown live
_OPTIONS = ("nproc", "backend", "timeout", "debug")


def kill_ranks(members: list[Worker], folder: str) -> None:
    """SIGKILL each rank's process group, reap the ranks, remove their logs."""
    kill_workers(members)
    members.clear()
    shutil.rmtree(folder, ignore_errors=True)


def log_size(path: Path) -> int:
    """The size of a rank's log (0 before it exists)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_log(path: Path, start: int) -> str:
    """What a rank wrote to its log from byte ``start`` on."""
    return _read_bytes(path, start).decode("utf-8", errors="replace")


def _read_bytes(path: Path, start: int) -> bytes:
    try:
        with path.open("rb") as log:
            log.seek(start)
            return log.read()
    except OSError:
        return b""


class LogTail:
    """Follows the ranks' logs from given offsets and hands on each complete line, as
    ``on_line(rank, line)`` (without its newline), while a test runs."""

    def __init__(
        self, logs: list[Path], offsets: list[int], on_line: Callable[[int, str], Any]
    ) -> None:
        self._logs, self._offsets, self._on_line = logs, list(offsets), on_line
        self._partial = [b""] * len(logs)

    def poll(self) -> None:
        """Hand on the lines completed since the last call."""
        for rank, path in enumerate(self._logs):
            data = _read_bytes(path, self._offsets[rank])
            self._offsets[rank] += len(data)
            *lines, self._partial[rank] = (self._partial[rank] + data).split(b"\n")
            for line in lines:
                self._on_line(rank, line.decode("utf-8", errors="replace"))

    def finish(self) -> None:
        """Hand on what is left, an unfinished last line included."""
        self.poll()
        for rank, rest in enumerate(self._partial):
            if rest:
                self._on_line(rank, rest.decode("utf-8", errors="replace"))
                self._partial[rank] = b""


class WarmWorld:
    """``nproc`` ranks of ``backend`` that stay up between `run` calls.

    ``backend`` is a torch.distributed backend ("gloo"; "nccl" with a GPU per rank), or None
    for one serial rank (no process group). ``debug`` runs the ranks in distbridge's debug
    mode; ``start_timeout`` is the seconds they get to start and join.
    """

    def __init__(
        self,
        nproc: int = 2,
        backend: str | None = "gloo",
        *,
        debug: bool = False,
        start_timeout: float = 120.0,
    ) -> None:
        positive_int("nproc", nproc)
        check_seconds("start_timeout", start_timeout)
        if backend is None and nproc != 1:
            raise ValueError(
                f"backend=None runs serially, on one rank; got nproc={nproc}. Pass nproc=1, "
                "or a backend such as 'gloo'."
            )
        if backend is not None and registry.for_backend(backend).name != "native-dist":
            raise ValueError(
                f"A warm world runs torch.distributed backends (gloo, nccl), not {backend!r}: "
                "test Horovod and XLA code with distbridge.testing.run_distributed."
            )
        if not isinstance(debug, bool):
            raise TypeError(f"debug must be True or False, got {debug!r}.")
        self.nproc, self.backend, self.debug = nproc, backend, debug
        self.start_timeout = start_timeout
        self._members: list[Worker] = []  # the ranks, in rank order
        self._logs: list[Path] = []  # where each rank writes its stdout and stderr
        self._store: Any = None
        self._stop: Callable[[], Any] | None = None
        self._reports = ""  # where the ranks write their reports on SIGUSR2
        self._tasks = 0

    def __repr__(self) -> str:
        return f"WarmWorld({self.describe()}, {'up' if self.alive else 'down'})"

    def describe(self) -> str:
        """The world in words: "2 gloo ranks", "1 serial rank"."""
        kind = self.backend or "serial"
        return f"{self.nproc} {kind} rank{'s' if self.nproc > 1 else ''}"

    @property
    def alive(self) -> bool:
        """Whether the ranks are up."""
        return bool(self._members)

    def __enter__(self) -> WarmWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the ranks and wait until each joined (a no-op while they are up); a rank
        that fails or does not join within ``start_timeout`` raises `DistributedError` with
        its traceback or output, and nothing is left running."""
        if self._members:
            return
        check_main_module("spawn")
        context = multiprocessing.get_context("spawn")
        folder = tempfile.mkdtemp(prefix="distbridge-world-")
        self._reports = report_dir(Path(folder).name)
        members: list[Worker] = []
        self._stop = weakref.finalize(self, kill_ranks, members, folder)
        env: dict[str, str] = {}  # spawn's, with the world's store (none when serial)
        if self.backend is not None:
            self._store = host_store(0, self.nproc, 300, host="127.0.0.1")
            env = job_env(self.nproc, port=self._store.port)
        self._logs = [Path(folder, f"rank{rank}.log") for rank in range(self.nproc)]
        for rank, log in enumerate(self._logs):
            rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            parent_end, child_end = context.Pipe()
            how = (self.backend, rank_env, str(log), self.debug)
            process = context.Process(
                target=serve, args=(rank, child_end, *how), name=f"distbridge-world-rank{rank}"
            )
            members.append(Worker(rank, rank, process, parent_end))
            process.start()
            child_end.close()
        self._members = members
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        for rank, member in enumerate(self._members):
            message: Any = None
            with contextlib.suppress(EOFError, OSError):
                if member.conn.poll(max(0.0, deadline - time.monotonic())):
                    message = member.conn.recv()
            if message == "ready":
                continue
            why = message or "it did not answer"  # or the traceback it sent
            output = read_log(self._logs[rank], 0)[-3000:]
            self.close()
            raise DistributedError(
                f"The warm world of {self.describe()} did not start: rank {rank} failed to "
                f"join within {self.start_timeout:g} s.\n{why}\nIts output:\n{output}"
            )

    def run(
        self,
        fn: Callable[..., Any],
        kwargs: Mapping[str, Any] | None = None,
        *,
        timeout: float = 60.0,
        on_output: Callable[[int, str], Any] | None = None,
    ) -> WorldRun:
        """Call ``fn(**kwargs)`` on every rank (starting the world if it is down).

        ``fn`` must be a top-level function of a module file; ``kwargs`` must pickle. The
        result says how each rank did (`WorldRun.check` raises `RanksFailedError`). After a
        failure or a timeout the world is stopped; the next call starts a fresh one.
        ``on_output(rank, line)``, when given, receives each line a rank prints while the
        test runs (the logs are read every ``_LIVE_SECONDS``).
        """
        check_seconds("timeout", timeout)
        self._tasks += 1
        task = make_task(self._tasks, fn, kwargs)
        self.start()
        logs = self._logs
        offsets = [log_size(log) for log in logs]
        tail = None if on_output is None else LogTail(logs, offsets, on_output)
        try:
            for member in self._members:
                with contextlib.suppress(OSError):  # a dead rank shows as such below
                    member.conn.send(task)
            with passing_on(lambda: running_pids(self._members), self._reports):
                outcomes, stopped, timed_out = self._collect(task.task_id, timeout, tail)
        except BaseException:  # KeyboardInterrupt, pytest-timeout: the ranks' state is unknown
            self.close(graceful=False)
            raise
        finally:
            if tail is not None:
                tail.finish()
        result = WorldRun(task.function, self.describe(), outcomes, stopped, timeout, timed_out)
        result.path = task.path
        if timed_out and self._store is not None:  # the hang verdict from the ranks' ledgers
            result.verdict = job_verdict(self._store, self.nproc, VERDICT_SECONDS) or ""
        result.outputs = {rank: read_log(log, offsets[rank]) for rank, log in enumerate(logs)}
        result.stacks = self._stacks(stopped)  # after the outputs: the stacks go to the logs
        ended = all((o.passed or o.skipped) and o.world_kept for o in outcomes)
        result.replaced = bool(stopped) or not ended
        if result.replaced:
            self.close(graceful=False)
        return result

    def _collect(
        self, task_id: int, timeout: float, tail: LogTail | None
    ) -> tuple[list[Outcome], list[int], bool]:
        """Wait for every rank's outcome until the timeout, or the peer window after the
        first failure (or skip); returns the outcomes, the ranks still running, and whether
        the timeout (not a failure) stopped the wait. ``tail`` is polled while waiting."""
        pending = dict(enumerate(self._members))
        outcomes: list[Outcome] = []
        deadline, window_end = time.monotonic() + timeout, None
        while pending:
            end = deadline if window_end is None else min(deadline, window_end)
            left = end - time.monotonic()
            if left <= 0:
                break
            if tail is not None:
                tail.poll()
                left = min(left, _LIVE_SECONDS)
            wait([h for m in pending.values() for h in (m.conn, m.process.sentinel)], left)
            for rank, member in list(pending.items()):
                outcome = self._receive(rank, member, task_id)
                if outcome is None:
                    continue
                del pending[rank]
                outcomes.append(outcome)
                if not outcome.passed and window_end is None:
                    window_end = time.monotonic() + PEER_WINDOW_SECONDS
        return outcomes, sorted(pending), bool(pending) and window_end is None

    def _receive(self, rank: int, member: Worker, task_id: int) -> Outcome | None:
        """The rank's outcome if it answered or died, else None."""
        try:
            if member.conn.poll():
                message = member.conn.recv()
                ours = isinstance(message, Outcome) and message.task_id == task_id
                return message if ours else None
        except (EOFError, OSError):
            member.process.join(1.0)  # the pipe closed: the exit code is on its way
        if member.process.exitcode is None:
            return None
        how = f"its process {death(member.process.exitcode)}"
        if self._store is not None:  # its peers raise PeerFailed naming it
            record_failure(self._store, rank, how, self.nproc)
        return Outcome(rank, task_id, False, "ProcessDied", how)

    def _stacks(self, ranks: list[int]) -> dict[int, str]:
        """Ask the ranks for their Python stacks (SIGUSR1) and read them from their logs."""
        if not ranks:
            return {}
        start = {rank: log_size(self._logs[rank]) for rank in ranks}
        for rank in ranks:
            ask_for_stacks(self._members[rank])
        deadline, last = time.monotonic() + _STACK_SECONDS, None
        while time.monotonic() < deadline:
            time.sleep(0.1)
            sizes = {rank: log_size(self._logs[rank]) for rank in ranks}
            if sizes == last and all(sizes[rank] > start[rank] for rank in ranks):
                break
            last = sizes
        return {rank: read_log(self._logs[rank], start[rank]) for rank in ranks}

    def close(self, *, graceful: bool = True) -> None:
        """Stop the ranks (told to leave, then SIGKILL to their process groups); idempotent."""
        if graceful and self._members:
            for member in self._members:
                with contextlib.suppress(OSError):
                    member.conn.send(None)
            join_all(self._members, _GRACE_SECONDS)
        if self._stop is not None:
            self._stop()
        self._members, self._store = [], None


class WorldPool:
    """The warm worlds of a test session: one per (nproc, backend, debug), started on first
    use and kept until `close`."""

    def __init__(self) -> None:
        self._worlds: dict[tuple[int, str | None, bool], WarmWorld] = {}

    def run(
        self,
        fn: Callable[..., Any],
        kwargs: Mapping[str, Any] | None = None,
        *,
        on_output: Callable[[int, str], Any] | None = None,
        **options: Any,
    ) -> WorldRun:
        """`WarmWorld.run` on the world of ``options``: ``nproc`` (2), ``backend``
        ("gloo"), ``timeout`` (60 s), ``debug`` (False); ``on_output`` as there."""
        for name in options:
            if name not in _OPTIONS:
                raise TypeError(
                    f"Unknown option {name!r}; the options are {', '.join(_OPTIONS)}."
                    + suggest(name, _OPTIONS)
                )
        key = (options.get("nproc", 2), options.get("backend", "gloo"), options.get("debug", False))
        world = self._worlds.get(key)
        if world is None:
            world = self._worlds[key] = WarmWorld(key[0], key[1], debug=key[2])
        return world.run(fn, kwargs, timeout=options.get("timeout", 60.0), on_output=on_output)

    def close(self) -> None:
        """Stop every world."""
        for world in self._worlds.values():
            world.close()
        self._worlds.clear()
