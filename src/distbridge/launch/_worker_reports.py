"""The parent's view of a started worker, and what it says when workers fail: the error
that names the first worker that failed by itself, with one line from each of the others.
Where a hang verdict names the rank at fault (in a worker's error or from the ledgers), its
line comes first, and the traceback keeps the user's frames."""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import signal
import sysconfig
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import torch

from distbridge._frames import inside
from distbridge.errors import WorkerFailedError
from distbridge.launch.pickling import REIMPORT_EXIT_CODE, REIMPORT_PROBLEM, SHORT_REPR
from distbridge.reliability.hang.verdict import headline

__all__ = [
    "STOPPED",
    "Report",
    "Worker",
    "death",
    "dump_report",
    "error_report",
    "failure",
    "is_library",
    "load_report",
    "one_line",
    "raised_error",
    "run_reported",
    "sentence",
]

#: Where code that is not the user's lives: the standard library, installed packages, torch.
_LIBRARIES = (
    *{
        os.path.realpath(sysconfig.get_paths()[name])
        for name in ("stdlib", "platstdlib", "purelib", "platlib")
    },
    os.path.dirname(os.path.realpath(torch.__file__)),
)
#: A frame of a traceback: its "File" line and the code under it (not the error's message).
_ENTRY = re.compile(r'^  File "(?P<path>[^"]*)".*\n(?:    .*\n)*', re.MULTILINE)
#: Added when the first worker died of SIGABRT: gloo aborts the process on such a mismatch.
_ABORT_HINT = (
    " SIGABRT in a worker usually means the ranks called different collectives (another "
    "operation, shape or dtype, which makes gloo abort): run with DISTBRIDGE_DEBUG=1 or "
    "spawn(..., debug=True) to raise CollectiveMismatch naming both call sites instead."
)

STOPPED = "The other workers were stopped."

#: What a worker sends over its pipe: ``("ok", value)`` or
#: ``("error", traceback, exception_type_name, message)``.
Report = tuple[Any, ...]


@dataclass
class Worker:
    """A started worker: its index on this node, global rank, process, pipe and report."""

    index: int
    rank: int
    process: BaseProcess
    conn: Connection
    report: Report | None = None

    def describe(self) -> str:
        return f"Worker rank {self.rank} (local rank {self.index}, pid {self.process.pid})"


def failure(
    failed: list[Worker], workers: list[Worker], verdict: str | None = None
) -> WorkerFailedError:
    """The error naming the first worker that failed by itself (not by `PeerFailed`), with
    the hang ``verdict`` from the workers' ledgers when there is one."""
    first = next((w for w in failed if not w.report or w.report[2] != "PeerFailed"), failed[0])
    ended = [w for w in workers if w.report is not None or w.process.exitcode is not None]
    reports = {w.rank: _outcome(w) for w in ended if w is not first}
    own = first.report is not None and first.report[2] == "CollectiveTimeout"  # a better one
    ledgers = "" if own or not verdict else f"\n\nFrom the ranks' collective ledgers:\n{verdict}"
    # the rank at fault: as the first worker's error names it, else (it died without a word)
    # as the ledgers do, read after its death with its fault dump, else as the others' errors
    errors = [w.report[3] for w in workers if w.report and w.report[0] == "error"]
    said = [first.report[3]] if first.report else [verdict or "", *errors]
    culprit = next(filter(None, map(headline, said)), None)
    lead = f"{sentence(culprit)}\n" if culprit else ""
    if first.report is not None:
        return raised_error(
            first.rank,
            first.index,
            first.report,
            reports,
            who=first.describe(),
            lead=lead,
            ledgers=ledgers,
            short=bool(culprit),
        )
    exitcode = first.process.exitcode or 0
    if exitcode == REIMPORT_EXIT_CODE:
        summary = f"{first.describe()} exited while starting: {REIMPORT_PROBLEM}."
    else:
        hint = _ABORT_HINT if exitcode == -signal.SIGABRT and not culprit else ""
        summary = f"{first.describe()} {death(exitcode)}.{hint}"
    return WorkerFailedError(
        f"{lead}{summary} {STOPPED}{ledgers}{_others(reports)}",
        rank=first.rank,
        local_rank=first.index,
        exitcode=exitcode,
        peer_reports=reports,
    )


