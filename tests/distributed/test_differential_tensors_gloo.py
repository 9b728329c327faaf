"""The tensor and number collectives on 2 and 3 real gloo ranks against exact answers and
torch.distributed's own ops (3 ranks twice: with torch's ops, and with the base class's
emulations that backends without them use).

Every rank draws the same cases (``tests/differential/tensor_cases.py``) and runs them in
lockstep (``differential_tensor_targets.run_tensor_differential``); each compares its result
of every case with the exact answer it computes from every rank's input, and with gloo's
own op on the same inputs where gloo has it. Each rank returns its mismatches.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, NamedTuple

import pytest

from distbridge.models import NativeModel
from tests.differential import lockstep
from tests.differential import tensor_cases as tc
from tests.distributed import differential_tensor_targets as targets
from tests.distributed import warm

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

PER_FUNC = 20  # cases per function at least; reductions get every (dtype, op) pair
CASE_TIMEOUT = 30.0  # seconds every rank gets to finish one case


class Run(NamedTuple):
    full: bool  # drawn with a case per (dtype, op) pair
    reports: list[dict[str, Any]]  # one per rank, in rank order


#: name: (ranks, emulated, full). The emulated run draws no case per (dtype, op) pair: the
#: emulations move bytes and call the same all-reduce, which the other runs cover pair by pair.
RUNS = {
    "2-ranks": (2, False, True),
    "3-ranks": (3, False, True),
    "3-ranks-emulated": (3, True, False),
}


@pytest.fixture(scope="module", params=list(RUNS))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One run: 2 or 3 ranks, with torch's ops or (emulated) the base class's emulations of
    reduce, gather, scatter, reduce_scatter and all_to_all; every rank's report."""
    world, emulated, full = RUNS[request.param]
    store = tmp_path_factory.mktemp(request.param) / "store"
    start = time.perf_counter()
    reports = warm.call(
        targets.run_tensor_differential,
        world_size=world,
        args=(str(store), PER_FUNC, CASE_TIMEOUT),
        kwargs={"emulated": emulated, "full": full},
        timeout=240,
    )
    took = time.perf_counter() - start
    print(f"\n{request.param}: {reports[0]['cases']} cases on each rank in {took:.1f} s")
    return Run(full, reports)


def test_every_result_is_exact(run: Run) -> None:
    mismatches = [m for report in run.reports for m in report["mismatches"]]
    shown = "\n".join(" | ".join(m) for m in mismatches[:40])
    assert not mismatches, (
        f"{len(mismatches)} mismatches ({lockstep.seed_note()}; label | expected | got):\n{shown}"
    )


def test_every_rank_ran_the_same_cases(run: Run) -> None:
    world = len(run.reports)
    assert [r["rank"] for r in run.reports] == list(range(world))
    assert {r["world"] for r in run.reports} == {world}
    assert len({r["digest"] for r in run.reports}) == 1
    assert {r["cases"] for r in run.reports} == {tc.case_count(PER_FUNC, full=run.full)}


def test_every_function_op_dtype_and_shape_kind_ran(run: Run) -> None:
    seen: Counter[str] = Counter()
    for report in run.reports:
        seen.update(report["tags"])
    wanted = targets.required_tags(len(run.reports), NativeModel.reduce_ops, run.full)
    missing = wanted - set(seen)
    assert not missing, f"no case exercised {sorted(missing)}"
    assert run.reports[0]["ops_not_taken"] == []
    print("\nper function:", {k: v for k, v in sorted(seen.items()) if k.startswith("func:")})


def test_torch_ops_were_compared(run: Run) -> None:
    """gloo's own op ran on the same inputs in most tensor cases (not for the dtypes gloo
    lacks, complex gathers, uneven gathers and scatters, or off the group)."""
    compared = sum(report["torch_compared"] for report in run.reports)
    print(f"\ncompared with torch.distributed: {compared} (case, rank) results")
    assert compared >= len(run.reports) * tc.case_count(PER_FUNC, full=run.full) // 4
