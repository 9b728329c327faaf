"""Each rank's hang report: the `Reporter` thread that publishes it through the job's store,
and asking for the reports, or reading what the ranks left, for the verdict.

Every half second a rank's reporter publishes its ledger's tail under ``hang/ledger/<rank>``
when it changed (and at ``finalize``), with the path of its fault dump (`stacks.died_in`):
a rank that can no longer answer (killed, or stuck in C holding the GIL) is still described.
It answers verdict request ``n`` (``hang/requests`` counts them) under ``hang/<n>/<rank>``
with its ledger, where its main thread is, and its engine's record. With
``DISTBRIDGE_HANG_DIR`` set it also writes its report to ``<dir>/rank<r>.json`` when the
ledger changed, and every `REWRITE_SECONDS` while it stands still. The engine's record
costs tens of milliseconds to read, so it is read for answers and that file only, once per
ledger version (again after `ENGINE_REFRESH_SECONDS`). Keys live on the job's root store
(`fail_together.job_root`), where ``spawn``'s parent can ask too; values are JSON: nothing
received is unpickled or evaluated.

`collect` asks every rank through the store and, for a rank that does not answer, takes the
ledger it last published, or the report it last wrote to ``DISTBRIDGE_HANG_DIR``; it returns
the reports the pure `distbridge.reliability.hang.verdict.verdict` takes. `ask_job` asks
from another process by the store's address, and `read_dump_dir` rebuilds the reports from a
dump directory, also after the job is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from distbridge._frames import inside, outside, site
from distbridge.reliability.fail_together import job_root, read_failure
from distbridge.reliability.hang.engine_trace import EngineTrace
from distbridge.reliability.hang.job_cards import read_json, write_card, write_json
from distbridge.reliability.hang.ledger import CollectiveLedger, Record
from distbridge.reliability.hang.stacks import (
    StoreThread,
    died_in,
    disable_fault_dump,
    enable_fault_dump,
    while_current,
)
from distbridge.reliability.hang.verdict import RankReport

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = [
    "DIR_ENV_VAR",
    "Reporter",
    "ask_job",
    "collect",
    "hang_dir",
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
_REPORT_FILE = re.compile(r"rank(\d+)\.json")  # a rank's report in a dump directory


def ledger_key(rank: int) -> str:
    """The key of the ledger ``rank`` last published."""
    return f"{PREFIX}/ledger/{rank}"


def answer_key(request: int, rank: int) -> str:
    """The key of ``rank``'s answer to verdict request ``request``."""
    return f"{PREFIX}/{request}/{rank}"


def where_now() -> tuple[str | None, str]:
    """Where the main thread is: ``("train.py:5 in stuck_here", stack)``.

    The place is the innermost frame outside distbridge and torch (inside a collective: the
    line that called it); the stack is the thread's traceback, innermost last.
    """
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    if frame is None:
        return None, ""
    stack = "".join(traceback.format_stack(frame))
    skipped = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, "<frozen")
    found = outside(frame, skipped)
    name = found.f_code.co_filename
    if inside(name) or name.startswith(skipped):  # distbridge's or torch's all the way out
        return None, stack
    return site(found), stack


def _engine_part(engine: EngineTrace | None, limit: int) -> dict[str, Any] | None:
    """The engine's record for a report (``engine(limit)``), or None without one; a failure
    to read it becomes a note: the report never fails for it."""
    if engine is None:
        return None
    try:
        trace = engine(limit)
    except Exception as err:  # a private API of the engine: absent, not fatal
        return {"note": f"the engine's record could not be read: {type(err).__name__}: {err}"}
    return None if trace is None else dict(trace)


def report(
    rank: int, ledger: CollectiveLedger, engine: EngineTrace | None = None
) -> dict[str, Any]:
    """This rank's answer: its ledger's tail, where its main thread is, its stack, and its
    engine's record (read from ``engine``)."""
    where, stack = where_now()
    data: dict[str, Any] = {
        "rank": rank,
        "records": ledger.snapshot(SHOWN),
        "where": where,
        "stack": stack,
        "time": time.time(),
    }
    trace = _engine_part(engine, SHOWN)
    if trace is not None:
        data["engine"] = trace
    return data


