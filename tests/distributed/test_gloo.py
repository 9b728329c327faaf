"""The backend-agnostic checks on real gloo processes, world sizes 1 to 4."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed import checks
from tests.distributed.check_runs import PerRank, failures, run_per_world_size

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

WORLD_SIZES = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def gloo_results(tmp_path_factory: pytest.TempPathFactory) -> dict[int, PerRank]:
    """Every check, once per world size."""
    return run_per_world_size(tmp_path_factory, "gloo", WORLD_SIZES)


@pytest.fixture(scope="module")
def emulated_results(tmp_path_factory: pytest.TempPathFactory) -> dict[int, PerRank]:
    """The extra collectives again, through the base class's emulations on real gloo ranks."""
    return run_per_world_size(
        tmp_path_factory, "gloo", (2, 3), checks.run_checks_emulated, checks.EXTRA_CHECKS
    )


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("check", checks.EXTRA_CHECKS)
def test_emulated_check(emulated_results: dict[int, PerRank], world_size: int, check: str) -> None:
    failed = failures(emulated_results[world_size], [check])
    assert not failed, failed


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("check", checks.CHECKS)
def test_check(gloo_results: dict[int, PerRank], world_size: int, check: str) -> None:
    per_rank = gloo_results[world_size]
    assert len(per_rank) == world_size
    failed = failures(per_rank, [check])
    assert not failed, failed


def test_checks_are_collected() -> None:
    assert len(checks.CHECKS) >= 10
    assert Path(checks.__file__).name == "checks.py"
