"""The cost of the distbridge facade over raw Horovod calls, at 1 MiB.

Two Horovod processes, started with ``idist.spawn("horovod", ...)`` (``horovod.run``, Gloo
controller), time each facade call against the raw ``horovod.torch`` call it replaces, in
the same processes, in adjacent blocks of calls of each (see bench/README.md). The raw side
uses the same form of call as the facade: in place for all_reduce and broadcast (the
facade reduces and broadcasts in place), a new tensor for all_gather, one ``hvd.alltoall``
with splits for gather and scatter (Horovod has neither), and a fixed op name (as the
facade names its operations), so both sides see Horovod's response cache alike. The noise
row times raw all_reduce against itself.

Usage (from the repository root, with Horovod installed: ``nox -s horovod`` runs it)::

    python bench/bench_horovod.py [--quick] [--json PATH] [--strict]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

import distbridge as idist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_core import FULL, MIB, QUICK, Plan, Row, format_table  # noqa: E402

NPROC = 2
TARGET = 1.05
BLOCK = 5  # calls per timed block


def _time_pair(
    facade: Callable[[], object], raw: Callable[[], object], plan: Plan
) -> tuple[float, float]:
    """Seconds per call of each side, from adjacent pairs of blocks of back-to-back calls.

    A Horovod call completes on the background thread's next cycle, so a single call's time
    depends on where in the cycle it starts; a block of ``BLOCK`` calls averages that out.
    Each pair is a raw block and a facade block right after one another (the order
    alternates), so both see the same machine load; the median of the pairs' ratios is the
    facade's cost. Returns (raw median x that ratio, raw median).
    """
    import horovod.torch as hvd

    for _ in range(plan.warmup * BLOCK):
        raw()
        facade()
    clock = time.perf_counter

    def block(fn: Callable[[], object]) -> float:
        start = clock()
        for _ in range(BLOCK):
            fn()
        return (clock() - start) / BLOCK

    raws, ratios = [], []
    for pair in range(plan.small_iters * plan.repeats // BLOCK * 2):
        hvd.barrier()
        if pair % 2 == 0:
            raw_s = block(raw)
            facade_s = block(facade)
        else:
            facade_s = block(facade)
            raw_s = block(raw)
        raws.append(raw_s)
        ratios.append(facade_s / raw_s)
    raw_median = statistics.median(raws)
    return raw_median * statistics.median(ratios), raw_median


def worker(local_rank: int, plan: Plan) -> list[dict[str, Any]] | None:
    """Run in each Horovod process: time every row; rank 0 returns them."""
    import horovod.torch as hvd

    torch.set_num_threads(1)
    if idist.backend() != "horovod" or idist.get_world_size() != NPROC:
        raise RuntimeError(f"Expected {NPROC} Horovod ranks, got {idist.backend()!r}.")
    x = torch.zeros(MIB // 4, dtype=torch.float32)  # zeros: repeated sums stay zero
    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        (
            "all_reduce",
            lambda: idist.all_reduce(x),
            lambda: hvd.allreduce_(x, name="raw.allreduce", op=hvd.Sum),
        ),
        ("all_gather", lambda: idist.all_gather(x), lambda: hvd.allgather(x, name="raw.gather")),
        (
            "broadcast",
            lambda: idist.broadcast(x, src=0),
            lambda: hvd.broadcast_(x, root_rank=0, name="raw.broadcast"),
        ),
    ]
    # Horovod has no gather or scatter: distbridge sends them as one hvd.alltoall with
    # splits (to dst alone, from src alone), the fastest way to write them by hand too.
    me = idist.get_rank()
    chunks = [torch.zeros_like(x) for _ in range(NPROC)]
    out = torch.empty_like(x)
    to_root = torch.tensor([1] + [0] * (NPROC - 1), dtype=torch.int32)
    nothing, ones = torch.zeros(NPROC, dtype=torch.int32), torch.ones(NPROC, dtype=torch.int32)
    no_rows = x.new_empty((0, x.numel()))

    def raw_gather() -> list[torch.Tensor]:
        rows, _ = hvd.alltoall(x.unsqueeze(0), splits=to_root, name="raw.gather_to_root")
        return list(rows.unbind(0)) if me == 0 else []

    def raw_scatter() -> torch.Tensor:
        sent, splits = (torch.stack(chunks), ones) if me == 0 else (no_rows, nothing)
        rows, _ = hvd.alltoall(sent, splits=splits, name="raw.scatter")
        return out.copy_(rows[0])

    cases += [
        ("gather same_shape", lambda: idist.gather(x, dst=0, same_shape=True), raw_gather),
        (
            "scatter out=",
            lambda: idist.scatter(chunks if me == 0 else None, src=0, out=out),
            raw_scatter,
        ),
    ]
    # the noise row: raw all_reduce timed against itself, the same way
    cases.append(("all_reduce raw / raw (noise)", cases[0][2], cases[0][2]))
    rows = []
    for name, facade, raw in cases:
        facade_s, raw_s = _time_pair(facade, raw, plan)
        rows.append(Row(f"horovod {name} float32", MIB, facade_s, raw_s, TARGET))
    hvd.barrier()
    return [asdict(row) for row in rows] if idist.get_rank() == 0 else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time the facade against raw Horovod calls.")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a row misses")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    # The workers unpickle ``bench_horovod.worker``: let them import this folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.getenv("PYTHONPATH")]))
    started = time.perf_counter()
    results = idist.spawn("horovod", worker, args=(plan,), nproc_per_node=NPROC, job_timeout=600)
    rows = [Row(**fields) for fields in results[0]]
    elapsed = time.perf_counter() - started
    print(format_table(rows))
    print(
        f"\n{'quick' if args.quick else 'full'} run, {elapsed:.0f} s; torch {torch.__version__}, "
        f"python {platform.python_version()}, {NPROC} Horovod processes (Gloo) on one machine"
    )
    if args.json is not None:
        report = {"quick": args.quick, "seconds": elapsed, "rows": [r.to_json() for r in rows]}
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if args.strict and not all(row.passed for row in rows) else 0


if __name__ == "__main__":
    import bench_horovod  # run under the importable name, not as __main__

    raise SystemExit(bench_horovod.main())
