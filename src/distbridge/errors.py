"""The exceptions distbridge raises.

A bad argument (wrong type, bad op, rank out of range) raises a plain ``TypeError``
or ``ValueError`` before anything is sent, on every computation model alike. What
goes wrong in the job itself derives from `DistributedError` (a ``RuntimeError``).
Errors that are both, such as an unavailable backend, derive from both, so either
``except`` catches them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "BackendUnavailableError",
    "DistributedError",
    "PicklingError",
    "SpawnTimeoutError",
    "WorkerFailedError",
    "suggest",
]


class DistributedError(RuntimeError):
    """Base class of every error distbridge raises."""


class BackendUnavailableError(DistributedError, ValueError):
    """The backend asked for is unknown or cannot run on this machine."""


class PicklingError(DistributedError, TypeError):
    """A function or argument given to ``spawn`` cannot be sent to a worker process."""


class WorkerFailedError(DistributedError):
    """A worker process raised, exited with an error, or was killed by a signal.

    Attributes:
        rank: the global rank of the first worker that failed.
        local_rank: its index on this machine.
        exitcode: its exit code (negative: killed by that signal), or None if it raised.
        worker_traceback: the worker's formatted traceback, or "" if it had none.
    """

    def __init__(
        self,
        message: str,
        *,
        rank: int,
        local_rank: int,
        exitcode: int | None,
        worker_traceback: str = "",
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.local_rank = local_rank
        self.exitcode = exitcode
        self.worker_traceback = worker_traceback

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild_worker_failed,
            (str(self), self.rank, self.local_rank, self.exitcode, self.worker_traceback),
        )


def _rebuild_worker_failed(
    message: str, rank: int, local_rank: int, exitcode: int | None, worker_traceback: str
) -> WorkerFailedError:
    return WorkerFailedError(
        message,
        rank=rank,
        local_rank=local_rank,
        exitcode=exitcode,
        worker_traceback=worker_traceback,
    )


class SpawnTimeoutError(DistributedError, TimeoutError):
    """A spawned job ran past its ``job_timeout``; every worker was stopped."""


def suggest(value: str, choices: Iterable[str]) -> str:
    """Return `` Did you mean 'x'?`` for the closest choice, or "" when none is close."""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""
