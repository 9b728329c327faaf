"""The exceptions distbridge raises.

A bad argument (wrong type, bad op, rank out of range) raises a plain ``TypeError``
or ``ValueError`` before anything is sent, on every computation model alike. What
goes wrong in the job itself derives from `DistributedError` (a ``RuntimeError``).
Errors that are both, such as an unavailable backend, derive from both, so either
``except`` catches them.
"""

from __future__ import annotations

import copyreg
import difflib
from collections.abc import Iterable, Mapping

__all__ = [
    "ArgumentTypeError",
    "BackendUnavailableError",
    "BarrierTimeout",
    "CollectiveMismatch",
    "CollectiveTimeout",
    "DistributedError",
    "GroupArgumentError",
    "PeerFailed",
    "PicklingError",
    "SpawnTimeoutError",
    "WorkerFailedError",
    "suggest",
]


class DistributedError(RuntimeError):
    """Base class of every error distbridge raises."""

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its message and attributes, rebuilt without calling ``__init__`` (whose
        arguments differ by subclass; pickle's default would call it with the message only)."""
        state = {"args": self.args, **vars(self)}
        return (copyreg.__newobj__, (type(self),), state)  # type: ignore[attr-defined]


class BackendUnavailableError(DistributedError, ValueError):
    """The backend asked for is unknown or cannot run on this machine."""


class ArgumentTypeError(ValueError, TypeError):
    """An argument of the wrong type where ignite raises ``ValueError``: both, so that
    ``except ValueError`` (ignite's) and ``except TypeError`` catch it."""


class GroupArgumentError(ArgumentTypeError):
    """A ``group=`` or ``new_group()`` argument that is no group."""


class PicklingError(DistributedError, TypeError):
    """A function or argument given to ``spawn`` cannot be sent to a worker process."""


class WorkerFailedError(DistributedError):
    """A worker process raised, exited with an error, or was killed by a signal.

    Attributes:
        rank: the global rank of the first worker that failed.
        local_rank: its index on this machine.
        exitcode: its exit code (negative: killed by that signal), or None if it raised.
        worker_traceback: the worker's formatted traceback, or "" if it had none.
        peer_reports: what the other workers of this machine said before they were stopped,
            one line per global rank, e.g. ``{0: "PeerFailed: Rank 1 failed: ..."}``; the
            workers that were still running are absent.
    """

    def __init__(
        self,
        message: str,
        *,
        rank: int,
        local_rank: int,
        exitcode: int | None,
        worker_traceback: str = "",
        peer_reports: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.local_rank = local_rank
        self.exitcode = exitcode
        self.worker_traceback = worker_traceback
        self.peer_reports = dict(peer_reports or {})


class PeerFailed(DistributedError):  # noqa: N818 - the name the issue asks for
    """Another rank of the job failed, so a collective on this rank cannot complete.

    Raised at this rank's next collective or barrier (or in the one it is blocked in)
    instead of a hang or the backend's "Connection closed by peer".

    Attributes:
        rank: the global rank that failed first.
        summary: one line saying how, e.g. ``"ValueError: bad batch"``.
    """

    def __init__(self, rank: int, summary: str, detail: str = "") -> None:
        message = f"Rank {rank} failed: {summary.rstrip('.')}."
        super().__init__(f"{message} {detail}" if detail else message)
        self.rank = rank
        self.summary = summary
        self.detail = detail


class SpawnTimeoutError(DistributedError, TimeoutError):
    """A spawned job ran past its ``job_timeout``; every worker was stopped."""


class BarrierTimeout(DistributedError, TimeoutError):  # noqa: N818  (the name in the issue)
    """``barrier(timeout=...)`` ran out of time before every member arrived.

    Attributes:
        missing_ranks: the global ranks that had not arrived, sorted.
        name: the barrier's name, or None.
        timeout: the timeout in seconds.
    """

    def __init__(
        self, message: str, *, missing_ranks: tuple[int, ...], name: str | None, timeout: float
    ) -> None:
        super().__init__(message)
        self.missing_ranks = missing_ranks
        self.name = name
        self.timeout = timeout


class CollectiveTimeout(DistributedError, TimeoutError):  # noqa: N818  (as BarrierTimeout)
    """A collective ran past the backend's timeout (the process group's ``timeout``); the
    message says why, from every rank's ledger: which rank is behind and where it is, or
    which ranks called another collective.

    Attributes:
        verdict: the verdict's text (see ``distbridge.reliability.hang.verdict``).
    """

    def __init__(self, message: str, *, verdict: str = "") -> None:
        super().__init__(message)
        self.verdict = verdict


class CollectiveMismatch(DistributedError):  # noqa: N818  (the name the issue asks for)
    """Debug mode: the ranks were about to run different collectives, or collectives with
    arguments that do not match, or some ranks never arrived. Raised on every rank that
    arrived, before anything is sent; the message has a table of what each rank called.

    Attributes:
        fingerprints: global rank -> what it called, e.g.
            ``"all_reduce(type=tensor, dtype=float32, shape=[3], op=SUM)"``.
        call_sites: global rank -> ``file:line in function`` of its call.
        missing_ranks: the ranks that did not arrive in time, sorted (empty for a mismatch).
    """

    def __init__(
        self,
        message: str,
        *,
        fingerprints: Mapping[int, str],
        call_sites: Mapping[int, str],
        missing_ranks: tuple[int, ...] = (),
    ) -> None:
        super().__init__(message)
        self.fingerprints = dict(fingerprints)
        self.call_sites = dict(call_sites)
        self.missing_ranks = missing_ranks


def suggest(value: str, choices: Iterable[str]) -> str:
    """Return `` Did you mean 'x'?`` for the closest choice, or "" when none is close.

    Case does not count: ``'NCCL'`` gets ``'nccl'``."""
    by_folded: dict[str, str] = {}
    for choice in choices:
        by_folded.setdefault(choice.casefold(), choice)
    close = difflib.get_close_matches(value.casefold(), list(by_folded), n=1, cutoff=0.6)
    return f" Did you mean {by_folded[close[0]]!r}?" if close else ""
