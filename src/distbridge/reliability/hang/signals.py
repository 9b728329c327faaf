"""The hang verdict on a signal: SIGTERM while a collective hangs, and SIGUSR2 on demand.

`watch_signals` (``initialize``, in the main thread, two ranks or more) installs them and
`unwatch_signals` (``finalize``) removes them:

- **SIGTERM** (a launcher stopping the job), for a model that fails together, only where
  SIGTERM has its default action: when this rank's last collective of a group has not
  returned, or raised, it writes the hang verdict to stderr, then ends.
- **SIGUSR2**: this rank writes its report to ``<dir>/rank<r>.json`` (``DISTBRIDGE_HANG_DIR``,
  else `report_dir` of its parent), says so on stderr, and goes on. A Python handler already
  there is called after it; an ignored SIGUSR2 stays ignored. Not SIGUSR1: the warm worlds
  register faulthandler's stack dump on it in C, unseen from Python.

The processes distbridge starts answer SIGUSR2 all their life (`answer_report_signal`);
there `watch_signals` only points it at the model they join (`report_on_signal`) and
installs no SIGTERM handler (their launcher stops them itself).

A hung collective holds the main thread in C, where Python runs no handler, so the C
handler's wake-up byte (`signal.set_wakeup_fd`) wakes a thread of this module, which does
the work and ends a SIGTERM with ``os._exit(143)`` (outside a collective the main thread's
handler gets a second first, and ends it by the signal). Where an asyncio loop holds the
wake-up descriptor, only the main thread's handler answers, once the collective returns.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Final

from distbridge.reliability.hang.engine_trace import EngineTrace
from distbridge.reliability.hang.job_cards import user_dir
from distbridge.reliability.hang.ledger import CollectiveLedger
from distbridge.reliability.hang.report import DIR_ENV_VAR, report, write_report

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = [
    "DUMP_SIGNAL",
    "TERMINATION_WAIT_SECONDS",
    "answer_report_signal",
    "report_dir",
    "report_on_signal",
    "unwatch_signals",
    "watch_signals",
]

DUMP_SIGNAL: Final = signal.SIGUSR2
#: how long a rank that got SIGTERM waits for the other ranks' answers (launchers wait
#: longer before SIGKILL: torchrun 30 s, SLURM's KillWait 30 s)
TERMINATION_WAIT_SECONDS: Final = 1.5
#: how long a SIGTERM outside a collective is left to the main thread's handler
MAIN_THREAD_SECONDS: Final = 1.0


class _Watch:
    """The installed handlers of one rank, and the thread that runs them (see the module)."""

    def __init__(
        self,
        rank: int,
        ledger: CollectiveLedger,
        explain: Callable[[float], str | None] | None,
        signals: list[signal.Signals],
        engine: EngineTrace | None = None,
        dump_dir: str | None = None,
        for_life: bool = False,
    ) -> None:
        self.rank = rank
        self.ledger = ledger
        self.engine = engine
        self.explain = explain
        self.dump_dir = os.environ.get(DIR_ENV_VAR) or dump_dir or report_dir(os.getppid())
        self.for_life = for_life  # a launcher's: finalize leaves it
        self.pid = os.getpid()
        self.ending = threading.Lock()  # the first to take it handles SIGTERM
        self.explained = threading.Event()  # set once it did
        self.saved = {signum: signal.getsignal(signum) for signum in signals}
        for signum in signals:
            signal.signal(signum, self.in_main_thread)
        self.read, self.write = os.pipe()
        os.set_blocking(self.write, False)
        self.old_wakeup = signal.set_wakeup_fd(self.write)
        if self.old_wakeup != -1:  # taken: keep its owner's, handle in the main thread only
            signal.set_wakeup_fd(self.old_wakeup)
        self.thread = threading.Thread(target=self.run, name="distbridge-signals", daemon=True)
        self.thread.start()

    def run(self) -> None:
        """Wake on every signal byte; SIGTERM and SIGUSR2 are handled here."""
        while True:
            try:
                got = os.read(self.read, 64)
            except OSError:
                return
            if not got:  # the write end was closed: unwatch_signals
                return
            for signum in got:
                if signum == DUMP_SIGNAL and DUMP_SIGNAL in self.saved:
                    self.dump()
                # a handler installed after this one (a `StopGuard`'s) decides what SIGTERM does
                elif signum == signal.SIGTERM and signal.getsignal(signum) == self.in_main_thread:
                    self.terminate()

    def terminate(self) -> None:
        """SIGTERM, in the thread: the verdict, then the end. A rank in no trouble leaves it
        to the main thread's handler for a moment (which ends the process by the signal
        itself, as without distbridge), then ends it here if its main thread is held in C."""
        if not _in_trouble(self.ledger):
            time.sleep(MAIN_THREAD_SECONDS)
        if self.explain_termination():
            os._exit(128 + signal.SIGTERM)

    def in_main_thread(self, signum: int, frame: FrameType | None) -> None:
        """The Python-level handler: where the thread was not woken (or was slower)."""
        if signum == DUMP_SIGNAL:
            if not self.woken():  # the thread is not woken: dump here
                self.dump()
            previous = self.saved[DUMP_SIGNAL]
            if callable(previous):  # another feature's handler (a stop request): chained
                previous(signum, frame)
            return
        if not self.explain_termination():  # the thread is at it: let it finish
            self.explained.wait(TERMINATION_WAIT_SECONDS + 5.0)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def woken(self) -> bool:
        """Whether the signal's byte reaches the thread (the wake-up descriptor is still
        ours: an asyncio loop started later takes it)."""
        if self.old_wakeup != -1:
            return False
        try:
            now = signal.set_wakeup_fd(self.write)
        except ValueError:  # closed meanwhile
            return False
        if now != self.write:
            signal.set_wakeup_fd(now)
        return now == self.write

    def explain_termination(self) -> bool:
        """Write the verdict to stderr when this rank is stuck in (or failed in) a collective;
        False when another thread is already at it."""
        if not self.ending.acquire(blocking=False):
            return False
        try:
            if _in_trouble(self.ledger) and self.explain is not None:
                with contextlib.suppress(Exception):  # a verdict must never block the exit
                    text = self.explain(TERMINATION_WAIT_SECONDS)
                    if text:
                        print(
                            f"distbridge: rank {self.rank} got SIGTERM while in a collective. "
                            f"Why, from every rank's collective ledger:\n{text}",
                            file=sys.stderr,
                            flush=True,
                        )
        finally:
            self.explained.set()
        return True

    def dump(self) -> None:
        """This rank's report to the dump directory, and one line to stderr (none for rank
        -1: a process that only passes the signal on)."""
        if self.rank < 0:
            return
        try:
            os.makedirs(self.dump_dir, exist_ok=True)
            data = report(self.rank, self.ledger, self.engine)
            said = f"wrote its hang report to {write_report(self.dump_dir, self.rank, data)}"
        except OSError as err:  # a signal's handler raises nothing: it says why instead
            said = (
                f"could not write its hang report ({err}): set {DIR_ENV_VAR} to a writable folder"
            )
        print(f"distbridge: rank {self.rank} {said}", file=sys.stderr)

    def uninstall(self) -> None:
        """Put the previous handlers back and end the thread."""
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
        if self.old_wakeup == -1:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(-1)
        os.close(self.write)
        self.thread.join(1.0)
        with contextlib.suppress(OSError):
            os.close(self.read)


def _in_trouble(ledger: CollectiveLedger) -> bool:
    """Whether this rank's last collective of some group has not returned, or raised."""
    return any(log.seq > 0 and log.state(log.seq) != "done" for log in ledger.logs())


