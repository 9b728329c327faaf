"""Every rank's ledger and whereabouts through the job's store, for the hang verdict.

A `Reporter` is a daemon thread per rank. Every half second it

- publishes this rank's ledger (its last entries per group) under ``hang/ledger/<rank>``
  when it changed, so that a rank that can no longer answer (killed, or stuck in C while
  holding the GIL) is still described by what it last published;
- answers verdict requests: ``hang/requests`` counts them, and request ``n`` is answered
  under ``hang/<n>/<rank>`` with the ledger and where the main thread is now.

With ``DISTBRIDGE_HANG_DIR`` set, each rank also writes its report to
``<dir>/rank<r>.json`` whenever its ledger changed, and where it is every few seconds while
its ledger stands still (a rank stuck for good is described there even when the job is
gone): `read_dump_dir` reads them back, and `collect` falls back on them for a rank the
store has nothing of.

A model whose engine keeps its own record of collectives (torch's flight recorder) passes
its ``engine_trace``: reports then carry its tail under ``"engine"`` (see
`distbridge.reliability.engine_trace`). Reading it costs a dump of the whole record (tens of
milliseconds), so it is read for answers and dumps only, and for the dump file only while
the ledger stands still, once per ledger version (`ENGINE_REFRESH_SECONDS` at most).

`collect` asks every rank (or only reads what they published) and returns the reports the
pure `distbridge.reliability.verdict.verdict` takes; `ask_job` does it from another process,
by the store's address. Keys live on the job's root store (see
`fail_together.job_root`), so ``spawn``'s parent, which hosts it, can ask too. Values are
JSON: nothing received is unpickled or evaluated.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Protocol

from distbridge.reliability.engine_trace import EngineTrace, engine_part, engine_records
from distbridge.reliability.fail_together import job_root, read_failure
from distbridge.reliability.job_cards import write_card
from distbridge.reliability.ledger import CollectiveLedger
from distbridge.reliability.liveness import while_current
from distbridge.reliability.verdict import RankReport, Record, verdict

__all__ = [
    "DIR_ENV_VAR",
    "LedgerOwner",
    "Reporter",
    "ask_job",
    "collect",
    "job_verdict",
    "read_dump_dir",
    "report",
    "start_reporter",
    "where_now",
    "write_report",
]

DIR_ENV_VAR = "DISTBRIDGE_HANG_DIR"
#: while the ledger stands still, how often a rank with a dump directory rewrites where it is
REWRITE_SECONDS = 2.0

PREFIX = "distbridge/hang"
REQUEST_KEY = f"{PREFIX}/requests"
WORLD_KEY = f"{PREFIX}/world_size"
POLL_SECONDS = 0.5
#: entries per group a rank publishes and answers with
SHOWN = 8
#: while the ledger stands still, how often the dump file's engine record is read again
ENGINE_REFRESH_SECONDS = 30.0
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_EXIT_JOIN_SECONDS = 2.0
_running: weakref.WeakSet[Reporter] = weakref.WeakSet()


def _stop_all() -> None:
    """At exit, before the interpreter ends its daemon threads, stop every reporter and wait
    for its store call in flight: a call that fails when the store's host has left, in a
    finalizing interpreter, aborts the process ("terminate called without an active
    exception"), as the failure watchers' did (failure_watch._stop_all)."""
    for reporter in list(_running):
        reporter.stop()
    for reporter in list(_running):
        reporter.join(_EXIT_JOIN_SECONDS)


atexit.register(_stop_all)


def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _ledger_key(rank: int) -> str:
    return f"{PREFIX}/ledger/{rank}"


def _answer_key(request: int, rank: int) -> str:
    return f"{PREFIX}/{request}/{rank}"


def where_now(thread_id: int | None = None) -> tuple[str | None, str]:
    """Where a thread (default: the main one) is: ``("train.py:5 in stuck_here", stack)``.

    The place is the innermost frame outside distbridge and torch (inside a collective: the
    line that called it); the stack is the thread's traceback, innermost last.
    """
    ident = threading.main_thread().ident if thread_id is None else thread_id
    frame = sys._current_frames().get(ident or 0)
    if frame is None:
        return None, ""
    stack = "".join(traceback.format_stack(frame))
    skipped = (_PACKAGE, _torch_dir())
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(skipped) and not name.startswith("<frozen"):
            path = name
            with contextlib.suppress(ValueError):
                relative = os.path.relpath(name)
                path = name if relative.startswith(os.pardir) else relative
            return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}", stack
        frame = frame.f_back
    return None, stack


