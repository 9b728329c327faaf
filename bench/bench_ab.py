"""A long interleaved A/B of bench_collectives' judged rows at one size and world size.

bench_collectives times blocks of 20 calls a side; at 1 MiB with 2 ranks on a busy 2-core
machine a whole run drifts by about 5 %, as much as the target. This script alternates
single calls (A, B, B, A, ...) many times with the same raw code, so slow drift hits both
sides alike, and prints rank 0's ratio of medians per row, with the raw code timed against
itself as the noise row:

    python bench/bench_ab.py [--nproc 2] [--size-mib 1] [--calls 1500] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from bench_collectives import (
    DST,
    SRC,
    raw_all_to_all,
    raw_all_to_all_chunks,
    raw_gather,
    raw_reduce,
    raw_scatter,
)
from bench_core import MIB

import distbridge as idist

Call = Callable[[], object]


def alternating_medians(a: Call, b: Call, calls: int) -> tuple[float, float]:
    """Median seconds per call of ``a`` and of ``b``, single calls alternating (A, B, B, A, ...)
    after two warm-up calls a side and a barrier."""
    times: tuple[list[float], list[float]] = ([], [])
    for f in (a, b, a, b):  # warm both
        f()
    idist.barrier()
    for i in range(calls):
        order = ((a, times[0]), (b, times[1])) if i % 2 else ((b, times[1]), (a, times[0]))
        for f, acc in order:
            start = time.perf_counter()
            f()
            acc.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def _ratio(a: Call, b: Call, calls: int) -> float:
    """Median time of ``a`` over median time of ``b``, calls alternating."""
    median_a, median_b = alternating_medians(a, b, calls)
    return median_a / median_b


def worker(local_rank: int, size: int, calls: int) -> dict[str, float]:
    """Each judged row's ratio on this rank (rank 0's is reported)."""
    torch.set_num_threads(1)
    me, world = idist.get_rank(), idist.get_world_size()
    numel = size // 4
    x = torch.rand(numel)
    parts = list(x.chunk(world))
    chunks = [torch.rand(numel) for _ in range(world)] if me == SRC else None
    rows: dict[str, tuple[Call, Call]] = {
        "reduce": (lambda: idist.reduce(x, dst=DST), lambda: raw_reduce(x, me)),
        "gather same_shape": (
            lambda: idist.gather(x, dst=DST, same_shape=True),
            lambda: raw_gather(x, me, world),
        ),
        "scatter out=": (
            lambda: idist.scatter(chunks, src=SRC, out=torch.empty(numel)),
            lambda: raw_scatter(chunks, numel),
        ),
        "all_to_all same_shape": (
            lambda: idist.all_to_all(parts, same_shape=True),
            lambda: raw_all_to_all_chunks(x, world),
        ),
        "all_to_all one tensor": (lambda: idist.all_to_all(x), lambda: raw_all_to_all(x)),
        "noise: raw scatter / itself": (
            lambda: raw_scatter(chunks, numel),
            lambda: raw_scatter(chunks, numel),
        ),
    }
    return {name: _ratio(a, b, calls) for name, (a, b) in rows.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2, help="gloo world size (default 2)")
    parser.add_argument("--size-mib", type=float, default=1.0, help="MiB per rank (default 1)")
    parser.add_argument("--calls", type=int, default=1500, help="calls a side (default 1500)")
    parser.add_argument("--runs", type=int, default=3, help="whole runs (default 3)")
    args = parser.parse_args(argv)
    size = int(args.size_mib * MIB)
    per_run = [
        idist.spawn("gloo", worker, args=(size, args.calls), nproc_per_node=args.nproc)[0]
        for _ in range(args.runs)
    ]
    print(f"{args.nproc} ranks, {args.size_mib:g} MiB, {args.calls} calls a side, alternating")
    for name in per_run[0]:
        ratios = sorted(run[name] for run in per_run)
        print(f"  {name:30} {statistics.median(ratios):.3f}  ({ratios[0]:.2f}-{ratios[-1]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
