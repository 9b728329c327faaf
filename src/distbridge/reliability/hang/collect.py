"""Asking a job's ranks for their hang reports, or reading what they left, for the verdict.

`collect` asks every rank through the job's store (each rank's `report.Reporter`
answers within half a second) and, for a rank that does not answer, takes the ledger it
last published, or the report it last wrote to ``DISTBRIDGE_HANG_DIR``; it returns the
reports the pure `distbridge.reliability.hang.verdict.verdict` takes. `job_verdict` is that
verdict for a rank of the job, `ask_job` asks from another process by the store's address,
and `read_dump_dir` rebuilds the reports from a dump directory, also after the job is gone.
Values are JSON: nothing received is unpickled or evaluated.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from distbridge.reliability.fail_together import job_root, read_failure
from distbridge.reliability.hang.engine_trace import EngineTrace
from distbridge.reliability.hang.job_cards import read_json
from distbridge.reliability.hang.ledger import CollectiveLedger
from distbridge.reliability.hang.report import (
    DIR_ENV_VAR,
    REQUEST_KEY,
    WORLD_KEY,
    answer_key,
    as_report,
    ledger_key,
    report,
)
from distbridge.reliability.hang.verdict import RankReport, verdict

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = ["ask_job", "collect", "job_verdict", "read_dump_dir"]

_REPORT_FILE = re.compile(r"rank(\d+)\.json")  # a rank's report in a dump directory


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
                    answers[rank] = json.loads(root.get(key))
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


def job_verdict(
    store: Any,
    model: ModelContract,
    notes: Mapping[int, str],
    wait: float,
    engine: EngineTrace | None = None,
) -> str:
    """Who is at fault in ``model``'s job, from every rank's ledger (and engine record) asked
    through ``store`` for up to ``wait`` seconds (``notes``: rank -> why it cannot answer;
    ``engine``: the model's ``_engine_trace``, where it has one)."""
    world = model.get_world_size()
    me = (model.get_rank(), model.ledger)
    reports = collect(store, world, me=me, wait=wait, notes=notes, engine=engine)
    return verdict(reports, world).text
