"""What the hang verdict reads and says, as plain data: each rank's ledger `Record`, what is
known of a rank (`RankReport`) and the finding (`Verdict`); `distbridge.reliability.hang.verdict`
makes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from distbridge.reliability.hang.engine_trace import EngineRecord

__all__ = ["Members", "RankReport", "Record", "Verdict"]

Members = tuple[int, ...]


@dataclass(frozen=True)
class Record:
    """One collective in a rank's ledger.

    Attributes:
        seq: its number in its group on this rank (1 for the first).
        op: the collective's name, e.g. ``"all_reduce"``.
        group: the group's global ranks, sorted; None for the world.
        what: what it carried, e.g. ``"float32[3]"``.
        site: where it was called, ``"train.py:13 in main"``.
        state: "waiting" (the rank is in it now), "done" or "raised".
    """

    seq: int
    op: str
    group: Members | None
    what: str
    site: str
    state: str

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        """A record from `CollectiveLedger.snapshot`'s plain data (JSON)."""
        group = data.get("group")
        return cls(
            seq=int(data["seq"]),
            op=str(data["op"]),
            group=None if group is None else tuple(int(r) for r in group),
            what=str(data.get("what", "")),
            site=str(data.get("site", "?")),
            state=str(data.get("state", "done")),
        )


@dataclass(frozen=True)
class RankReport:
    """What is known of one rank.

    Attributes:
        rank: its global rank.
        records: its ledger (any order).
        where: where its main thread is now (``"train.py:5 in stuck_here"``), if it said.
        answered: False when the rank did not answer: ``records`` are what it last published.
        note: why it did not answer, when known (``"its process was killed by SIGKILL"``).
        asked: False when nobody asked it (``records`` were read as it last published them,
            e.g. by ``spawn``'s parent): then not answering is no finding.
        engine: the tail of its engine's own record (torch's flight recorder), if it has one.
        died_in: where its main thread was when its process died, from its fault dump: the
            user's line that called distbridge and the names of the functions of distbridge
            it was in (``("train.py:9 in main", ("all_reduce", ...))``), if known.
    """

    rank: int
    records: tuple[Record, ...] = ()
    where: str | None = None
    answered: bool = True
    note: str = ""
    asked: bool = True
    engine: tuple[EngineRecord, ...] = ()
    died_in: tuple[str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class Verdict:
    """The finding, as text and as data.

    Attributes:
        text: the verdict, one finding a line.
        kind: "diverged", "mismatched", "hang", "all waiting" (no rank is behind) or
            "no hang".
        group: the group of the finding (None: the world).
        seq: the collective's number in that group.
        op: the collective the majority (diverged) or the waiting ranks (hang) are in.
        waiting: ranks waiting in it.
        behind: rank -> its last collective's number in the group (0: none), for the ranks
            that did not reach it.
        diverged: the ranks that called something else (or passed another dtype or shape).
        silent: the ranks that did not answer.
    """

    text: str
    kind: str
    group: Members | None = None
    seq: int | None = None
    op: str | None = None
    waiting: Members = ()
    behind: Mapping[int, int] = field(default_factory=dict)
    diverged: Members = ()
    silent: Members = ()
