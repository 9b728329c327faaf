"""What the collective ledger costs: the facade with it against the facade without it.

Every public collective of a model is recorded by the ``collective`` wrapper of
``distbridge/models/base.py`` (in Python); the undecorated method stays reachable as
``__wrapped__``, so both sides run the very same code but for the recording. Two kinds of
rows, each with a noise row (the unrecorded side timed against itself):

Most rows call the active model's method directly (the facade's ``current()`` lookup is the
same either way and is left out); the facade row calls ``idist.all_reduce`` with the model
class's method as it is against the same call with the class's method swapped for its
undecorated one (``__wrapped__``) for the block.

- **serial** (no process group, in this process): ``timeit`` of ``model.all_reduce(x)``
  against ``all_reduce.__wrapped__(model, x)``, alternating blocks, the fastest block in
  thread CPU time; the difference is the ledger's cost per call in nanoseconds.
- **gloo** (2 ranks under ``spawn``): single calls alternating (A, B, B, A, ...), the ratio of
  medians on rank 0, at a tiny tensor and at 1 MiB.

Usage (from the repository root)::

    python bench/bench_ledger.py [--runs 3] [--calls 2000] [--loops 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from collections.abc import Callable, Sequence

import torch
from bench_ab import alternating_medians

import distbridge as idist
from distbridge._state import current

MIB = 1 << 20
REPEATS = 25  # serial: alternating blocks a side; the fastest counts
Call = Callable[[], object]


def _serial_rows(loops: int) -> dict[str, tuple[float, float]]:
    """Row -> (with the ledger, without it) in ns per call: the fastest of ``REPEATS`` blocks
    of ``loops`` calls each, timed in this thread's CPU time (``time.thread_time``), so that
    the time the OS gives to other processes on a busy machine is left out."""
    model = current()
    x = torch.zeros(4)
    kind = type(model)
    recorded_reduce = kind.all_reduce
    bare_reduce = kind.all_reduce.__wrapped__  # type: ignore[attr-defined]
    bare_gather = kind.all_gather.__wrapped__  # type: ignore[attr-defined]
    bare_barrier = kind.barrier.__wrapped__  # type: ignore[attr-defined]

    def facade_with() -> None:  # the class's all_reduce as it is: recorded
        kind.all_reduce = recorded_reduce  # type: ignore[method-assign]

    def facade_without() -> None:  # the very same facade over the undecorated method
        kind.all_reduce = bare_reduce  # type: ignore[method-assign]

    as_is = facade_with  # every other row: the class as it is
    # row -> (with, without, made ready before each block of with, ... of without)
    rows: dict[str, tuple[Call, Call, Call, Call]] = {
        "all_reduce(tensor)": (
            lambda: model.all_reduce(x),
            lambda: bare_reduce(model, x),
            as_is,
            as_is,
        ),
        "idist.all_reduce(tensor), the facade": (
            lambda: idist.all_reduce(x),
            lambda: idist.all_reduce(x),
            facade_with,
            facade_without,
        ),
        "all_reduce(3)": (
            lambda: model.all_reduce(3),
            lambda: bare_reduce(model, 3),
            as_is,
            as_is,
        ),
        "all_gather(3)": (
            lambda: model.all_gather(3),
            lambda: bare_gather(model, 3),
            as_is,
            as_is,
        ),
        "barrier()": (lambda: model.barrier(), lambda: bare_barrier(model), as_is, as_is),
        "noise: all_reduce(tensor) without / itself": (
            lambda: bare_reduce(model, x),
            lambda: bare_reduce(model, x),
            as_is,
            as_is,
        ),
    }
    out: dict[str, tuple[float, float]] = {}
    try:
        for name, (a, b, ready_a, ready_b) in rows.items():
            best_a = best_b = float("inf")
            for _ in range(REPEATS):  # alternate, so that a load change hits both sides
                ready_a()
                best_a = min(best_a, timeit.Timer(a, timer=time.thread_time).timeit(loops) / loops)
                ready_b()
                best_b = min(best_b, timeit.Timer(b, timer=time.thread_time).timeit(loops) / loops)
            out[name] = (best_a * 1e9, best_b * 1e9)
    finally:
        facade_with()
    return out


def _ratio(a: Call, b: Call, calls: int) -> float:
    """Median time of ``a`` over median time of ``b``, calls alternating."""
    median_a, median_b = alternating_medians(a, b, calls)
    return median_a / median_b


def worker(local_rank: int, calls: int) -> dict[str, float]:
    """Each row's ratio on this rank (rank 0's is reported)."""
    torch.set_num_threads(1)
    model = current()
    bare = type(model).all_reduce.__wrapped__  # type: ignore[attr-defined]
    tiny, big = torch.zeros(4), torch.zeros(MIB // 4)
    rows: dict[str, tuple[Call, Call]] = {
        "all_reduce 16 B": (lambda: model.all_reduce(tiny), lambda: bare(model, tiny)),
        "all_reduce 1 MiB": (lambda: model.all_reduce(big), lambda: bare(model, big)),
        "noise: 1 MiB without / itself": (lambda: bare(model, big), lambda: bare(model, big)),
    }
    return {name: _ratio(a, b, calls) for name, (a, b) in rows.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="whole runs (default 3)")
    parser.add_argument("--calls", type=int, default=2000, help="gloo calls a side (2000)")
    parser.add_argument("--loops", type=int, default=2000, help="serial calls a block (2000)")
    parser.add_argument("--serial-only", action="store_true", help="skip the gloo rows")
    args = parser.parse_args(argv)
    serial = [_serial_rows(args.loops) for _ in range(args.runs)]
    print(
        f"serial, ns of thread CPU time per call (fastest of {REPEATS} blocks of {args.loops}), "
        f"{args.runs} runs"
    )
    print(f"  {'row':44} {'with':>8} {'without':>8} {'cost':>8}")
    for name in serial[0]:
        with_, without = (statistics.median(run[name][i] for run in serial) for i in (0, 1))
        costs = sorted(run[name][0] - run[name][1] for run in serial)
        print(
            f"  {name:44} {with_:8.0f} {without:8.0f} {with_ - without:8.0f}"
            f"  (cost per run {', '.join(f'{c:.0f}' for c in costs)})"
        )
    if args.serial_only:
        return 0
    gloo = [
        idist.spawn("gloo", worker, args=(args.calls,), nproc_per_node=2)[0]
        for _ in range(args.runs)
    ]
    print(f"gloo, 2 ranks, {args.calls} calls a side alternating: with / without (rank 0)")
    for name in gloo[0]:
        ratios = sorted(run[name] for run in gloo)
        print(f"  {name:32} {statistics.median(ratios):.3f}  ({ratios[0]:.3f}-{ratios[-1]:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
