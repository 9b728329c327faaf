"""What the debug mode costs: one boolean check per call when off, a store round trip when on.

Rows:

- ``off: hook only`` -- the check the wrapper of every public collective makes
  (``if self._debug:``), timed alone with ``timeit`` against an empty statement.
- ``off: all_reduce(3.5)`` / ``off: all_reduce(tensor)`` -- whole calls through the facade
  in a gloo world of one (debug off), for scale: the hook's share of a call.
- ``2 ranks: ...`` -- per-call time in two gloo processes with the debug mode off and on,
  alternating blocks in the same processes; "on" adds the fingerprint exchange through
  the job's TCPStore.

Usage (from the repository root)::

    python bench/bench_debug.py [--quick] [--json PATH] [--strict (no targets: ignored)]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

import torch

import distbridge as idist
from distbridge import _state


def _best_ns(stmt: str, setup_globals: dict[str, Any], loops: int, repeats: int) -> float:
    timer = timeit.Timer(stmt, globals=setup_globals)
    return min(timer.repeat(repeat=repeats, number=loops)) / loops * 1e9


def world_of_one(loops: int, repeats: int) -> list[tuple[str, float]]:
    """The hook alone, and whole calls with the debug mode off, in a gloo world of one."""
    idist.initialize("gloo")
    try:
        model = _state.current()
        assert not model._debug
        scope = {"model": model, "idist": idist, "t": torch.ones(4)}
        hook = _best_ns("if model._debug: pass", scope, loops, repeats)
        empty = _best_ns("pass", scope, loops, repeats)
        rows = [("off: hook only (if self._debug)", hook - empty)]
        rows.append(
            ("off: all_reduce(3.5)", _best_ns("idist.all_reduce(3.5)", scope, loops // 10, repeats))
        )
        rows.append(
            (
                "off: all_reduce(tensor[4])",
                _best_ns("idist.all_reduce(t)", scope, loops // 10, repeats),
            )
        )
    finally:
        idist.finalize()
    return rows


def _per_call_us(call: Callable[[], Any], iters: int) -> float:
    idist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - start) / iters * 1e6


def worker(local_rank: int, iters: int, blocks: int) -> list[tuple[str, float, float]]:
    """Per-call microseconds of a few collectives, debug off and on (median of blocks)."""
    model = _state.current()
    tensor = torch.ones(256)
    calls: dict[str, Callable[[], Any]] = {
        "all_reduce(3.5)": lambda: idist.all_reduce(3.5),
        "all_reduce(tensor[256])": lambda: idist.all_reduce(tensor),
        "barrier()": idist.barrier,
    }
    rows = []
    for name, call in calls.items():
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(blocks):
            for debug in (False, True):
                model._set_debug(debug)
                call()  # warm-up (and, with debug on, the store's first use)
                times[debug].append(_per_call_us(call, iters))
        model._set_debug(False)
        rows.append((name, statistics.median(times[False]), statistics.median(times[True])))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--strict", action="store_true", help="accepted; this bench has no targets")
    opts = parser.parse_args()
    loops, repeats, iters, blocks = (200_000, 5, 30, 5) if opts.quick else (1_000_000, 7, 100, 11)

    single = world_of_one(loops, repeats)
    print(f"{'world of one, debug off':<40} {'ns per call':>12}")
    for name, ns in single:
        print(f"{name:<40} {ns:>12.1f}")

    two = idist.spawn("gloo", worker, args=(iters, blocks), nproc_per_node=2, job_timeout=600)[0]
    print(f"\n{'2 gloo ranks, per call':<28} {'off (us)':>10} {'on (us)':>10} {'added (us)':>11}")
    for name, off, on in two:
        print(f"{name:<28} {off:>10.1f} {on:>10.1f} {on - off:>11.1f}")
    if opts.json:
        out = {
            "world_of_one_ns": dict(single),
            "two_ranks_us": {name: {"off": off, "on": on} for name, off, on in two},
            "torch": torch.__version__,
        }
        with open(opts.json, "w") as file:
            json.dump(out, file, indent=2)


if __name__ == "__main__":
    main()
