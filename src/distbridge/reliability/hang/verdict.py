"""The hang verdict: from every rank's ledger (and where each rank is now), who is at fault.

A pure function of plain data: it runs the same in a hung job, in ``spawn``'s parent, on a
dump directory after the job is gone, or in a test. Its first line names the rank at fault
(`headline` finds it in an error's message); for example::

    rank 2 of 3 is stuck at train.py:5 in stuck_here; ranks 0, 1 wait in all_reduce #4
    (train.py:13).
    Hang in all_reduce #4 of the world (train.py:13): ranks 0, 1 are waiting in it.
    rank 2 did not reach it: its last collective was #3 (train.py:10); it is at
    train.py:5 in stuck_here.

It gives the first of these findings: **divergence** (at one number of a group, ranks called
different collectives), **mismatch** (one collective of `MUST_MATCH` with another dtype or
shape on some ranks), both against the majority's call (a tie: the lowest rank's side);
**hang** (some members of a group wait in its collective ``#n``, others have not started
it: where each of those is now); **all waiting** (every member in the same one). A rank
whose process died in a collective (`RankReport.died_in`) counts as in the one the others
are in at that site. A rank that did not answer is named, with the ledger it last
published; lines from the engine's own record follow (`engine_trace`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from distbridge.reliability.hang.engine_trace import engine_lines, group_text, ranks_text
from distbridge.reliability.hang.ledger import Members, Record

__all__ = ["MUST_MATCH", "RankReport", "Verdict", "headline", "verdict"]

WAITING = "waiting"
#: the collectives whose tensors must have one dtype and shape on every rank
MUST_MATCH = frozenset({"all_reduce", "reduce", "all_gather", "reduce_scatter"})
#: a line (or the sentence after ``timed out. ``) that names the rank at fault
_HEADLINE = re.compile(r"(?:^|\. )(ranks? [\d, ]+ of \d+ .*)$", re.MULTILINE)


@dataclass(frozen=True)
class RankReport:
    """What is known of one ``rank`` (global): its ledger ``records`` (any order); ``where``
    its main thread is now (``"train.py:5 in stuck_here"``), if it said; ``answered``: False
    when it did not answer (``records`` are what it last published), ``note`` saying why when
    known (``"its process was killed by SIGKILL"``); ``asked``: False when nobody asked it
    (``spawn``'s parent read what it last published), so not answering is no finding; the
    tail of its ``engine``'s own record (torch's flight recorder), if it has one; and
    ``died_in``: where its process died in distbridge, from its fault dump, if known
    (`stacks.died_in`: ``("train.py:9 in main", ("all_reduce", ...))``)."""

    rank: int
    records: tuple[Record, ...] = ()
    where: str | None = None
    answered: bool = True
    note: str = ""
    asked: bool = True
    engine: tuple[Record, ...] = ()
    died_in: tuple[str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class Verdict:
    """The finding as ``text``, one finding a line, and as data: its ``kind`` ("diverged",
    "mismatched", "hang", "all waiting": no rank is behind, or "no hang"); its ``group``
    (None: the world), the collective's number ``seq`` there and its ``op`` (the majority's
    when diverged, the waiting ranks' in a hang); the ranks ``waiting`` in it, those
    ``behind`` (rank -> its last collective's number in the group, 0: none), those that
    ``diverged`` (called something else, or passed another dtype or shape) and the
    ``silent`` ones, which did not answer."""

    text: str
    kind: str
    group: Members | None = None
    seq: int | None = None
    op: str | None = None
    waiting: Members = ()
    behind: Mapping[int, int] = field(default_factory=dict)
    diverged: Members = ()
    silent: Members = ()


def _line(site: str) -> str:
    """``train.py:13`` of ``train.py:13 in main``."""
    return site.split(" in ", 1)[0]


def _named(record: Record) -> str:
    """``all_reduce #4 of the world (train.py:13)``."""
    return f"{record.op} #{record.seq} of {group_text(record.group)} ({_line(record.site)})"


def headline(message: str) -> str | None:
    """The verdict's line naming the rank at fault (``rank 2 of 3 is stuck at ...``) in an
    error's message, or None."""
    found = _HEADLINE.search(message)
    return None if found is None else found.group(1)


class _Ledgers:
    """The reports, indexed: group -> rank -> seq -> record."""

    def __init__(self, reports: Mapping[int, RankReport], world_size: int) -> None:
        self.reports = reports
        self.world_size = world_size
        self.by_group: dict[Members | None, dict[int, dict[int, Record]]] = {}
        for rank, report in reports.items():
            for record in report.records:
                self.by_group.setdefault(record.group, {}).setdefault(rank, {})[record.seq] = record
        for rank, report in reports.items():
            if report.died_in is not None:
                self._died_in(rank, *report.died_in)

    def _died_in(self, rank: int, site: str, names: tuple[str, ...]) -> None:
        """Put the collective ``rank`` died in into its ledger: the newest one of the others'
        called at ``site``, whose op is one of ``names``, that its ledger lacks; carrying
        what its own earlier calls there carried."""
        line = _line(site)
        found = [
            record
            for group, per_rank in self.by_group.items()
            for other, records in per_rank.items()
            if other != rank
            for record in records.values()
            if record.op in names
            and _line(record.site) == line
            and record.seq > getattr(self.last(group, rank), "seq", 0)
        ]
        if not found:
            return
        newest = max(found, key=lambda record: record.seq)
        mine = self.by_group.setdefault(newest.group, {}).setdefault(rank, {})
        earlier = [
            r.what for _, r in sorted(mine.items()) if r.op == newest.op and _line(r.site) == line
        ]
        mine[newest.seq] = replace(newest, what=(earlier or [""])[-1], site=site, state="raised")

    def groups(self) -> list[Members | None]:
        """Every group seen, the world first, then by members."""
        return sorted(self.by_group, key=lambda group: (group is not None, group or ()))

    def members(self, group: Members | None) -> list[int]:
        return list(range(self.world_size)) if group is None else list(group)

    def last(self, group: Members | None, rank: int) -> Record | None:
        records = self.by_group.get(group, {}).get(rank)
        return records[max(records)] if records else None

    def waiting_elsewhere(self, rank: int, group: Members | None) -> Record | None:
        """The collective of another group that ``rank`` waits in, if any."""
        for other in self.groups():
            if other != group:
                last = self.last(other, rank)
                if last is not None and last.state == WAITING:
                    return last
        return None


#: what `_split` finds
_Split = tuple[Members | None, int, dict[str, list[int]], dict[str, Record], str, Members]


def _split(
    ledgers: _Ledgers, key: Callable[[Record], str | None], said: Callable[[str, str], str]
) -> _Split | None:
    """The first collective (group, seq) whose records fall on two sides or more of ``key``
    (a record whose key is None takes no side): its group and number, the sides (key ->
    ranks), the expected side (most ranks'; a tie: the lowest rank's) first, a record of
    each, the odd sides as said (``rank 1 of 3 called broadcast (a.py:3)``: their ranks, the
    first with the world's size, then ``said(side, its site)``) and the ranks on them."""
    for group in ledgers.groups():
        per_rank = ledgers.by_group[group]
        for seq in sorted({seq for records in per_rank.values() for seq in records}):
            sides: dict[str, list[int]] = {}
            for rank, records in sorted(per_rank.items()):
                if seq in records and (side := key(records[seq])) is not None:
                    sides.setdefault(side, []).append(rank)
            if len(sides) >= 2:
                expected = min(sides, key=lambda side: (-len(sides[side]), min(sides[side])))
                sides = {expected: sides.pop(expected), **sides}
                first = {side: per_rank[ranks[0]][seq] for side, ranks in sides.items()}
                odd = list(sides)[1:]
                size = ledgers.world_size
                text = " and ".join(
                    f"{_who(sides[s], size * (s == odd[0]))} {said(s, _line(first[s].site))}"
                    for s in odd
                )
                diverged = tuple(sorted(r for s in odd for r in sides[s]))
                return group, seq, sides, first, text, diverged
    return None


def _who(ranks: list[int], world_size: int = 0) -> str:
    """``rank 1``, or with the world's size (first in a headline) ``rank 1 of 3``."""
    return f"{ranks_text(ranks)} of {world_size}" if world_size else ranks_text(ranks)


def _divergence(ledgers: _Ledgers) -> Verdict | None:
    found = _split(ledgers, lambda record: record.op, lambda op, site: f"called {op} ({site})")
    if found is None:
        return None
    group, seq, sides, first, odd, diverged = found
    expected = next(iter(sides))
    text = (
        f"{odd} where {ranks_text(sides[expected])} called {expected} "
        f"({_line(first[expected].site)}) at #{seq} of {group_text(group)}: the ranks "
        "diverged; every rank must call the same collectives in the same order."
    )
    return Verdict(text, "diverged", group, seq, expected, diverged=diverged)


def _tensor_of(record: Record) -> str | None:
    """What a collective of `MUST_MATCH` carried, when it is a tensor (``float32[3]``)."""
    return record.what if record.op in MUST_MATCH and "[" in record.what else None


def _mismatch(ledgers: _Ledgers) -> Verdict | None:
    found = _split(ledgers, _tensor_of, lambda what, _: f"passed {what}")
    if found is None:
        return None
    group, seq, sides, first, odd, diverged = found
    expected, first_odd = list(sides)[:2]
    op = first[expected].op
    dtype = {what.split("[", 1)[0] for what in sides}
    lines = [
        f"{odd} to {op} #{seq} of {group_text(group)} ({_line(first[first_odd].site)}) where "
        f"{ranks_text(sides[expected])} passed {expected} ({_line(first[expected].site)}): "
        f"the same collective with another {'dtype' if len(dtype) > 1 else 'shape'}; every "
        f"rank must pass one dtype and shape to {op} (gloo aborts a rank that receives "
        "another size)."
    ]
    every = tuple(sorted(r for ranks in sides.values() for r in ranks))
    for rank in every:
        report = ledgers.reports[rank]
        if report.died_in is not None:
            note = report.note or "its process ended"
            lines.append(f"rank {rank} died in it ({note}): counted with what its earlier "
                         "calls there passed.")  # fmt: skip
    return Verdict("\n".join(lines), "mismatched", group, seq, op, every, diverged=diverged)


def _behind_line(ledgers: _Ledgers, rank: int, group: Members | None) -> str:
    report = ledgers.reports[rank]
    last = ledgers.last(group, rank)
    line = f"rank {rank} did not reach it: "
    if last is None:
        line += f"it has called no collective of {group_text(group)}"
    else:
        line += f"its last collective was #{last.seq} ({_line(last.site)})"
    elsewhere = ledgers.waiting_elsewhere(rank, group)
    if elsewhere is not None:
        line += f"; it is waiting in {_named(elsewhere)}"
    if not report.answered:
        note = report.note
        if report.asked:
            line += f"; it did not answer{f' ({note})' if note else ''}"
            line += ", so this is the ledger it last published" if report.records else ""
        else:
            line += f", as last published{'; ' + note if note else ''}"
    elif report.where:
        line += f"; it is at {report.where}"
    return line + "."


def _culprit(ledgers: _Ledgers, rank: int, group: Members | None, who: str) -> str:
    """What a rank that is behind does, for the headline: ``rank 2 is stuck at ...``."""
    report = ledgers.reports[rank]
    elsewhere = ledgers.waiting_elsewhere(rank, group)
    if elsewhere is not None:
        return f"{who} waits in {_named(elsewhere)}"
    if report.answered and report.where:
        return f"{who} is stuck at {report.where}"
    if report.note:
        return f"{who} did not reach it: {report.note}"
    return f"{who} did not reach it{'; it did not answer' if report.asked else ''}"


def _hang(ledgers: _Ledgers) -> Verdict | None:
    for group in ledgers.groups():
        members = ledgers.members(group)
        lasts = {rank: ledgers.last(group, rank) for rank in members}
        seqs = {rank: 0 if last is None else last.seq for rank, last in lasts.items()}
        top = max(seqs.values(), default=0)
        # a rank that raised in it (its own timeout, after the hang) also reached it
        waiting = {
            r: rec for r, rec in lasts.items() if rec and rec.seq == top and rec.state != "done"
        }
        behind = {rank: seq for rank, seq in seqs.items() if seq < top}
        if not waiting or not behind:
            continue
        record = next(iter(waiting.values()))
        raised = [r for r, rec in waiting.items() if rec.state != WAITING]
        if raised:
            how = f"{ranks_text(waiting)} entered it, and it raised on {ranks_text(raised)}"
        else:
            how = f"{ranks_text(waiting)} {'is' if len(waiting) == 1 else 'are'} waiting in it"
        where = "" if group is None else f" of {group_text(group)}"
        first, size = min(behind), ledgers.world_size
        culprits = [
            _culprit(ledgers, r, group, _who([r], size * (r == first))) for r in sorted(behind)
        ]
        lines = [
            f"{'; '.join(culprits)}; {ranks_text(waiting)} wait{'s' if len(waiting) == 1 else ''} "
            f"in {record.op} #{top}{where} ({_line(record.site)}).",
            f"Hang in {record.op} #{top} of {group_text(group)} ({_line(record.site)}): {how}.",
        ]
        lines += [_behind_line(ledgers, rank, group) for rank in sorted(behind)]
        return Verdict(
            "\n".join(lines), "hang", group, top, record.op, tuple(sorted(waiting)), behind
        )
    return None


def _all_waiting(ledgers: _Ledgers) -> Verdict | None:
    for group in ledgers.groups():
        members = ledgers.members(group)
        lasts = [ledgers.last(group, rank) for rank in members]
        waiting = [r for r in lasts if r is not None and r.state == WAITING]
        if waiting and len(waiting) == len(lasts) and len({r.seq for r in waiting}) == 1:
            record = waiting[0]
            text = (
                f"Every member of {group_text(group)} is waiting in {record.op} "
                f"#{record.seq} ({_line(record.site)}): no rank is behind, so the "
                "backend itself did not complete it (a network problem, a device hang)."
            )
            return Verdict(text, "all waiting", group, record.seq, record.op, tuple(members))
    return None


def _silent_line(ledgers: _Ledgers, rank: int) -> str:
    """What is known of ``rank``, which did not answer: its last published collective."""
    note = f" ({ledgers.reports[rank].note})" if ledgers.reports[rank].note else ""
    known = next((last for g in ledgers.groups() if (last := ledgers.last(g, rank))), None)
    if known is None:
        return f"rank {rank} did not answer{note} and left no ledger."
    return f"rank {rank} did not answer{note}; its last published collective was {_named(known)}."


def verdict(reports: Iterable[RankReport], world_size: int = 0) -> Verdict:
    """Who is at fault in a stuck job of ``world_size`` ranks (at least the highest rank
    reported, or in a reported group, plus one), from a `RankReport` per rank (a rank without
    one is taken as silent): a `Verdict`, whose ``text`` names the ranks at fault, the
    collective and the sites."""
    by_rank = {report.rank: report for report in reports}
    grouped = {m for report in by_rank.values() for r in report.records for m in r.group or ()}
    size = max([world_size, *(rank + 1 for rank in {*by_rank, *grouped})])
    for rank in range(size):
        by_rank.setdefault(rank, RankReport(rank, answered=False))
    ledgers = _Ledgers(by_rank, size)
    silent = sorted(r for r, rep in by_rank.items() if not rep.answered and rep.asked)
    found = _divergence(ledgers) or _mismatch(ledgers) or _hang(ledgers) or _all_waiting(ledgers)
    if found is None:
        found = Verdict("No rank is waiting in a collective of distbridge.", "no hang")
    named = {*found.behind, *found.waiting, *found.diverged}
    engines = {rank: report.engine for rank, report in by_rank.items() if report.engine}
    said: list[str] = []
    if engines:  # the ranks behind that returned from every collective of the group
        lasts = {r: ledgers.last(found.group, r) for r in found.behind}
        returned = [r for r, last in lasts.items() if last is None or last.state == "done"]
        said = engine_lines(engines, found.group, found.waiting, found.behind, returned)
    extra = [_silent_line(ledgers, rank) for rank in silent if rank not in named]
    return replace(found, text="\n".join([found.text, *said, *extra]), silent=tuple(silent))
