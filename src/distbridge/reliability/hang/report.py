"""Each rank's hang report, and the `Reporter` thread that publishes it through the job's store.

Every half second a rank's reporter publishes its ledger's tail under ``hang/ledger/<rank>``
when it changed (and at ``finalize``), with the path of its fault dump (`stacks.died_in`):
a rank that can no longer answer (killed, or stuck in C holding the GIL) is still described.
It answers verdict request ``n`` (``hang/requests`` counts them) under ``hang/<n>/<rank>``
with its ledger, where its main thread is, and its engine's record. With
``DISTBRIDGE_HANG_DIR`` set it also writes its report to ``<dir>/rank<r>.json`` when the
ledger changed, and every `REWRITE_SECONDS` while it stands still. The engine's record
costs tens of milliseconds to read, so it is read for answers and that file only, once per
ledger version (again after `ENGINE_REFRESH_SECONDS`). Keys live on the job's root store
(`fail_together.job_root`), where ``spawn``'s parent can ask too; values are JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from distbridge._frames import inside, outside, site
from distbridge.reliability.fail_together import job_root
from distbridge.reliability.hang.engine_trace import EngineTrace, engine_part, engine_records
from distbridge.reliability.hang.job_cards import write_card, write_json
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
    "REQUEST_KEY",
    "WORLD_KEY",
    "Reporter",
    "answer_key",
    "as_report",
    "ledger_key",
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
        "records": ledger.snapshot(SHOWN),
        "where": where,
        "stack": stack,
        "time": time.time(),
    }
    trace = engine_data if engine_data is not None else engine_part(engine, SHOWN)
    if trace is not None:
        data["engine"] = dict(trace)
    return data


def as_report(
    data: Mapping[str, Any], answered: bool, note: str = "", asked: bool = True
) -> RankReport:
    """A report as `report` made it (JSON), read back for the verdict; for a rank that did
    not answer, where its fault dump says it died."""
    records = tuple(Record.from_dict(r) for r in data.get("records", ()))
    where = data.get("where") if answered else None
    engine = engine_records(data.get("engine"))
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
        self._dir = os.environ.get(DIR_ENV_VAR) or None
        if self._dir:
            os.makedirs(self._dir, exist_ok=True)
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
        if publish:
            with contextlib.suppress(Exception), self._lock:
                if self._dir:
                    write_report(self._dir, self._rank, report(self._rank, self._ledger))
                self._publish()
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
            engine = None if changed else self._still_engine(version, now)
            with contextlib.suppress(OSError):  # the folder is gone or full: answer on
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
    write_json(path, data)
    return path


def start_reporter(
    store: Any, model: ModelContract, engine: EngineTrace | None = None
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
