"""The backend-agnostic checks on real gloo processes, world sizes 1 to 4."""

from __future__ import annotations

from pathlib import Path

import pytest

from distbridge.testing import run_distributed
from tests.distributed import checks

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]

WORLD_SIZES = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def gloo_results(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, str]]]:
    """Every check, run once per world size in one job (a spawn per check would take minutes)."""
    results = {}
    for world_size in WORLD_SIZES:
        tmp = tmp_path_factory.mktemp(f"gloo{world_size}")
        results[world_size] = run_distributed(
            checks.run_checks,
            backend="gloo",
            world_size=world_size,
            args=(checks.CHECKS, str(tmp)),
            timeout=180,
        )
    return results


@pytest.fixture(scope="module")
def emulated_results(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, str]]]:
    """The extra collectives again, through the base class's emulations on real gloo ranks."""
    results = {}
    for world_size in (2, 3):
        tmp = tmp_path_factory.mktemp(f"emulated{world_size}")
        results[world_size] = run_distributed(
            checks.run_checks_emulated,
            backend="gloo",
            world_size=world_size,
            args=(checks.EXTRA_CHECKS, str(tmp)),
            timeout=180,
        )
    return results


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("check", checks.EXTRA_CHECKS)
def test_emulated_check(
    emulated_results: dict[int, list[dict[str, str]]], world_size: int, check: str
) -> None:
    per_rank = emulated_results[world_size]
    failures = {rank: out[check] for rank, out in enumerate(per_rank) if out[check] != "ok"}
    assert not failures, "\n".join(f"--- rank {r} ---\n{tb}" for r, tb in failures.items())


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("check", checks.CHECKS)
def test_check(gloo_results: dict[int, list[dict[str, str]]], world_size: int, check: str) -> None:
    per_rank = gloo_results[world_size]
    assert len(per_rank) == world_size
    failures = {rank: out[check] for rank, out in enumerate(per_rank) if out[check] != "ok"}
    assert not failures, "\n".join(f"--- rank {r} ---\n{tb}" for r, tb in failures.items())


def test_checks_are_collected() -> None:
    assert len(checks.CHECKS) >= 10
    assert Path(checks.__file__).name == "checks.py"
