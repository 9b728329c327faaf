"""reduce and reduce_scatter with AND / OR on 2 and 3 real gloo ranks (the warm worlds),
against all_reduce's answer and the exact one, by gloo's own rule and by NCCL's (AND / OR
folded from an all-gather, ``algorithms/fold.backend_op``). Per-rank body:
``bitwise_targets.run_bitwise_differential``; the world of one is
``tests/unit/test_bitwise_reductions.py``."""

from __future__ import annotations

import time

import pytest

from tests.differential import lockstep
from tests.differential import tensor_cases as tc
from tests.distributed import bitwise_targets, warm

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

PER_FUNC = 18  # one case per (dtype, op) pair of each function


@pytest.mark.parametrize("world_size", [2, 3])
def test_reduce_with_bitwise_ops_matches_all_reduce(
    world_size: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    store = tmp_path_factory.mktemp(f"bitwise-{world_size}") / "store"
    start = time.perf_counter()
    reports = warm.call(
        bitwise_targets.run_bitwise_differential,
        world_size=world_size,
        args=(str(store), PER_FUNC),
        timeout=180,
    )
    took = time.perf_counter() - start
    print(f"\n{world_size} ranks: {reports[0]['cases']} bitwise cases x 2 rules in {took:.1f} s")
    mismatches = [m for report in reports for m in report["mismatches"]]
    shown = "\n".join(" | ".join(m) for m in mismatches[:40])
    assert not mismatches, f"{len(mismatches)} mismatches ({lockstep.seed_note()}):\n{shown}"
    assert len({r["digest"] for r in reports}) == 1
    pairs = {
        f"{f}:{d}:{o}" for f in bitwise_targets.FUNCS for d, o in tc.pairs(bitwise_targets.BITWISE)
    }
    for report in reports:
        assert report["rules"] == ["own", "nccl-rule"]
        assert set(report["seen"]) == pairs
