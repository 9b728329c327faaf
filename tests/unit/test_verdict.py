"""The hang verdict against a reference computed from how the ledgers were generated.

Hypothesis draws a job: a program of collectives every rank runs, how far each rank got
(ranks at the front wait in their last collective; the others stopped after theirs), how
many entries each ledger kept, and optionally a point where some ranks called another
collective. The reference says who is behind or who diverged from those choices alone; the
verdict must find the same from the ledgers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distbridge.reliability.hang.ledger import Record
from distbridge.reliability.hang.report import read_dump_dir
from distbridge.reliability.hang.verdict import RankReport, verdict

OPS = ("all_reduce", "all_gather", "broadcast", "barrier", "reduce_scatter")


@dataclass(frozen=True)
class Job:
    program: tuple[str, ...]  # the collective every rank calls at seq i + 1
    reached: tuple[int, ...]  # per rank: the seq of its last collective (0: none)
    waiting: tuple[bool, ...]  # per rank: whether it is inside that last one
    kept: tuple[int, ...]  # per rank: how many entries its ledger kept
    odd_ranks: frozenset[int]  # ranks that call OTHER at seq ``split`` (a divergence)
    split: int
    silent: frozenset[int]


OTHER = "all_to_all"


def _site(seq: int, op: str) -> str:
    return f"train.py:{100 + 10 * seq + OPS.index(op) if op in OPS else 99} in main"


def _records(job: Job, rank: int) -> tuple[Record, ...]:
    last = job.reached[rank]
    records = []
    for seq in range(max(1, last - job.kept[rank] + 1), last + 1):
        op = OTHER if rank in job.odd_ranks and seq == job.split else job.program[seq - 1]
        state = "waiting" if seq == last and job.waiting[rank] else "done"
        records.append(Record(seq, op, None, "float32[2]", _site(seq, op), state))
    return tuple(records)


@st.composite
def hung_jobs(draw: st.DrawFn) -> Job:
    """Ranks stopped at random points: the ones at the front wait in their collective."""
    world = draw(st.integers(2, 6))
    program = tuple(draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=12)))
    reached = tuple(draw(st.integers(0, len(program))) for _ in range(world))
    waiting = tuple(draw(st.booleans()) for _ in range(world))
    kept = tuple(draw(st.integers(1, 5)) for _ in range(world))
    silent = frozenset(draw(st.sets(st.integers(0, world - 1), max_size=world - 1)))
    return Job(program, reached, waiting, kept, frozenset(), 0, silent)


@st.composite
def diverged_jobs(draw: st.DrawFn) -> Job:
    """Every rank reached collective ``split`` and waits in it; some called another op."""
    world = draw(st.integers(2, 6))
    program = tuple(draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=12)))
    split = len(program)
    odd = frozenset(draw(st.sets(st.integers(0, world - 1), min_size=1, max_size=world - 1)))
    kept = tuple(draw(st.integers(1, 5)) for _ in range(world))
    return Job(program, (split,) * world, (True,) * world, kept, odd, split, frozenset())


def _reports(job: Job) -> list[RankReport]:
    return [
        RankReport(
            rank,
            _records(job, rank),
            where=None if rank in job.silent else f"train.py:{rank + 1} in stuck_{rank}",
            answered=rank not in job.silent,
        )
        for rank in range(len(job.reached))
    ]


@settings(max_examples=300, deadline=None)
@given(hung_jobs())
def test_the_verdict_names_who_is_behind(job: Job) -> None:
    found = verdict(_reports(job), len(job.reached))
    top = max(job.reached)
    front_waiting = [r for r, last in enumerate(job.reached) if last == top and job.waiting[r]]
    behind = {r: last for r, last in enumerate(job.reached) if last < top}
    if top > 0 and front_waiting and behind:
        assert found.kind == "hang"
        assert found.seq == top
        assert found.op == job.program[top - 1]
        assert list(found.waiting) == front_waiting
        assert dict(found.behind) == behind
        for rank, last in behind.items():
            said = next(line for line in found.text.splitlines()[1:] if f"rank {rank} " in line)
            if last:
                assert (
                    f"#{last} (train.py:{100 + 10 * last + OPS.index(job.program[last - 1])})"
                    in said
                )
            if rank in job.silent:
                assert "did not answer" in said
            else:
                assert f"stuck_{rank}" in said
    elif top > 0 and all(job.waiting[r] and job.reached[r] == top for r in range(len(job.reached))):
        assert found.kind == "all waiting"
    else:
        assert found.kind == "no hang"
    assert found.silent == tuple(sorted(job.silent))


@settings(max_examples=300, deadline=None)
@given(diverged_jobs())
def test_the_verdict_names_the_ranks_that_diverged(job: Job) -> None:
    world = len(job.reached)
    others = frozenset(range(world)) - job.odd_ranks
    # the reference: the smaller side diverged; a tie blames the side without rank 0
    if len(job.odd_ranks) < len(others) or (len(job.odd_ranks) == len(others) and 0 in others):
        culprits, expected = job.odd_ranks, job.program[-1]
    else:
        culprits, expected = others, OTHER
    found = verdict(_reports(job), world)
    assert found.kind == "diverged"
    assert found.seq == job.split
    assert set(found.diverged) == culprits
    assert found.op == expected
    assert f"at #{job.split} of the world" in found.text


def test_ranks_that_raised_in_the_collective_reached_it() -> None:
    # A dump written after the waiting ranks' own timeout: they raised in #2, rank 2 is behind.
    def ranks_records(last_state: str, count: int) -> tuple[Record, ...]:
        return tuple(
            Record(seq, "all_reduce", None, "float32[2]", f"train.py:{seq} in main",
                   last_state if seq == count else "done")
            for seq in range(1, count + 1)
        )  # fmt: skip

    found = verdict(
        [
            RankReport(0, ranks_records("raised", 2)),
            RankReport(1, ranks_records("waiting", 2)),
            RankReport(2, ranks_records("done", 1), where="train.py:7 in load"),
        ]
    )
    assert found.kind == "hang" and found.waiting == (0, 1) and dict(found.behind) == {2: 1}
    assert found.text.splitlines() == [
        "rank 2 of 3 is stuck at train.py:7 in load; ranks 0, 1 wait in all_reduce #2 "
        "(train.py:2).",
        "Hang in all_reduce #2 of the world (train.py:2): ranks 0, 1 entered it, and it raised "
        "on rank 0.",
        "rank 2 did not reach it: its last collective was #1 (train.py:1); it is at train.py:7 "
        "in load.",
    ]


def test_an_empty_dump_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"holds no rank<r>\.json file: set DISTBRIDGE_HANG"
    ):
        read_dump_dir(str(tmp_path))


def test_a_dump_directory_reads_only_the_ranks_reports(tmp_path: Path) -> None:
    # ``why`` reads the current folder by default: another JSON file there named rank...
    # (or a report file that is not one) used to stop it with a KeyError or AttributeError
    record = {"seq": 1, "op": "all_reduce", "what": "float32[3]", "site": "t.py:1 in f"}
    (tmp_path / "rank0.json").write_text(json.dumps({"rank": 0, "records": [record]}))
    (tmp_path / "ranking.json").write_text(json.dumps([3, 1, 2]))
    (tmp_path / "rank_notes.json").write_text(json.dumps({"notes": "none"}))
    (tmp_path / "rank1.json").write_text("{not json")
    reports, world_size = read_dump_dir(str(tmp_path))
    assert [r.rank for r in reports] == [0] and world_size == 1
    assert reports[0].records[0].op == "all_reduce"


def test_a_group_member_without_a_report_is_silent() -> None:
    # ``why DIR`` takes the world size from the files: rank 2, which left none (killed before
    # its first write), is still a member of the group the others wait in (was a KeyError)
    waiting = Record(1, "all_reduce", (0, 2), "float32[3]", "t.py:1 in f", "waiting")
    found = verdict([RankReport(0, (waiting,)), RankReport(1)], 2)
    assert found.kind == "hang" and dict(found.behind) == {2: 0} and found.silent == (2,)
    assert found.text.splitlines()[0] == (
        "rank 2 of 3 did not reach it; it did not answer; rank 0 waits in all_reduce #1 of "
        "group [0, 2] (t.py:1)."
    )
