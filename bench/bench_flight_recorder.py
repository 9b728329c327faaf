"""What reading torch's flight recorder costs the hang report (``model._engine_trace``).

A gloo world of one in this process runs ``--calls`` all-reduces, so torch's recorder holds
its whole buffer (``TORCH_FR_BUFFER_SIZE``, 2,000 entries by default). Then, alternating
(A, B, B, A, ...), the native model's ``_engine_trace(8)`` (torch's JSON dump, parsed and
reduced to each group's last 8 entries) against the raw engine's own read of the same
record (the dump and ``json.loads``), with a noise row (the raw read against itself) and
the dump alone. Figures: the median milliseconds per read in each run, and the ratio.

Usage (from the repository root)::

    python bench/bench_flight_recorder.py [--runs 3] [--reads 20] [--calls 2500]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

import distbridge as idist
from distbridge._state import current

Call = Callable[[], object]


def _medians(a: Call, b: Call, reads: int) -> tuple[float, float]:
    """Median milliseconds of ``a`` and of ``b``, reads alternating."""
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(reads):
        order = ((a, times[0]), (b, times[1])) if i % 2 else ((b, times[1]), (a, times[0]))
        for f, acc in order:
            start = time.perf_counter()
            f()
            acc.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[0]), statistics.median(times[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="whole runs (default 3)")
    parser.add_argument("--reads", type=int, default=20, help="reads a side a run (20)")
    parser.add_argument("--calls", type=int, default=2500, help="all-reduces first (2500)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    idist.initialize("gloo")  # no launcher: a world of one
    try:
        x = torch.zeros(4)
        for _ in range(args.calls):
            dist.all_reduce(x)
        model = current()
        entries = len(json.loads(c10d._dump_fr_trace_json()).get("entries", []))
        shown = len((model._engine_trace(8) or {}).get("entries", []))

        def ours() -> object:
            return model._engine_trace(8)

        def raw() -> object:
            return json.loads(c10d._dump_fr_trace_json())

        def dump() -> object:
            return c10d._dump_fr_trace_json()

        rows: dict[str, tuple[Call, Call]] = {
            "_engine_trace(8) / raw dump + json.loads": (ours, raw),
            "noise: raw / itself": (raw, raw),
            "raw dump alone / raw dump + json.loads": (dump, raw),
        }
        runs = [
            {name: _medians(a, b, args.reads) for name, (a, b) in rows.items()}
            for _ in range(args.runs)
        ]
    finally:
        idist.finalize()
    print(
        f"torch's flight recorder holding {entries} entries ({shown} shown); "
        f"{args.reads} reads a side, alternating; {args.runs} runs"
    )
    print(f"  {'row':42} {'A ms':>7} {'B ms':>7} {'A / B':>6}  (ratio per run)")
    for name in rows:
        a_ms = statistics.median(run[name][0] for run in runs)
        b_ms = statistics.median(run[name][1] for run in runs)
        ratios = sorted(run[name][0] / run[name][1] for run in runs)
        print(
            f"  {name:42} {a_ms:7.1f} {b_ms:7.1f} {a_ms / b_ms:6.2f}"
            f"  ({', '.join(f'{r:.2f}' for r in ratios)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
