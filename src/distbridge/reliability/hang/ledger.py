"""The collective ledger: each rank's recent facade collectives, always on, for hang verdicts.

Every public collective of a model (``all_reduce``, ``barrier``, ``broadcast_object``, ...)
is recorded when it starts: its sequence number in its group, its name, what it carried
(dtype and shape of a tensor, else the value's type), the group (its global ranks; the
world is ``None``) and the caller's code position (the first frame outside distbridge). The
group's log then says whether the rank has passed it. Only the last ``capacity`` entries of
each group are kept, in a ring of tuples; rendering (file:line, dtype names) waits until
someone reads the ledger (`snapshot`), so recording costs a few hundred nanoseconds. The
recording itself is ``distbridge.models.base.collective``, a wrapper of each method.

Sequence numbers count this rank's calls per group, so the n-th collective of a group is
``#n`` on every member: comparing ledgers across ranks shows who is behind and who called
something else (`distbridge.reliability.hang.verdict`, which reads them back as `Record` rows).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import torch

from distbridge._frames import short_path

__all__ = [
    "CAPACITY_ENV_VAR",
    "DEFAULT_CAPACITY",
    "CollectiveLedger",
    "Entry",
    "GroupLog",
    "Members",
    "Record",
    "positive_env",
]

#: entries kept per group, unless ``DISTBRIDGE_LEDGER_SIZE`` says otherwise
DEFAULT_CAPACITY: Final = 64
CAPACITY_ENV_VAR: Final = "DISTBRIDGE_LEDGER_SIZE"

Members = tuple[int, ...]
#: (seq, op, dtype or type, shape or None, code, instruction offset)
Entry = tuple[int, str, Any, Any, Any, int]
_N = TypeVar("_N", int, float)


def positive_env(name: str, default: _N, convert: Callable[[str], _N], unit: str) -> _N:
    """The positive number that environment variable ``name`` holds (``default`` when it is
    unset); ValueError naming it otherwise (``unit``: what it counts)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = convert(raw)
    except ValueError:
        value = convert("0")
    if not value > 0:  # NaN too
        raise ValueError(f"{name}={raw!r} must be a positive number of {unit}.")
    return value


class GroupLog:
    """The recent collectives of one group (its global ranks ``members``; None: the world)
    on this rank: ``seq``, how many it started (the last one's number); ``passed``, the
    number of the last one that returned or raised (``seq > passed``: this rank is inside
    collective ``seq`` now); the last ``capacity`` entries in ``ring``, and beside it in
    ``raised`` the numbers of those that raised (0 elsewhere)."""

    __slots__ = ("capacity", "members", "passed", "raised", "ring", "seq")

    def __init__(self, members: Members | None, capacity: int) -> None:
        self.members = members
        self.capacity = capacity
        self.seq = 0
        self.passed = 0
        self.raised = [0] * capacity
        self.ring: list[Entry | None] = [None] * capacity

    def entries(self, limit: int | None = None) -> list[Entry]:
        """The kept entries (the last ``limit`` of them), oldest first."""
        kept = self.capacity if limit is None else min(limit, self.capacity)
        first = max(1, self.seq - kept + 1)
        got = [self.ring[seq % self.capacity] for seq in range(first, self.seq + 1)]
        return [entry for entry in got if entry is not None]

    def state(self, seq: int) -> str:
        """Collective ``seq``'s state (``seq >= 1``): "waiting" (this rank is in it now),
        "raised" or "done"."""
        if seq > self.passed:
            return "waiting"
        return "raised" if self.raised[seq % self.capacity] == seq else "done"


def _line(code: Any, offset: int) -> int:
    """The source line of instruction ``offset`` in ``code`` (its first line, if none)."""
    lines = (line for start, end, line in code.co_lines() if start <= offset < end and line)
    return int(next(lines, code.co_firstlineno))


def _what(kind: Any, shape: Any) -> str:
    """``float32[3, 4]`` for a tensor, the type's name otherwise."""
    if isinstance(kind, torch.dtype):
        return f"{str(kind).removeprefix('torch.')}{list(shape)}"
    return getattr(kind, "__name__", str(kind))


