"""What a distributed test costs: a warm world (the pytest plugin's) against a fresh job per test.

The test is one all_reduce of a small tensor, checked. For 2 and 4 gloo ranks:

- warm: a `WarmWorld` runs the test ``--tests`` times; the first run includes starting the
  world, the others are the per-test cost the plugin pays after the first test.
- fresh: `run_distributed` (``idist.spawn``) starts, runs and stops a job per test.

Each is repeated ``--runs`` times (a new world per run); the medians are reported. Target:
a warm test under 50 ms.

Usage (from the repository root)::

    python bench/bench_warm_world.py [--runs 3] [--tests 20] [--fresh 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import distbridge as idist
from distbridge.testing import WarmWorld, run_distributed

TARGET_MS = 50.0


def one_all_reduce() -> None:
    """The test: one all_reduce, checked."""
    total = idist.all_reduce(torch.ones(4))
    assert total[0].item() == idist.get_world_size()


def one_all_reduce_spawned(local_rank: int) -> None:
    """The same test in `run_distributed`'s form (it passes the local rank)."""
    one_all_reduce()


def warm(nproc: int, tests: int) -> tuple[float, list[float]]:
    """Seconds of the first test (world start included) and of each later one."""
    with WarmWorld(nproc, "gloo") as world:
        start = time.perf_counter()
        world.run(one_all_reduce).check()
        first = time.perf_counter() - start
        later = []
        for _ in range(tests - 1):
            start = time.perf_counter()
            world.run(one_all_reduce).check()
            later.append(time.perf_counter() - start)
    return first, later


def fresh(nproc: int) -> float:
    """Seconds of one test run as a job of its own."""
    start = time.perf_counter()
    run_distributed(one_all_reduce_spawned, backend="gloo", world_size=nproc)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="warm worlds per world size")
    parser.add_argument("--tests", type=int, default=20, help="tests per warm world")
    parser.add_argument("--fresh", type=int, default=3, help="fresh jobs per world size")
    options = parser.parse_args()
    print(f"{'ranks':>5} {'warm first test':>16} {'warm later test':>16} {'fresh job':>10}  result")
    ok = True
    for nproc in (2, 4):
        firsts, laters = [], []
        for _ in range(options.runs):
            first, later = warm(nproc, options.tests)
            firsts.append(first)
            laters.append(statistics.median(later))
        spawned = [fresh(nproc) for _ in range(options.fresh)]
        later_ms = statistics.median(laters) * 1e3
        passed = later_ms < TARGET_MS
        ok &= passed
        print(
            f"{nproc:>5} {statistics.median(firsts) * 1e3:>13.0f} ms {later_ms:>13.1f} ms "
            f"{statistics.median(spawned) * 1e3:>7.0f} ms  "
            f"{'pass' if passed else 'FAIL'} (target < {TARGET_MS:.0f} ms a warm test)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    # The ranks import the test function's module: run this file as ``bench_warm_world``.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_warm_world

    raise SystemExit(bench_warm_world.main())
