"""Running the per-rank checks of ``checks.py`` on a backend, once per world size, and
reporting the ranks where a check failed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from distbridge.testing import run_distributed
from tests.distributed import checks

PerRank = list[dict[str, str]]


def run_per_world_size(
    tmp_path_factory: pytest.TempPathFactory,
    backend: str,
    world_sizes: Iterable[int],
    runner: Callable[..., Any] = checks.run_checks,
    names: list[str] = checks.CHECKS,
    timeout: float = 180,
) -> dict[int, PerRank]:
    """Every check in ``names``, run in one job per world size (a job per check would take
    minutes); each rank's results by world size."""
    results = {}
    for world_size in world_sizes:
        tmp = tmp_path_factory.mktemp(f"{backend}{world_size}")
        results[world_size] = run_distributed(
            runner,
            backend=backend,
            world_size=world_size,
            args=(names, str(tmp)),
            timeout=timeout,
        )
    return results


def failures(per_rank: PerRank, names: Iterable[str] | None = None) -> str:
    """The tracebacks of the checks (all, or ``names``) that failed or did not run, rank by
    rank; empty when every one passed."""
    return "\n".join(
        f"--- rank {rank} {name} ---\n{out.get(name, 'this check did not run')}"
        for rank, out in enumerate(per_rank)
        for name in (out if names is None else names)
        if out.get(name) != "ok"
    )
