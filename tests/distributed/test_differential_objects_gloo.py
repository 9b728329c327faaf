"""Object collectives and metric-dict reductions on 2 and 3 real gloo ranks, on generated
inputs, against a reference.

Every rank draws the same cases (each holds every rank's input), runs them in lockstep and
compares its result with the reference: ``pickle.loads(pickle.dumps(...))`` of the payloads
it should have received (types, dtypes, shapes, values byte for byte, writability), or the
exact sum / mean of every rank's dict.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.differential import lockstep
from tests.differential.dict_cases import DICT_FUNCTIONS
from tests.differential.object_cases import FUNCTIONS
from tests.distributed import warm
from tests.distributed.differential_object_targets import run_dict_cases, run_object_cases

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

RUNS: dict[str, tuple[Callable[..., Any], tuple[str, ...], int]] = {
    "objects": (run_object_cases, FUNCTIONS, 250),  # body, functions it must reach, cases
    "dicts": (run_dict_cases, DICT_FUNCTIONS, 150),
}


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("run", sorted(RUNS))
def test_results_match_the_reference(run: str, world_size: int, tmp_path: Path) -> None:
    body, functions, count = RUNS[run]
    results = warm.call(
        body, world_size=world_size, args=(count, str(tmp_path / "store")), timeout=240
    )
    for ran, per_function, _ in results:
        assert ran == count
        assert set(per_function) == set(functions), per_function
    found = [line for _, _, lines in results for line in lines]
    print(f"\n{run} on {world_size} gloo ranks: {count} cases, per function {results[0][1]}")
    assert not found, lockstep.seed_note() + "\n" + "\n".join(found[:20])
