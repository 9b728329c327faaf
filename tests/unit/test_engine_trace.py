"""The flight recorder's lines of the hang verdict, and the reduction of torch's record.

Hypothesis draws a hung job (ranks waiting in collective ``#top`` of the world, the others
behind) and, per rank, an engine record of random collectives, groups and states. The
reference recomputes from the drawn records alone what each line must say: the last engine
collective of each rank behind (its state, ``ended`` read as ``completed`` where the rank
returned from its collectives), and which waiting ranks share a collective their engine did
not complete. The reduction of torch's entries is checked against a plain recount too.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distbridge.models.native import flight_recorder
from distbridge.models.serial import SerialModel
from distbridge.reliability.hang import report as hang_report
from distbridge.reliability.hang.ledger import CollectiveLedger, Record
from distbridge.reliability.hang.verdict import RankReport, verdict

OPS = ("gloo:all_reduce", "gloo:all_gather", "gloo:broadcast", "gloo:barrier")
STATES = ("scheduled", "started", "completed", "ended")
GROUPS: tuple[tuple[int, ...] | None, ...] = (None, (0, 1))


def _ledger(rank: int, last: int, state: str) -> tuple[Record, ...]:
    return tuple(
        Record(seq, "all_reduce", None, "float32[2]", f"train.py:{seq} in main",
               state if seq == last else "done")
        for seq in range(1, last + 1)
    )  # fmt: skip


engine_entries = st.lists(
    st.builds(
        Record,
        seq=st.integers(1, 6),
        op=st.sampled_from(OPS),
        group=st.sampled_from(GROUPS),
        what=st.just("Float[3]"),
        state=st.sampled_from(STATES),
    ),
    max_size=6,
)


@st.composite
def hung_jobs(draw: st.DrawFn) -> tuple[int, dict[int, int], dict[int, str], list[RankReport]]:
    """(top, rank -> last ledger seq, rank -> its last record's state, reports)."""
    world = draw(st.integers(2, 5))
    top = draw(st.integers(1, 5))
    behind = draw(st.sets(st.integers(0, world - 1), min_size=1, max_size=world - 1))
    lasts = {r: draw(st.integers(0, top - 1)) if r in behind else top for r in range(world)}
    states = {
        r: draw(st.sampled_from(("done", "raised"))) if r in behind else "waiting"
        for r in range(world)
    }
    reports = [
        RankReport(r, _ledger(r, lasts[r], states[r]), f"train.py:{r} in here",
                   engine=tuple(draw(engine_entries)))
        for r in range(world)
    ]  # fmt: skip
    return top, lasts, states, reports


def _last(records: tuple[Record, ...]) -> Record | None:
    """The reference: the world's record with the highest number, by a plain scan."""
    best = None
    for record in records:
        if record.group is None and (best is None or record.seq > best.seq):
            best = record
    return best


@settings(max_examples=300, deadline=None)
@given(hung_jobs())
def test_the_flight_recorder_lines_say_what_the_records_say(
    job: tuple[int, dict[int, int], dict[int, str], list[RankReport]],
) -> None:
    top, lasts, states, reports = job
    found = verdict(reports, len(reports))
    assert found.kind == "hang" and found.seq == top
    lines = [line for line in found.text.splitlines() if "torch's flight recorder" in line]

    expected_behind = {}
    for report in reports:
        last = _last(report.engine)
        if lasts[report.rank] < top and last is not None:
            returned = lasts[report.rank] == 0 or states[report.rank] == "done"
            state = "completed" if last.state == "ended" and returned else last.state
            expected_behind[report.rank] = (
                f"rank {report.rank} in torch's flight recorder: its last engine collective "
                f"was {last.op} #{last.seq} of the world ({state})."
            )
    expected_waiting: dict[tuple[str, int, str], set[int]] = {}
    for report in reports:
        last = _last(report.engine)
        if lasts[report.rank] == top and last is not None:
            expected_waiting.setdefault((last.op, last.seq, last.state), set()).add(report.rank)

    said_behind = [line for line in lines if "its last engine collective" in line]
    assert said_behind == [expected_behind[r] for r in sorted(expected_behind)]
    said_waiting: dict[tuple[str, int, str], set[int]] = {}
    for line in lines:
        if "its last engine collective" in line:
            continue
        in_flight = re.fullmatch(
            r"ranks? ([\d, ]+) in torch's flight recorder: (\S+) #(\d+) of the world "
            r"is (scheduled|started), not completed\.",
            line,
        )
        over = re.fullmatch(
            r"ranks? ([\d, ]+) in torch's flight recorder: no engine collective of the world "
            r"in flight; the last was (\S+) #(\d+) \((ended|completed)\)\.",
            line,
        )
        match = in_flight or over
        assert match is not None, line
        ranks = {int(r) for r in match[1].split(", ")}
        said_waiting[(match[2], int(match[3]), match[4])] = ranks
    assert said_waiting == expected_waiting
    # the lines follow the finding, before anything else
    if lines:
        finding = found.text.splitlines()
        assert finding.index(lines[0]) == 2 + len(found.behind)  # the headline, the hang


def test_no_engine_record_no_line() -> None:
    reports = [RankReport(0, _ledger(0, 2, "waiting")), RankReport(1, _ledger(1, 1, "done"))]
    assert "flight recorder" not in verdict(reports).text


def _entry(seq: int, name: str, op: str = "all_reduce", **extra: Any) -> dict[str, Any]:
    entry = {
        "collective_seq_id": seq,
        "profiling_name": f"gloo:{op}",
        "process_group": [name, "default_pg" if name == "0" else "undefined"],
        "input_dtypes": ["Float"],
        "input_sizes": [[2, 3]],
        "is_p2p": False,
        "retired": True,
        "state": "scheduled",
    }
    return entry | extra


torch_entries = st.lists(
    st.tuples(st.sampled_from(("0", "1", "9")), st.integers(1, 4), st.booleans()), max_size=30
)


@settings(max_examples=200, deadline=None)
@given(torch_entries, st.integers(1, 5))
def test_the_reduction_keeps_each_group_s_last_entries(
    drawn: list[tuple[str, int, bool]], limit: int
) -> None:
    groups = {"0": None, "1": (0, 2)}  # "9": a group this process does not know
    entries, seqs = [], {"0": 0, "1": 0, "9": 0}
    for name, step, retired in drawn:
        seqs[name] += step
        entries.append(_entry(seqs[name], name, retired=retired))
    # the reference: per known group, its entries in order, the last ``limit``
    expected = []
    for name in ("0", "1"):
        mine = [e for e in entries if e["process_group"][0] == name][-limit:]
        expected += [
            {"seq": e["collective_seq_id"], "op": "gloo:all_reduce",
             "group": None if name == "0" else [0, 2], "what": "Float[2, 3]",
             "state": "ended" if e["retired"] else "scheduled"}
            for e in mine
        ]  # fmt: skip
    got = flight_recorder.reduce_entries(entries, groups, limit)
    key = lambda r: (r["group"] is not None, r["seq"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    # and the records read back from the report's JSON are the same
    assert Record.rows(json.loads(json.dumps(got))) == tuple(Record.from_dict(r) for r in got)


def test_a_group_made_again_under_its_name_replaces_its_old_entries() -> None:
    entries = [_entry(1, "0"), _entry(2, "0"), _entry(1, "0", "barrier")]
    got = flight_recorder.reduce_entries(entries, {"0": None}, 8)
    assert [(r["seq"], r["op"]) for r in got] == [(1, "gloo:barrier")]


def test_point_to_point_entries_are_left_out_and_states_kept() -> None:
    entries = [
        _entry(1, "0", retired=False, state="started"),
        _entry(1, "0", "send", is_p2p=True),
        _entry(2, "0", retired=True, state="completed", input_dtypes=[], input_sizes=[]),
    ]
    got = flight_recorder.reduce_entries(entries, {"0": None}, 8)
    assert [(r["seq"], r["state"], r["what"]) for r in got] == [
        (1, "started", "Float[2, 3]"),
        (2, "completed", ""),
    ]


@pytest.mark.parametrize(
    "dump",
    [
        lambda **_: b"not json",
        lambda **_: json.dumps({"version": "2.10", "entries": {"not": "a list"}}).encode(),
        lambda **_: json.dumps({"entries": []}).encode(),
        lambda **_: json.dumps({"version": "2.10", "entries": [{"is_p2p": False}]}).encode(),
    ],
    ids=["not-json", "entries-not-a-list", "no-version", "entry-missing-keys"],
)
def test_a_record_torch_changed_is_a_note_not_an_error(dump: Any) -> None:
    trace = flight_recorder.tail(8, lambda: {"0": None}, dump)
    assert trace["source"] == "torch's flight recorder" and "entries" not in trace
    assert trace["note"].startswith("unreadable (")


def test_a_record_of_nothing_yet_is_no_entries() -> None:
    trace = flight_recorder.tail(8, lambda: {"0": None}, lambda **_: b'{"version": "2.10"}')
    assert trace == {"source": "torch's flight recorder", "entries": []}


def test_a_torch_without_the_dump_is_a_note() -> None:
    trace = flight_recorder.tail(8, lambda: {"0": None}, None)
    assert trace == {
        "source": "torch's flight recorder",
        "note": "this torch has no _dump_fr_trace_json (its record is not read).",
    }


def test_garbage_from_another_rank_is_left_out() -> None:
    good = {"seq": 3, "op": "gloo:all_reduce", "group": None, "what": "", "state": "ended"}
    assert Record.rows([good, {"seq": "x"}, None, 5, {"op": "a"}]) == (
        Record(3, "gloo:all_reduce", None, "", state="ended"),
    )
    assert Record.rows(None) == Record.rows("no") == ()


def test_the_report_carries_the_engine_record_or_a_note() -> None:
    ledger = CollectiveLedger(lambda group: None)

    def broken(limit: int) -> dict[str, Any]:
        raise RuntimeError("gone")

    def one(limit: int) -> dict[str, Any]:
        return {"source": "s", "entries": [{"seq": 1, "op": "o", "group": None}][:limit]}

    assert "engine" not in hang_report.report(0, ledger)
    assert hang_report.report(0, ledger, one)["engine"] == one(8)
    assert hang_report.report(0, ledger, broken)["engine"] == {
        "note": "the engine's record could not be read: RuntimeError: gone"
    }
    assert SerialModel()._engine_trace(8) is None  # a model without an engine record
