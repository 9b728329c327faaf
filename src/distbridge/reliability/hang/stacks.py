"""Python stack dumps (faulthandler, every thread), and a watcher that dumps on request.

`dump` writes this process's stacks, but for distbridge's own threads, to the ``distbridge``
logger (WARNING). A `StackWatcher` polls the coordination store once a second and dumps this
rank's stacks when another rank asks (`StackWatcher.request`: a timed barrier that timed
out, ``distbridge.dump_stacks()``); it, the hang reporter and the failure watcher are
`StoreThread`s, stopped at exit. A process that dies of a signal runs no Python:
`enable_fault_dump` has faulthandler write every thread's stack to a file then, and
`died_in` reads which collective it was in.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import glob
import logging
import os
import re
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from typing import IO, Any

from distbridge._frames import inside, short_path
from distbridge.reliability.hang.job_cards import alive, user_dir

__all__ = [
    "StackWatcher",
    "died_in",
    "disable_fault_dump",
    "dump",
    "enable_fault_dump",
    "format_stacks",
    "while_current",
]

LOG = logging.getLogger("distbridge")
#: the store counter of dump requests, and the key holding why the last one was made
REQUEST_KEY = "stacks/requests"
REASON_KEY = "stacks/reason"
POLL_SECONDS = 1.0
#: the live store threads (stack watchers, hang reporters, failure watchers), stopped at exit
_threads: weakref.WeakSet[StoreThread] = weakref.WeakSet()


def _stop_all() -> None:
    """At exit, before the interpreter ends its daemon threads, stop every store thread
    (stack watchers, hang reporters, failure watchers) and wait for its store call in
    flight: one that wakes from it into a finalizing interpreter is ended inside torch's
    C++ frame, which aborts the process ("terminate called without an active exception",
    exit code 134), as rank 0 of a job exits before the others."""
    for thread in list(_threads):
        thread.stop()
    for thread in list(_threads):
        thread.join(POLL_SECONDS + 1.0)


atexit.register(_stop_all)
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)", re.MULTILINE)
_FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.*)$', re.MULTILINE)
_fault_files: list[IO[str]] = []  # the open fault file, while there is one


def _blocks(text: str) -> list[tuple[int, str]]:
    """faulthandler's dump as (thread id, its block), in order."""
    blocks = re.split(r"(?m)^(?=(?:Current thread|Thread) 0x)", text)  # each from its header
    return [(int(found[1], 16), block) for block in blocks if (found := _THREAD.match(block))]


def format_stacks() -> str:
    """Every thread's Python stack but distbridge's own (``distbridge-*`` threads), as
    ``faulthandler`` writes it (innermost frame first)."""
    with tempfile.TemporaryFile() as out:  # faulthandler writes to a file descriptor
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    own = {t.ident for t in threading.enumerate() if t.name.startswith("distbridge-")}
    return "".join(block for ident, block in _blocks(text) if ident not in own)


def enable_fault_dump() -> str | None:
    """Have faulthandler write every thread's stack to ``<tmp>/distbridge-<uid>/faults/<pid>``
    if this process dies of a signal; returns its path. None where faulthandler is already on
    (the user's own: left alone) or the file cannot be made. The files of processes gone for
    a minute are removed."""
    if faulthandler.is_enabled():
        return None
    directory = user_dir("faults")
    for stale in glob.glob(os.path.join(directory, "*")):
        with contextlib.suppress(OSError, ValueError):  # read a minute ago, or no more
            old = time.time() - os.path.getmtime(stale) > 60
            if old and not alive(int(os.path.basename(stale))):
                os.remove(stale)
    path = os.path.join(directory, str(os.getpid()))
    try:
        os.makedirs(directory, exist_ok=True)
        fault_file = open(path, "w", encoding="utf-8")  # noqa: SIM115  (open until disabled)
        fault_file.write(f"main thread {threading.main_thread().ident or 0:#x}\n")
        fault_file.flush()
    except OSError:
        return None
    _fault_files.append(fault_file)
    faulthandler.enable(fault_file, all_threads=True)
    return path