@dataclass(frozen=True)
class Record:
    """One collective in a rank's ledger, or in its engine's own record (`engine_trace`):
    its number ``seq`` in its group on this rank (1 for the first; the engine's own count
    for an engine record), the collective's name ``op`` (``"all_reduce"``, the engine's
    ``"gloo:all_reduce"``), the ``group``'s global ranks, sorted (None: the world), ``what``
    it carried (``"float32[3]"``, the engine's ``"Float[3]"``), the ``site`` it was called
    from (``"train.py:13 in main"``; the engine's records have none) and its ``state``:
    "waiting" (the rank is in it now), "done" or "raised"; the engine's: "scheduled",
    "started", "completed", or "ended" (torch retired it without saying it completed: it
    returned or failed)."""

    seq: int
    op: str
    group: Members | None
    what: str = ""
    site: str = "?"
    state: str = "done"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        """A record from `CollectiveLedger.snapshot`'s plain data (JSON), or from an entry of
        a model's ``_engine_trace``."""
        group = data.get("group")
        return cls(
            seq=int(data["seq"]),
            op=str(data["op"]),
            group=None if group is None else tuple(sorted(int(r) for r in group)),
            what=str(data.get("what", "")),
            site=str(data.get("site", "?")),
            state=str(data.get("state", "done")),
        )

    @classmethod
    def rows(cls, rows: object) -> tuple[Record, ...]:
        """The records of ``rows``, a list of `from_dict`'s plain data that another process
        wrote: none when it is not a list, and a row that is not a record is left out."""
        records = []
        for row in rows if isinstance(rows, list) else ():
            with contextlib.suppress(AttributeError, KeyError, TypeError, ValueError):
                records.append(cls.from_dict(row))
        return tuple(records)


class CollectiveLedger:
    """The ledger of one model: a `GroupLog` per group, the world's at hand, each keeping
    ``capacity`` entries (default: ``DISTBRIDGE_LEDGER_SIZE`` or 64). ``members_of`` gives
    the global ranks of a ``group=`` argument that is not None, or None when this rank is not
    a member (or it is not a group: the collective raises its own error, nothing recorded)."""

    def __init__(
        self,
        members_of: Callable[[Any], Members | None],
        capacity: int | None = None,
    ) -> None:
        if capacity is None:
            unit = f"entries per group; unset it for the default ({DEFAULT_CAPACITY})"
            capacity = positive_env(CAPACITY_ENV_VAR, DEFAULT_CAPACITY, int, unit)
        self.capacity = capacity
        self.world = GroupLog(None, self.capacity)
        self._members_of = members_of
        self._logs: dict[Members, GroupLog] = {}
        # id(group object) -> (a weak reference to it, its members)
        self._known: dict[int, tuple[weakref.ref[Any], Members | None]] = {}

    def log_of(self, group: Any) -> GroupLog | None:
        """The log of ``group`` (not None), made on first use; None when this rank is not a
        member or ``group`` is not a group."""
        known = self._known.get(id(group))
        if known is not None and known[0]() is group:
            members = known[1]
        else:
            try:
                members = self._members_of(group)
            except Exception:  # not a group: the collective says so itself
                return None
            if not isinstance(group, list | tuple):  # a list is new (or changed) each call
                # held weakly: a destroyed process group must be freed at once
                with contextlib.suppress(TypeError):  # no weak reference: asked each time
                    self._known[id(group)] = (weakref.ref(group), members)
        if members is None:
            return None
        log = self._logs.get(members)
        if log is None:
            log = self._logs[members] = GroupLog(members, self.capacity)
        return log

    def logs(self) -> list[GroupLog]:
        """Every group's log, the world's first."""
        return [self.world, *self._logs.values()]

    def version(self) -> int:
        """A number that changes whenever a collective starts or ends (to publish changes)."""
        return sum(2 * log.seq + log.passed for log in self.logs())

    def snapshot(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every kept entry (the last ``limit`` per group), per group oldest first, as plain
        data (JSON-ready) with the fields of a `Record`, which reads it back."""
        records: list[dict[str, Any]] = []
        for log in self.logs():
            for seq, op, kind, shape, code, offset in log.entries(limit):
                site = f"{short_path(code.co_filename)}:{_line(code, offset)} in {code.co_name}"
                records.append(
                    {
                        "seq": seq,
                        "op": op,
                        "group": None if log.members is None else list(log.members),
                        "what": _what(kind, shape),
                        "site": site,
                        "state": log.state(seq),
                    }
                )
        return records