def as_report(
    data: Mapping[str, Any], answered: bool, note: str = "", asked: bool = True
) -> RankReport:
    """A report as `report` made it (JSON), read back for the verdict; for a rank that did
    not answer, where its fault dump says it died."""
    records = Record.rows(data.get("records"))
    where = data.get("where") if answered else None
    trace = data.get("engine")
    engine = Record.rows(trace.get("entries") if isinstance(trace, Mapping) else None)
    fault = data.get("fault")
    died = died_in(fault) if isinstance(fault, str) and not answered else None
    return RankReport(int(data["rank"]), records, where, answered, note, asked, engine, died)


class Reporter(StoreThread):
    """Publishes this process's (global ``rank``) ``ledger`` through the root of ``store``
    and answers verdict requests (see the module); a `StoreThread`. ``world_size`` is
    published for `ask_job`; ``engine`` is the model's ``_engine_trace``, where its
    engine keeps a record."""

    def __init__(
        self,
        store: Any,
        rank: int,
        ledger: CollectiveLedger,
        alive: Callable[[], bool],
        world_size: int,
        engine: EngineTrace | None = None,
    ) -> None:
        super().__init__(job_root(store), alive, "distbridge-reporter", POLL_SECONDS)
        self._rank = rank
        self._ledger = ledger
        self._engine = engine
        self._engine_read: tuple[int, float, dict[str, Any] | None] | None = None
        self._published = -1
        self._written = 0.0  # when the dump file was last written (monotonic)
        self._dir = hang_dir()
        # the store first: one out of reach raises before the fault dump is on
        self._seen = int(self._store.add(REQUEST_KEY, 0))
        self._store.set(WORLD_KEY, str(world_size))
        self._fault = enable_fault_dump()
        self._publish()  # the fault file's path, before the first collective
        self._start()

    def stop(self, publish: bool = False) -> None:
        """End the thread; ``publish`` (``finalize``): publish the ledger (and write the dump
        file) as it ends."""
        super().stop()
        if publish:  # one last tick, the ledger taken as changed
            with contextlib.suppress(Exception), self._lock:
                self._published = -1
                self._tick()
        disable_fault_dump()

    def _publish(self) -> None:
        data = {"rank": self._rank, "records": self._ledger.snapshot(SHOWN), "fault": self._fault}
        self._store.set(ledger_key(self._rank), json.dumps(data))

    def _tick(self) -> None:
        count = int(self._store.add(REQUEST_KEY, 0))
        if count > self._seen:
            answer = json.dumps(report(self._rank, self._ledger, self._engine))
            for request in range(self._seen + 1, count + 1):
                self._store.set(answer_key(request, self._rank), answer)
            self._seen = count
        version = self._ledger.version()
        changed = version != self._published
        if changed:
            self._published = version
            self._publish()
        now = time.monotonic()
        if self._dir and (changed or now - self._written >= REWRITE_SECONDS):
            self._written = now
            engine = None if changed else self._still_engine
            with contextlib.suppress(OSError):  # the folder is gone or full: answer on
                write_report(self._dir, self._rank, report(self._rank, self._ledger, engine))

    def _still_engine(self, limit: int) -> dict[str, Any] | None:
        """The engine's record while the ledger stands still (an `EngineTrace`): read once per
        ledger version, again after `ENGINE_REFRESH_SECONDS`."""
        version, now = self._ledger.version(), time.monotonic()
        read = self._engine_read
        if read is None or read[0] != version or now - read[1] >= ENGINE_REFRESH_SECONDS:
            read = self._engine_read = (version, now, _engine_part(self._engine, limit))
        return read[2]


def hang_dir() -> str | None:
    """``DISTBRIDGE_HANG_DIR``, made when missing (None when unset); ValueError naming it and
    the fix when this process cannot write there. Read as a `Reporter` starts
    (``initialize``), so that a bad folder is told then, not found empty after a hang."""
    path = os.environ.get(DIR_ENV_VAR)
    if not path:
        return None
    try:
        os.makedirs(path, exist_ok=True)
        problem = None if os.access(path, os.W_OK | os.X_OK) else "permission denied"
    except FileExistsError:
        problem = "it is a file"
    except OSError as err:
        problem = err.strerror or str(err)
    if problem is not None:
        raise ValueError(
            f"{DIR_ENV_VAR}={path!r} is not a folder this process can write its hang report "
            f"to ({problem}): set it to a writable folder, or unset it."
        )
    return path


def write_report(directory: str, rank: int, data: Mapping[str, Any]) -> str:
    """Write ``<directory>/rank<rank>.json``, replaced whole (a reader never sees half a
    file); returns its path."""
    path = os.path.join(directory, f"rank{rank}.json")
    write_json(path, data)
    return path


