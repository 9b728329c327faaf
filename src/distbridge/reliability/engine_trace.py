"""The backend's own record of recent collectives in the hang verdict (torch's flight recorder).

The ledger records distbridge's public collectives; some backends also record what their
engine ran (torch.distributed's flight recorder, on gloo and NCCL). A model that has such a
record gives its tail as plain data (``ModelPrimitives.engine_trace``), each rank's hang
report carries it, and the verdict adds what it says beyond the ledger:

- for a rank that is behind, its last engine collective of the group and its state
  (``rank 2 in torch's flight recorder: its last engine collective was gloo:all_reduce #3
  of the world (completed).``): where a rank called torch.distributed directly, the ledger
  never saw it;
- for the ranks waiting in the collective, the engine's state of their last one when it did
  not complete (``ranks 0, 1 in torch's flight recorder: gloo:all_reduce #4 of the world is
  scheduled, not completed.``, or ``has ended in the engine without returning`` once the
  engine's timeout ended it).

Pure functions of plain data, like `distbridge.reliability.verdict`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["COMPLETED", "ENDED", "EngineRecord", "engine_lines", "engine_records"]

COMPLETED = "completed"
#: torch retired the entry without marking it completed (gloo: it returned or failed)
ENDED = "ended"
Members = tuple[int, ...]


@dataclass(frozen=True)
class EngineRecord:
    """One collective in a rank's engine record.

    Attributes:
        seq: its number in its group, as the engine counts (torch's ``collective_seq_id``).
        op: the engine's name for it, e.g. ``"gloo:all_reduce"``.
        group: the group's global ranks, sorted; None for the world.
        what: what it carried, e.g. ``"Float[3]"``.
        state: the engine's state: ``"scheduled"``, ``"started"``, ``"completed"``, or
            ``"ended"`` (torch retired it without saying it completed: it returned or failed).
    """

    seq: int
    op: str
    group: Members | None
    what: str
    state: str

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineRecord:
        """A record from a model's ``engine_trace`` entry (JSON)."""
        group = data.get("group")
        return cls(
            seq=int(data["seq"]),
            op=str(data["op"]),
            group=None if group is None else tuple(sorted(int(r) for r in group)),
            what=str(data.get("what", "")),
            state=str(data.get("state", "")),
        )


def engine_records(trace: object) -> tuple[EngineRecord, ...]:
    """The records of a report's ``engine`` part (``{"entries": [...]}``); entries that are
    not plain records are left out (the data comes from another process)."""
    entries = trace.get("entries") if isinstance(trace, Mapping) else None
    if not isinstance(entries, list):
        return ()
    records = []
    for entry in entries:
        try:
            records.append(EngineRecord.from_dict(entry))
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return tuple(records)


def _group_name(group: Members | None) -> str:
    return "the world" if group is None else f"group {list(group)}"


def _ranks(ranks: Iterable[int]) -> str:
    ordered = sorted(ranks)
    word = "rank" if len(ordered) == 1 else "ranks"
    return f"{word} {', '.join(map(str, ordered))}"


def _last(records: Sequence[EngineRecord], group: Members | None) -> EngineRecord | None:
    mine = [r for r in records if r.group == group]
    return max(mine, key=lambda r: r.seq) if mine else None


def _pending(state: str) -> str:
    """What a waiting rank's engine says of its collective in state ``state``."""
    if state == ENDED:  # the engine is done with it, yet the rank did not return from it
        return "has ended in the engine without returning (a timeout or an error)"
    return f"is {state}, not completed"


def engine_lines(
    engines: Mapping[int, Sequence[EngineRecord]],
    group: Members | None,
    waiting: Iterable[int],
    behind: Iterable[int],
    returned: Iterable[int] = (),
) -> list[str]:
    """The verdict's lines from the engine records (rank -> records) about ``group``.

    Each rank ``behind``'s last engine collective there, with its state (``ended`` reads
    ``completed`` for the ranks that ``returned`` from every collective their ledger holds
    in ``group``); then, for the ranks ``waiting`` in the group's collective whose engine
    did not complete its last one there, that one, the ranks with the same on one line.
    """
    done = set(returned)
    lines = []
    for rank in sorted(behind):
        last = _last(engines.get(rank, ()), group)
        if last is not None:
            state = COMPLETED if last.state == ENDED and rank in done else last.state
            lines.append(
                f"rank {rank} in torch's flight recorder: its last engine collective was "
                f"{last.op} #{last.seq} of {_group_name(group)} ({state})."
            )
    pending: dict[tuple[str, int, str], list[int]] = {}
    for rank in sorted(waiting):
        last = _last(engines.get(rank, ()), group)
        if last is not None and last.state != COMPLETED:
            pending.setdefault((last.op, last.seq, last.state), []).append(rank)
    for (op, seq, state), ranks in sorted(pending.items(), key=lambda item: min(item[1])):
        lines.append(
            f"{_ranks(ranks)} in torch's flight recorder: {op} #{seq} of {_group_name(group)} "
            f"{_pending(state)}."
        )
    return lines
