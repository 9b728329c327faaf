"""Object collectives on 2 and 3 real gloo ranks against pickle, on generated payloads.

Every rank draws the same cases (each holds every rank's payload), runs them in lockstep and
compares its result with ``pickle.loads(pickle.dumps(...))`` of the payloads it should have
received: types, dtypes, shapes, values byte for byte, writability.
"""

from __future__ import annotations

import pytest

from distbridge.testing import run_distributed
from tests.differential.object_cases import FUNCTIONS
from tests.distributed.differential_object_targets import run_object_cases

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

COUNT = 250  # cases per world size


@pytest.mark.parametrize("world_size", [2, 3])
def test_object_collectives_match_pickle(world_size: int, tmp_path: pytest.TempPathFactory) -> None:
    results = run_distributed(
        run_object_cases,
        world_size=world_size,
        args=(COUNT, str(tmp_path / "store")),
        timeout=240,
    )
    for ran, per_function, _ in results:
        assert ran == COUNT
        assert set(per_function) == set(FUNCTIONS), per_function
    found = [line for _, _, lines in results for line in lines]
    print(f"\n{world_size} gloo ranks: {COUNT} cases each, per function {results[0][1]}")
    assert not found, "\n".join(found[:20])
