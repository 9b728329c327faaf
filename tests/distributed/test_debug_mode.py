"""The debug mode on real gloo processes: ranks that disagree raise `CollectiveMismatch`
on every rank, with a table naming both call sites; ranks that agree get the same results
as without it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from distbridge.testing import run_distributed
from tests.distributed import checks, debug_checks

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

TIMEOUT = 5.0  # DISTBRIDGE_DEBUG_TIMEOUT in the workers
LATE_BY = 8.0  # rank 1 of the "late" scenario sleeps this long


def _line(marker: str) -> int:
    """The line of ``debug_checks.py`` tagged ``# site: <marker>``."""
    lines = Path(debug_checks.__file__).read_text().splitlines()
    found = [i for i, text in enumerate(lines, 1) if text.endswith(f"# site: {marker}")]
    assert len(found) == 1, marker
    return found[0]


def _site(marker: str) -> str:
    return f"debug_checks.py:{_line(marker)} in "


@pytest.fixture(scope="module")
def per_rank(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every scenario, in one 2-rank job with the debug mode on (a spawn per scenario would
    take minutes)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DISTBRIDGE_DEBUG_TIMEOUT", str(TIMEOUT))
        return run_distributed(
            debug_checks.run_scenarios,
            world_size=2,
            args=(list(debug_checks.SCENARIOS), LATE_BY),
            timeout=180,
            debug=True,
        )


def _reports(per_rank: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    reports = [results[name]["report"] for results in per_rank]
    for rank, report in enumerate(reports):
        assert report != debug_checks.NO_ERROR, f"rank {rank} raised nothing in {name}"
        assert report["type"] == "CollectiveMismatch"
    return reports


def _tensor(call: str, dtype: str, shape: int) -> str:
    return f"{call}(type=tensor, dtype={dtype}, shape=[{shape}]"


# scenario, its site markers, what differs, what each rank called
MISMATCHES = [
    ("shape_all_reduce", "shape", "shape", (_tensor("all_reduce", "float32", 3),
                                            _tensor("all_reduce", "float32", 4))),
    ("shape_all_gather", "shape", "shape", (_tensor("all_gather", "float32", 3),
                                            _tensor("all_gather", "float32", 4))),
    ("shape_broadcast", "shape", "shape", (_tensor("broadcast", "float32", 3),
                                           _tensor("broadcast", "float32", 4))),
    ("shape_on_a_mesh", "mesh", "shape", (_tensor("all_reduce", "float32", 3),
                                          _tensor("all_reduce", "float32", 4))),
    ("dtype_reduce", "dtype", "dtype", (_tensor("reduce", "float32", 2),
                                        _tensor("reduce", "float64", 2))),
    ("dtype_reduce_scatter", "dtype", "dtype", (_tensor("reduce_scatter", "float32", 2),
                                                _tensor("reduce_scatter", "float64", 2))),
    ("skipped", "skip", "the collective called", ("all_reduce(type=tensor", "barrier()")),
    ("all_reduce_vs_broadcast", "other", "the collective called",
     (_tensor("all_reduce", "float32", 2) + ", op=SUM)",
      _tensor("broadcast", "float32", 2) + ", src=0)")),
    ("int_vs_float", "kind", "type", ("all_reduce(type=int, op=SUM)",
                                      "all_reduce(type=float, op=SUM)")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "marker", "differ", "calls"), MISMATCHES)
def test_mismatch_raises_on_every_rank_with_both_call_sites(
    per_rank: list[dict[str, Any]], name: str, marker: str, differ: str, calls: tuple[str, str]
) -> None:
    reports = _reports(per_rank, name)
    for report in reports:
        text = report["text"]
        assert "Debug mode: the ranks disagree at collective #" in text
        assert f"of the world: they differ in {differ}." in text
        for rank, call in enumerate(calls):
            row = re.search(rf"^  {rank}  (.*)$", text, re.MULTILINE)
            assert row is not None, text
            assert call in row.group(1) and _site(f"{marker}-{rank}") in row.group(1), text
        assert report["missing"] == []
        assert sorted(report["call_sites"]) == [0, 1]
    assert reports[0]["text"] == reports[1]["text"], "every rank must see the same table"
    assert all(results[name]["seconds"] < TIMEOUT for results in per_rank)  # no waiting


def test_a_late_rank_is_named_on_both_ranks(per_rank: list[dict[str, Any]]) -> None:
    early, late = _reports(per_rank, "late")
    for report in (early, late):
        assert report["missing"] == [1]
        assert "rank 1 did not reach collective #" in report["text"]
        assert (
            f"within {TIMEOUT:g} s (DISTBRIDGE_DEBUG_TIMEOUT); rank 0 stopped waiting"
            in (report["text"])
        )
        assert _site("late-0") in report["text"]
    assert "(did not arrive)" in early["text"]
    assert _site("late-1") in late["text"], "the late rank shows where it called"
    assert TIMEOUT - 0.5 < per_rank[0]["late"]["seconds"] < TIMEOUT + 10


def test_a_rank_that_never_arrives_is_named_not_waited_for(per_rank: list[dict[str, Any]]) -> None:
    report = per_rank[0]["never"]["report"]
    assert report != debug_checks.NO_ERROR and report["missing"] == [1]
    assert "rank 1 did not reach collective #" in report["text"]
    assert _site("never-0") in report["text"] and "(did not arrive)" in report["text"]
    assert per_rank[0]["never"]["seconds"] < TIMEOUT + 10
    assert per_rank[1]["never"]["report"] == debug_checks.NO_ERROR  # it called nothing


def test_spawn_debug_reaches_the_workers() -> None:
    assert run_distributed(debug_checks.debug_state, world_size=2, debug=True) == [True, True]
    assert run_distributed(debug_checks.debug_state, world_size=2) == [False, False]


def test_matching_calls_give_the_same_results_as_without_debug() -> None:
    on = run_distributed(debug_checks.matching_calls, world_size=2, debug=True, timeout=120)
    off = run_distributed(debug_checks.matching_calls, world_size=2, timeout=120)
    assert on == off
    assert on[0]["all_reduce"] == [3.0, 3.0] and on[1]["gather"] == []


# Checks whose ranks disagree on purpose, where the debug mode rightly raises
# CollectiveMismatch instead of the error they expect: values of different kinds to
# all_gather, broadcast(None, src=<own rank>), and a collective that only the source rank
# calls, with arguments it rejects before sending (the debug mode compares first, so the
# other rank is reported missing).
DISAGREE_ON_PURPOSE = (
    "check_all_gather_mixed_kinds_raise",
    "check_validation_errors_match_serial",
    "check_scatter_into_out",
)


def test_backend_agnostic_checks_pass_in_debug_mode(tmp_path: Path) -> None:
    names = [n for n in checks.CHECKS if n not in DISAGREE_ON_PURPOSE]
    per = run_distributed(
        checks.run_checks, world_size=2, args=(names, str(tmp_path)), timeout=180, debug=True
    )
    failures = {
        f"rank {r} {name}": tb
        for r, out in enumerate(per)
        for name, tb in out.items()
        if tb != "ok"
    }
    assert not failures, "\n".join(f"--- {k} ---\n{tb}" for k, tb in failures.items())