def _tail(ledger: CollectiveLedger) -> list[dict[str, Any]]:
    """The last ``SHOWN`` entries of each group."""
    return ledger.snapshot(SHOWN)


def report(
    rank: int,
    ledger: CollectiveLedger,
    engine: EngineTrace | None = None,
    engine_data: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """This rank's answer: its ledger's tail, where its main thread is, its stack, and its
    engine's record (read from ``engine`` now, unless ``engine_data`` already holds it)."""
    where, stack = where_now()
    data: dict[str, Any] = {
        "rank": rank,
        "records": _tail(ledger),
        "where": where,
        "stack": stack,
        "time": time.time(),
    }
    trace = engine_data if engine_data is not None else engine_part(engine, SHOWN)
    if trace is not None:
        data["engine"] = dict(trace)
    return data


def _as_report(
    data: Mapping[str, Any], answered: bool, note: str = "", asked: bool = True
) -> RankReport:
    records = tuple(Record.from_dict(r) for r in data.get("records", ()))
    where = data.get("where") if answered else None
    engine = engine_records(data.get("engine"))
    return RankReport(int(data["rank"]), records, where, answered, note, asked, engine)


class Reporter:
    """Publishes this rank's ledger and answers verdict requests (see the module).

    Args:
        store: any view of the job's store (its root is used, through a clone).
        rank: this process's global rank.
        ledger: the model's ledger.
        alive: False once the model's context is gone; the thread then ends.
        world_size: the number of ranks, published for `ask_job` (0: not published).
        engine: the model's ``engine_trace``, where its engine keeps a record.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        ledger: CollectiveLedger,
        alive: Callable[[], bool],
        world_size: int = 0,
        engine: EngineTrace | None = None,
    ) -> None:
        root = job_root(store)
        with contextlib.suppress(AttributeError, RuntimeError):
            root = root.clone()  # its own connection: never queued behind this rank's calls
        self._store = root
        self._rank = rank
        self._ledger = ledger
        self._alive = alive
        self._engine = engine
        self._engine_read: tuple[int, float, dict[str, Any] | None] | None = None
        self._stopped = threading.Event()
        self._published = -1
        self._written = 0.0  # when the dump file was last written (monotonic)
        self._dir = os.environ.get(DIR_ENV_VAR) or None
        if self._dir:
            os.makedirs(self._dir, exist_ok=True)
        self._seen = int(root.add(REQUEST_KEY, 0))
        if world_size:
            root.set(WORLD_KEY, str(world_size))
        self._thread = threading.Thread(target=self._run, name="distbridge-reporter", daemon=True)
        self._thread.start()
        _running.add(self)

    def stop(self) -> None:
        """End the thread (``finalize``)."""
        self._stopped.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end (after ``stop``)."""
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopped.wait(POLL_SECONDS) and self._alive():
            try:
                self._tick()
            except Exception:  # the store is gone: the job ended
                return

    def _tick(self) -> None:
        count = int(self._store.add(REQUEST_KEY, 0))
        if count > self._seen:
            answer = json.dumps(report(self._rank, self._ledger, self._engine))
            for request in range(self._seen + 1, count + 1):
                self._store.set(_answer_key(request, self._rank), answer)
            self._seen = count
        version = self._ledger.version()
        changed = version != self._published
        if changed:
            self._published = version
            data = {"rank": self._rank, "records": _tail(self._ledger)}
            self._store.set(_ledger_key(self._rank), json.dumps(data))
        now = time.monotonic()
        if self._dir and (changed or now - self._written >= REWRITE_SECONDS):
            self._written = now
            engine = None if changed else self._still_engine(version, now)
            write_report(self._dir, self._rank, report(self._rank, self._ledger, None, engine))

    def _still_engine(self, version: int, now: float) -> dict[str, Any] | None:
        """The engine's record while the ledger stands still at ``version``: read once per
        version, again after `ENGINE_REFRESH_SECONDS`."""
        read = self._engine_read
        if read is None or read[0] != version or now - read[1] >= ENGINE_REFRESH_SECONDS:
            read = self._engine_read = (version, now, engine_part(self._engine, SHOWN))
        return read[2]


def write_report(directory: str, rank: int, data: Mapping[str, Any]) -> str:
    """Write ``<directory>/rank<rank>.json``, replaced whole (a reader never sees half a
    file); returns its path."""
    path = os.path.join(directory, f"rank{rank}.json")
    temporary = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.replace(temporary, path)
    return path


def _published(store: Any, rank: int) -> dict[str, Any] | None:
    key = _ledger_key(rank)
    with contextlib.suppress(Exception):
        if store.check([key]):
            data = json.loads(store.get(key))
            return data if isinstance(data, dict) else None
    return None


def _dumped(rank: int) -> dict[str, Any] | None:
    """The report ``rank`` last wrote to the dump directory (``DISTBRIDGE_HANG_DIR``), if any."""
    directory = os.environ.get(DIR_ENV_VAR)
    if not directory:
        return None
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(directory, f"rank{rank}.json"), encoding="utf-8") as data:
            loaded = json.load(data)
        if isinstance(loaded, dict) and loaded.get("rank") == rank:
            return loaded
    return None