def raised_error(
    rank: int,
    local_rank: int,
    report: Report,
    peer_reports: Mapping[int, str] | None = None,
    *,
    who: str = "",
    lead: str = "",
    ledgers: str = "",
    short: bool = False,
) -> WorkerFailedError:
    """The error for the worker (``who``, default "Worker rank 1 (local rank 1)") whose
    error ``report`` says what it raised, with what the others reported and its traceback
    (see `_traceback` for ``short``)."""
    who = who or f"Worker rank {rank} (local rank {local_rank})"
    _, worker_traceback, type_name, message = report
    raised = f"{type_name}: {message}" if message else type_name
    return WorkerFailedError(
        f"{lead}{sentence(f'{who} raised {raised}')} {STOPPED}{ledgers}{_others(peer_reports)}"
        f"\n\n{_traceback(rank, worker_traceback, short)}",
        rank=rank,
        local_rank=local_rank,
        exitcode=None,
        worker_traceback=worker_traceback,
        peer_reports=peer_reports,
    )


def _others(reports: Mapping[int, str] | None) -> str:
    lines = "".join(f"\n  rank {rank}: {line}" for rank, line in sorted((reports or {}).items()))
    return f"\n\nWhat the other workers reported:{lines}" if lines else ""


def error_report(exc: BaseException) -> Report:
    """The report of a worker whose function raised ``exc`` (being handled now)."""
    try:
        message = str(exc)
    except Exception:
        message = "<str() of the exception failed>"
    return ("error", traceback.format_exc(), type(exc).__name__, message)


def run_reported(call: Callable[[], Any]) -> Report:
    """Call ``call`` and say how it ended: ``("ok", value)`` or its error report; a
    ``sys.exit()`` with code 0 or None is ok, as for a process."""
    try:
        return ("ok", call())
    except SystemExit as exc:
        return ("ok", None) if exc.code in (None, 0) else error_report(exc)
    except BaseException as exc:
        return error_report(exc)


def dump_report(report: Report) -> bytes:
    """``report`` pickled for the parent; an error report instead when its value cannot be
    pickled."""
    try:
        return pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        message = (
            f"its return value {SHORT_REPR.repr(report[1])} cannot be pickled to send it to the "
            f"parent ({type(exc).__name__}: {exc}). Return picklable values such as numbers, "
            "strings, tensors and containers of these"
        )
        return pickle.dumps(("error", traceback.format_exc(), "PicklingError", message))


def load_report(data: bytes) -> Report:
    """The report a worker sent as ``data`` (see `dump_report`)."""
    try:
        report: Report = pickle.loads(data)
    except Exception as exc:
        return ("error", "", "PicklingError", f"its result could not be unpickled: {exc}")
    return report


def _traceback(rank: int, worker_traceback: str, short: bool) -> str:
    """The worker's traceback; ``short`` (a victim of the rank at fault): only the frames of
    the user's code in the last one (the message is above), where it has some."""
    last = worker_traceback.rsplit("Traceback (most recent call last):\n", 1)[-1]
    mine = [entry[0] for entry in _ENTRY.finditer(last) if not is_library(entry["path"])]
    if not (short and mine):
        return f"Traceback of rank {rank}:\n{worker_traceback}"
    return (
        f"Where rank {rank} raised it, in your code (the whole traceback: the error's "
        f"worker_traceback):\n{''.join(mine)}"
    )


def is_library(path: str) -> bool:
    """Whether the file ``path`` holds no code of the user's: it is distbridge's, in one of
    `_LIBRARIES`, or no file at all ("<string>", "<frozen ...>")."""
    if path.startswith("<") or inside(path):
        return True
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root + os.sep) for root in _LIBRARIES)


def sentence(text: str) -> str:
    """``text`` ended with a full stop, unless it already ends with one (or "!", "?"): a
    message that ends with ``[1.0, 2.0].`` must not read ``[1.0, 2.0]..``."""
    return text if text.rstrip().endswith((".", "!", "?")) else f"{text}."


def _outcome(worker: Worker) -> str:
    """One line saying how a worker that ended ended."""
    if worker.report is None:
        return death(worker.process.exitcode)
    if worker.report[0] == "ok":
        return "finished and returned its result"
    return one_line(worker.report[2], worker.report[3])


def one_line(type_name: str, message: str) -> str:
    """``"Type: first line of the message"``, shortened, for the list of the others' reports."""
    first_line = message.strip().splitlines()[0] if message.strip() else ""
    return SHORT_REPR.repr(f"{type_name}: {first_line}" if first_line else type_name).strip("'\"")


def death(exitcode: int | None) -> str:
    """How a worker that sent no report ended, from its exit code: "was killed by signal
    SIGKILL"."""
    exitcode = exitcode or 0
    if exitcode < 0:
        with contextlib.suppress(ValueError):  # a number that names no signal: said as such
            return f"was killed by signal {signal.Signals(-exitcode).name}"
        return f"was killed by signal number {-exitcode}"
    if exitcode == REIMPORT_EXIT_CODE:
        return "called spawn again while importing the main script (no __main__ guard)"
    if exitcode > 0:
        return f"exited with code {exitcode}"
    return "exited without reporting a result (exit code 0, e.g. after os._exit(0))"