#: the installed handlers of this process (at most one), emptied by `unwatch_signals`
_installed: list[_Watch] = []


def _answerable(signum: signal.Signals) -> bool:
    """SIGTERM: only where it has its default action; SIGUSR2 also over a Python handler."""
    handler = signal.getsignal(signum)
    return handler is signal.SIG_DFL or (signum == DUMP_SIGNAL and callable(handler))


def report_dir(owner: int | str) -> str:
    """Where the ranks started by process ``owner`` write their reports on SIGUSR2:
    ``DISTBRIDGE_HANG_DIR``, else ``<tmp>/distbridge-<uid>/reports/<owner>``."""
    return os.environ.get(DIR_ENV_VAR) or user_dir("reports", str(owner))


def answer_report_signal(rank: int, directory: str) -> None:
    """In a process a distbridge launcher starts, first thing: SIGUSR2 writes the report of
    rank ``rank`` (see `report_on_signal`) to ``directory``, for the life of the process;
    rank -1 writes none (a process that passes the signal on to ranks of its own). A
    handler inherited from the parent (a fork's) is replaced, not chained."""
    if _installed and _installed[0].pid == os.getpid():  # an XLA replica in its launcher
        _installed[0].rank, _installed[0].dump_dir = rank, os.environ.get(DIR_ENV_VAR) or directory
        return
    if threading.current_thread() is not threading.main_thread():
        return
    _installed.clear()  # a fork's copy of its parent's watch, whose thread is not here
    signal.set_wakeup_fd(-1)  # nor is the reader of the parent's wake-up descriptor
    if signal.getsignal(DUMP_SIGNAL) is not signal.SIG_IGN:
        signal.signal(DUMP_SIGNAL, signal.SIG_DFL)
        empty = CollectiveLedger(lambda group: None)  # until a model joins
        _installed.append(_Watch(rank, empty, None, [DUMP_SIGNAL], None, directory, True))


def report_on_signal(model: ModelContract) -> None:
    """Report ``model``'s rank, ledger and engine record on SIGUSR2 from now on (a
    launcher's worker, once it joined the job)."""
    if _installed:
        watch = _installed[0]
        watch.rank, watch.ledger, watch.engine = model.get_rank(), model.ledger, model._engine_trace


def watch_signals(model: ModelContract) -> None:
    """Install the handlers for ``model``'s rank (see the module); nothing for a world of one
    or outside the main thread; SIGTERM's verdict only for a model that fails together (it
    can ask its peers). In a process that answers SIGUSR2 already (a launcher's), only what
    it reports changes."""
    if _installed:
        report_on_signal(model)
        return
    if model.get_world_size() < 2 or threading.current_thread() is not threading.main_thread():
        return
    together = model.together
    explain = None if together is None else functools.partial(together.verdict, {})
    wanted = [DUMP_SIGNAL] if explain is None else [signal.SIGTERM, DUMP_SIGNAL]
    free = [s for s in wanted if _answerable(s)]
    if free:  # the engine's record: native models only
        _installed.append(
            _Watch(model.get_rank(), model.ledger, explain, free, model._engine_trace)
        )


def unwatch_signals() -> None:
    """Undo `watch_signals` (``finalize``); safe to call when nothing is installed. The
    handler of a launcher's process stays (it answers SIGUSR2 until the process ends)."""
    main = threading.current_thread() is threading.main_thread()
    if _installed and not _installed[0].for_life and main:
        _installed.pop().uninstall()
