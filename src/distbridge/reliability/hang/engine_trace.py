"""The engine's own record of collectives (torch's flight recorder) in the hang verdict.

A model whose engine keeps one gives its tail as plain data (``ModelContract.engine_trace``),
each rank's report carries it (`distbridge.reliability.hang.report`), and `engine_lines`
adds what it says beyond the ledger: for a rank behind, its last engine collective of the
group (a call made on torch.distributed directly is only there); for the ranks waiting,
their engine's collective in flight, or that none is (the engine's timeout ended it, or
what they wait in is not the engine's, e.g. a timed barrier). Pure, like
`distbridge.reliability.hang.verdict`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from distbridge.reliability.hang.ledger import Members, Record

__all__ = [
    "COMPLETED",
    "ENDED",
    "EngineTrace",
    "engine_lines",
    "group_text",
    "ranks_text",
]

COMPLETED = "completed"
#: torch retired the entry without marking it completed (gloo: it returned or failed)
ENDED = "ended"
#: a model's ``_engine_trace``: its engine's record, the last ``n`` entries per group, as
#: ``{"source": ..., "entries": [...]}`` or ``{"source": ..., "note": why none}``; None: none
EngineTrace = Callable[[int], Mapping[str, Any] | None]


def group_text(group: Members | None) -> str:
    """``the world``, or ``group [0, 1]``."""
    return "the world" if group is None else f"group {list(group)}"


def ranks_text(ranks: Iterable[int]) -> str:
    """``rank 2``, or ``ranks 0, 1`` (sorted)."""
    ordered = sorted(ranks)
    word = "rank" if len(ordered) == 1 else "ranks"
    return f"{word} {', '.join(map(str, ordered))}"


def _last(records: Sequence[Record], group: Members | None) -> Record | None:
    return max((r for r in records if r.group == group), key=lambda r: r.seq, default=None)


def engine_lines(
    engines: Mapping[int, Sequence[Record]],
    group: Members | None,
    waiting: Iterable[int],
    behind: Iterable[int],
    returned: Iterable[int],
) -> list[str]:
    """The verdict's lines from the engine records (rank -> records) about ``group``.

    Each rank ``behind``'s last engine collective there, with its state (``ended`` reads
    ``completed`` for the ranks that ``returned`` from every collective their ledger holds
    in ``group``); then, for the ranks ``waiting`` in the group's collective, their engine's
    last one there: in flight (``scheduled, not completed``), or none in flight (the ledger's
    collective is none of the engine's, e.g. a timed barrier, or the engine ended it), the
    ranks with the same on one line.
    """
    done, name = set(returned), group_text(group)
    lines = []
    for rank in sorted(behind):
        last = _last(engines.get(rank, ()), group)
        if last is not None:
            state = COMPLETED if last.state == ENDED and rank in done else last.state
            lines.append(
                f"rank {rank} in torch's flight recorder: its last engine collective was "
                f"{last.op} #{last.seq} of {name} ({state})."
            )
    alike: dict[tuple[str, int, str], list[int]] = {}
    for rank in sorted(waiting):
        last = _last(engines.get(rank, ()), group)
        if last is not None:
            alike.setdefault((last.op, last.seq, last.state), []).append(rank)
    for (op, seq, state), ranks in alike.items():  # by their lowest rank, as they came
        if state in (ENDED, COMPLETED):  # the ledger's collective is not the engine's, or failed
            said = f"no engine collective of {name} in flight; the last was {op} #{seq} ({state})"
        else:
            said = f"{op} #{seq} of {name} is {state}, not completed"
        lines.append(f"{ranks_text(ranks)} in torch's flight recorder: {said}.")
    return lines