def start_reporter(store: Any, model: ModelContract) -> Reporter | None:
    """A `Reporter` of ``model``'s ledger (and its engine's record, ``_engine_trace``)
    through ``store``, which ends when the model's context is gone; None where the store
    cannot be cloned or reached (no verdicts then)."""
    alive = while_current(model.is_current)
    try:
        world_size, rank = model.get_world_size(), model.get_rank()
        reporter = Reporter(store, rank, model.ledger, alive, world_size, model._engine_trace)
    except RuntimeError:
        return None
    write_card(job_root(store), rank)  # for why --pid
    return reporter


def _published(store: Any, rank: int) -> dict[str, Any] | None:
    key = ledger_key(rank)
    with contextlib.suppress(Exception):
        if store.check([key]):
            data = json.loads(store.get(key))
            return data if isinstance(data, dict) else None
    return None


def _dumped(rank: int, directory: str | None = None) -> dict[str, Any] | None:
    """The report ``rank`` last wrote to dump ``directory`` (default: ``DISTBRIDGE_HANG_DIR``),
    if any."""
    directory = directory or os.environ.get(DIR_ENV_VAR)
    loaded = read_json(os.path.join(directory, f"rank{rank}.json")) if directory else None
    return loaded if loaded is not None and loaded.get("rank") == rank else None


def _gather_answers(
    root: Any, asked: list[int], answers: dict[int, dict[str, Any]], wait: float
) -> None:
    """Ask every rank of ``asked`` for its report and put the answers of up to ``wait``
    seconds in ``answers``."""
    request = int(root.add(REQUEST_KEY, 1))
    deadline = time.monotonic() + wait
    while True:
        for rank in [r for r in asked if r not in answers]:
            key = answer_key(request, rank)
            if root.check([key]):
                with contextlib.suppress(ValueError):
                    answer = json.loads(root.get(key))
                    if isinstance(answer, dict):  # else garbage: as unanswered
                        answers[rank] = answer
                with contextlib.suppress(Exception):
                    root.delete_key(key)
        if all(r in answers for r in asked) or time.monotonic() >= deadline:
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
    """Every rank's report: asked through ``store`` (any view of the job's store) for up to
    ``wait`` seconds (0: only read what was published), else what the rank last published,
    or last wrote to the dump directory when the store has nothing of it (marked as not
    answered; ``notes``: rank -> why it cannot, e.g. "its process was killed"). A store that
    goes away during the wait ends it: the answers received so far stand. ``me``, this rank
    and its ledger, is reported directly, with ``engine``, its model's ``_engine_trace``."""
    root = job_root(store)
    notes = dict(notes or {})
    failure = read_failure(root)
    if failure is not None:
        notes.setdefault(failure[0], f"it failed: {failure[1]}")
    reports: dict[int, RankReport] = {}
    if me is not None:
        rank, ledger = me
        reports[rank] = as_report(report(rank, ledger, engine), answered=True)
    others = [r for r in range(world_size) if r not in reports]
    # Read before the wait: the store's host (Horovod's rank 0) may end during it, as when a
    # launcher stops every rank at once; a ledger the store lost comes from the dump folder.
    last_words = {rank: _published(root, rank) or _dumped(rank) for rank in others}
    answers: dict[int, dict[str, Any]] = {}
    if wait > 0 and others:
        with contextlib.suppress(Exception):  # the store's host left: the answers so far
            _gather_answers(root, [r for r in others if r not in notes], answers, wait)
    for rank in others:
        if rank in answers:
            reports[rank] = as_report(answers[rank], answered=True)
        else:  # what it last published, if anything
            last = last_words[rank] or {"rank": rank}
            reports[rank] = as_report(last, False, notes.get(rank, ""), asked=wait > 0)
    return [reports[r] for r in sorted(reports)]


def read_dump_dir(path: str) -> tuple[list[RankReport], int]:
    """The reports the ranks wrote to dump directory ``path`` (``rank<r>.json``), as not
    asked: what each last wrote; and the world size they imply (the highest rank + 1). Other
    files, and one that is not its rank's report, are left out. FileNotFoundError when there
    is none."""
    ranks = sorted(int(m[1]) for name in os.listdir(path) if (m := _REPORT_FILE.fullmatch(name)))
    dumped = [loaded for rank in ranks if (loaded := _dumped(rank, path)) is not None]
    reports = [as_report(loaded, answered=True, asked=False) for loaded in dumped]
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