def _gather_answers(
    root: Any,
    others: list[int],
    notes: Mapping[int, str],
    answers: dict[int, dict[str, Any]],
    wait: float,
) -> None:
    """Ask every rank of ``others`` for its report and put the answers of up to ``wait``
    seconds in ``answers`` (not the ranks of ``notes``: those cannot answer)."""
    request = int(root.add(REQUEST_KEY, 1))
    deadline = time.monotonic() + wait
    while True:
        for rank in others:
            key = _answer_key(request, rank)
            if rank not in answers and rank not in notes and root.check([key]):
                with contextlib.suppress(ValueError):
                    answers[rank] = json.loads(root.get(key))
                with contextlib.suppress(Exception):
                    root.delete_key(key)
        missing = [r for r in others if r not in answers and r not in notes]
        if not missing or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def collect(
    store: Any,
    world_size: int,
    *,
    me: tuple[int, CollectiveLedger] | None = None,
    wait: float = 3.0,
    notes: Mapping[int, str] | None = None,
    engine: EngineTrace | None = None,
) -> list[RankReport]:
    """Every rank's report: asked through ``store`` (the answers of up to ``wait`` seconds),
    else what the rank last published, or last wrote to the dump directory when the store
    has nothing of it (marked as not answered). A store that goes away during the wait
    ends it: the answers received so far stand.

    Args:
        store: any view of the job's store.
        world_size: the number of ranks.
        me: this rank and its ledger, reported directly (not asked).
        wait: how long to wait for answers; 0 only reads what was published.
        notes: rank -> why it cannot answer (a failure note), e.g. "its process was killed".
        engine: ``me``'s model's ``engine_trace``, where its engine keeps a record.
    """
    root = job_root(store)
    notes = dict(notes or {})
    failure = read_failure(root)
    if failure is not None:
        notes.setdefault(failure[0], f"it failed: {failure[1]}")
    reports: dict[int, RankReport] = {}
    if me is not None:
        rank, ledger = me
        reports[rank] = _as_report(report(rank, ledger, engine), answered=True)
    others = [r for r in range(world_size) if r not in reports]
    # Read before the wait: the store's host (Horovod's rank 0) may end during it, as when a
    # launcher stops every rank at once; a ledger the store lost comes from the dump folder.
    last_words = {rank: _published(root, rank) or _dumped(rank) for rank in others}
    answers: dict[int, dict[str, Any]] = {}
    if wait > 0 and others:
        with contextlib.suppress(Exception):  # the store's host left: the answers so far
            _gather_answers(root, others, notes, answers, wait)
    for rank in others:
        if rank in answers:
            reports[rank] = _as_report(answers[rank], answered=True)
            continue
        note = notes.get(rank, "")
        published = last_words[rank]
        asked = wait > 0
        if published is not None:
            reports[rank] = _as_report(published, answered=False, note=note, asked=asked)
        else:
            reports[rank] = RankReport(rank, answered=False, note=note, asked=asked)
    return [reports[r] for r in sorted(reports)]