def disable_fault_dump() -> None:
    """Undo `enable_fault_dump` (the process lives on: its file goes)."""
    if _fault_files:
        fault_file = _fault_files.pop()
        faulthandler.disable()
        fault_file.close()
        with contextlib.suppress(OSError):
            os.remove(fault_file.name)


def died_in(path: str) -> tuple[str, tuple[str, ...]] | None:
    """From the fault dump at ``path``, where the main thread was in distbridge when the
    process died: the user's line that called in (``"train.py:9 in main"``) and the names of
    distbridge's functions it was in (``("all_reduce", "wrapper", ...)``); None when it was
    not in distbridge (or left no dump)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as data:
            header, text = data.readline(), data.read()
        main = int(header.split()[-1], 16)
    except (OSError, ValueError, IndexError):
        return None
    block = next((b for ident, b in _blocks(text) if ident == main), "")
    frames = _FRAME.findall(block)  # innermost first
    ours = [inside(file) for file, _, _ in frames]
    first = next((i for i, own in enumerate(ours) if own), None)
    end = next((i for i in range(first or 0, len(ours)) if not ours[i]), None)
    if first is None or end is None:
        return None
    file, line, name = frames[end]
    return f"{short_path(file)}:{line} in {name}", tuple(f[2] for f in frames[first:end])


def dump(rank: int, reason: str) -> str:
    """Log this process's stacks under a header naming ``rank``; returns the text logged."""
    header = (
        f"==== distbridge: Python stacks of rank {rank} (pid {os.getpid()}, host "
        f"{socket.gethostname()}): {reason} ===="
    )
    text = f"{header}\n{format_stacks()}"
    LOG.warning("%s", text)
    return text


def while_current(is_current: Callable[[], bool]) -> Callable[[], bool]:
    """A check that is True while a model exists and its context is the live one (a
    `StoreThread`'s ``alive``), from the model's ``is_current``, held weakly."""
    ref = weakref.WeakMethod(is_current)
    return lambda: (check := ref()) is not None and check()


class StoreThread:
    """A daemon thread named ``name`` that runs ``_tick`` every ``seconds`` on a connection
    of its own to ``store`` (a clone; one that cannot be cloned is shared, or raises when
    ``must_clone``), until `stop`, until ``alive()`` is False (the model's context is gone),
    or until the store is gone."""

    def __init__(
        self,
        store: Any,
        alive: Callable[[], bool],
        name: str,
        seconds: float,
        must_clone: bool = False,
    ) -> None:
        # its own connection: never queued behind this rank's calls, and keeping no server
        # alive (rank 0's store may host one)
        try:
            store = store.clone()
        except (AttributeError, RuntimeError):
            if must_clone:
                raise
        self._store = store
        self._alive = alive
        self._seconds = seconds
        self._lock = threading.Lock()  # one store call at a time: the thread's, or another's
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _start(self) -> None:
        self._thread.start()
        _threads.add(self)

    def stop(self) -> None:
        """End the thread (at its next tick, or at once if it waits)."""
        self._stopped.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end (after `stop`)."""
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopped.wait(self._seconds) and self._alive():
            try:
                with self._lock:
                    self._tick()
            except Exception:  # the store is gone: the job ended
                return

    def _tick(self) -> None:
        raise NotImplementedError


class StackWatcher(StoreThread):
    """Dumps this rank's stacks (global ``rank``, named in the header) whenever another rank
    asks through the coordination ``store``; a `StoreThread`."""

    def __init__(self, store: Any, rank: int, alive: Callable[[], bool]) -> None:
        super().__init__(store, alive, "distbridge-stack-watcher", POLL_SECONDS)
        self._rank = rank
        self._seen = int(self._store.add(REQUEST_KEY, 0))
        self._start()

    def request(self, reason: str) -> None:
        """Ask every other rank's watcher to dump its stacks (this rank's own is not asked)."""
        with self._lock:
            self._store.set(REASON_KEY, f"rank {self._rank} asked: {reason}")
            self._seen = int(self._store.add(REQUEST_KEY, 1))

    def _tick(self) -> None:
        count = int(self._store.add(REQUEST_KEY, 0))
        if count > self._seen:
            self._seen = count
            dump(self._rank, self._store.get(REASON_KEY).decode())