def read_dump_dir(path: str) -> tuple[list[RankReport], int]:
    """The reports the ranks wrote to dump directory ``path`` (``rank<r>.json``), as not
    asked: what each last wrote; and the world size they imply (the highest rank + 1).

    Raises:
        FileNotFoundError: ``path`` holds no ``rank<r>.json`` file.
    """
    reports = []
    for name in sorted(os.listdir(path)):
        if not (name.startswith("rank") and name.endswith(".json")):
            continue
        with open(os.path.join(path, name), encoding="utf-8") as data:
            loaded = json.load(data)
        report = _as_report(loaded, answered=True, asked=False)
        reports.append(report)
    if not reports:
        raise FileNotFoundError(
            f"{path!r} holds no rank<r>.json file: set {DIR_ENV_VAR} to it before the job "
            "starts, so that every rank writes there."
        )
    return reports, max(r.rank for r in reports) + 1


def ask_job(address: str, wait: float = 3.0) -> tuple[list[RankReport], int]:
    """Ask a running job for every rank's report through its store at ``host:port`` (the
    job's MASTER_ADDR and MASTER_PORT); returns the reports and the world size."""
    from torch._C._distributed_c10d import TCPStore

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"The store address must be host:port, got {address!r}.")
    store = TCPStore(host, int(port), None, False, timeout=timedelta(seconds=10))
    if not store.check([WORLD_KEY]):
        raise RuntimeError(
            f"The store at {address} has no distbridge job with a collective ledger (no "
            f"{WORLD_KEY!r} key): is it the job's MASTER_ADDR:MASTER_PORT?"
        )
    world_size = int(store.get(WORLD_KEY))
    return collect(store, world_size, wait=wait), world_size


class LedgerOwner(Protocol):
    """What `start_reporter` and `job_verdict` use of a model (``ModelContract``'s part)."""

    ledger: CollectiveLedger

    def get_rank(self) -> int: ...
    def get_world_size(self) -> int: ...
    def is_current(self) -> bool: ...


def start_reporter(
    store: Any, model: LedgerOwner, engine: EngineTrace | None = None
) -> Reporter | None:
    """A `Reporter` of ``model``'s ledger (and its ``engine`` record, if given) through
    ``store``, which ends when the model's context is gone; None where the store cannot be
    cloned or reached (no verdicts then)."""
    alive = while_current(model)
    try:
        world_size = model.get_world_size()
        reporter = Reporter(store, model.get_rank(), model.ledger, alive, world_size, engine)
    except RuntimeError:
        return None
    write_card(job_root(store), model.get_rank(), world_size)  # for why --pid
    return reporter


def job_verdict(
    store: Any,
    model: LedgerOwner,
    notes: Mapping[int, str],
    wait: float,
    engine: EngineTrace | None = None,
) -> str:
    """Who is at fault in ``model``'s job, from every rank's ledger (and engine record) asked
    through ``store`` for up to ``wait`` seconds (``notes``: rank -> why it cannot answer;
    ``engine``: the model's ``engine_trace``, where it has one)."""
    world = model.get_world_size()
    me = (model.get_rank(), model.ledger)
    reports = collect(store, world, me=me, wait=wait, notes=notes, engine=engine)
    return verdict(reports, world).text
