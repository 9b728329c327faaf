"""What comms telemetry costs: idist.all_reduce with telemetry off and on, against raw
torch.distributed.all_reduce, in the same two gloo processes.

For each size (4 B, 1 MiB, 64 MiB of float32), each run times four sides in blocks of calls,
the blocks' order rotating from repeat to repeat, each block after a barrier:

- ``raw`` -- ``torch.distributed.all_reduce(x)``: the baseline;
- ``raw again`` -- the same call once more: its ratio to ``raw`` is the noise of the run;
- ``off`` -- ``idist.all_reduce(x)`` with no recording (the model's own method runs);
- ``on`` -- ``idist.all_reduce(x)`` inside ``telemetry.record()`` (every call kept);
- ``off+3us`` -- ``idist.all_reduce(x)`` and then 3 µs of busy Python, about what telemetry
  adds per call: a control. Two processes ping-ponging on a small, busy machine turn any
  few µs of work between calls into tens of µs of latency (a peer that sleeps instead of
  spinning), so a gap of ``on`` over ``off`` is telemetry's own only where it exceeds this.

A side's time is the median over its calls in a run; the table shows the median ratio over
``--runs`` runs and its lowest and highest value. A first table gives the absolute cost per
call without a process group (the serial model), where nothing else hides it.

Usage (from the repository root)::

    python bench/bench_telemetry.py [--quick] [--runs N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import timeit
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import distbridge as idist
from distbridge.testing import telemetry

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import MIB, _duration, _size

NPROC = 2
SIDES = ("raw", "raw again", "off", "on", "off+3us")
BUSY_S = 3e-6


@dataclass(frozen=True)
class Plan:
    """Calls per block for each size, blocks per run, runs; the whole bench or ``--quick``."""

    sizes: tuple[int, ...]
    iters: tuple[int, ...]  # calls per side in each block, one entry per size
    repeats: int  # blocks per side in a run
    runs: int
    serial_loops: int  # calls per timeit repeat, serial rows


FULL = Plan((4, MIB, 64 * MIB), (200, 20, 2), 7, 3, 20_000)
QUICK = Plan((4, MIB, 64 * MIB), (50, 5, 1), 3, 2, 5_000)


def serial_rows(plan: Plan) -> list[tuple[str, float, float]]:
    """Best seconds per call of idist.all_reduce(tensor[4]) and of a number, off and on."""
    x = torch.ones(4)
    rows = []
    for name, call in (
        ("all_reduce(tensor[4])", lambda: idist.all_reduce(x)),
        ("all_reduce(3.5)", lambda: idist.all_reduce(3.5)),
    ):
        timer = timeit.Timer(call)
        off = min(timer.repeat(5, plan.serial_loops)) / plan.serial_loops
        with telemetry.record(keep_calls=False):
            on = min(timer.repeat(5, plan.serial_loops)) / plan.serial_loops
        rows.append((name, off, on))
    return rows


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _block(call: Callable[[], object], iters: int, record: bool) -> list[float]:
    """Seconds of each of ``iters`` calls, after a barrier; inside a recording if ``record``."""
    clock = time.perf_counter
    samples = []
    dist.barrier()
    if record:
        with telemetry.record() as rec:
            for _ in range(iters):
                start = clock()
                call()
                samples.append(clock() - start)
        if len(rec.calls) != iters:
            raise RuntimeError(f"Recorded {len(rec.calls)} calls of {iters}.")
    else:
        for _ in range(iters):
            start = clock()
            call()
            samples.append(clock() - start)
    return samples


def time_size(size: int, iters: int, repeats: int) -> dict[str, float]:
    """Median seconds per call of each side for one size, in one run."""
    x = torch.zeros(max(size // 4, 1), dtype=torch.float32)  # zeros: a sum stays zero
    calls: dict[str, Callable[[], object]] = {
        "raw": lambda: dist.all_reduce(x),
        "raw again": lambda: dist.all_reduce(x),
        "off": lambda: idist.all_reduce(x),
        "on": lambda: idist.all_reduce(x),
        "off+3us": lambda: (idist.all_reduce(x), _busy(BUSY_S)),
    }
    for side in SIDES:  # warm-up, untimed
        _block(calls[side], 1, side == "on")
    samples: dict[str, list[float]] = {side: [] for side in SIDES}
    for repeat in range(repeats):
        order = SIDES[repeat % len(SIDES) :] + SIDES[: repeat % len(SIDES)]
        for side in order:
            samples[side] += _block(calls[side], iters, side == "on")
    return {side: statistics.median(values) for side, values in samples.items()}


def worker(local_rank: int, plan: Plan) -> list[dict[str, Any]] | None:
    """Each run, each size: the four sides' medians. Rank 0 returns them."""
    torch.set_num_threads(1)
    if idist.backend() != "gloo" or idist.get_world_size() != NPROC:
        raise RuntimeError(f"Expected {NPROC} gloo ranks, got {idist.backend()!r}.")
    results = []
    for run in range(plan.runs):
        for size, iters in zip(plan.sizes, plan.iters, strict=True):
            results.append({"run": run, "size": size, **time_size(size, iters, plan.repeats)})
    dist.barrier()
    return results if idist.get_rank() == 0 else None


@dataclass(frozen=True)
class Row:
    """One size: median seconds per call of each side, and the ratios over the runs."""

    size: int
    raw_s: float
    off_s: float
    on_s: float
    off_ratio: tuple[float, float, float]  # median, lowest, highest over the runs
    on_ratio: tuple[float, float, float]
    busy_ratio: tuple[float, float, float]  # the control
    noise_ratio: tuple[float, float, float]


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def rows_from(results: list[dict[str, Any]], plan: Plan) -> list[Row]:
    rows = []
    for size in plan.sizes:
        runs = [r for r in results if r["size"] == size]
        rows.append(
            Row(
                size,
                statistics.median(r["raw"] for r in runs),
                statistics.median(r["off"] for r in runs),
                statistics.median(r["on"] for r in runs),
                _spread([r["off"] / r["raw"] for r in runs]),
                _spread([r["on"] / r["raw"] for r in runs]),
                _spread([r["off+3us"] / r["raw"] for r in runs]),
                _spread([r["raw again"] / r["raw"] for r in runs]),
            )
        )
    return rows


def _ratio(r: tuple[float, float, float]) -> str:
    return f"{r[0]:.3f} ({r[1]:.2f}-{r[2]:.2f})"


def format_tables(serial: Sequence[tuple[str, float, float]], rows: Sequence[Row]) -> str:
    lines = [f"{'serial model, per call':<24} {'off':>9} {'on':>9} {'added':>9}"]
    for name, off, on in serial:
        lines.append(f"{name:<24} {_duration(off):>9} {_duration(on):>9} {_duration(on - off):>9}")
    lines.append("")
    header = ("size", "raw", "off", "on", "off/raw", "on/raw", "off+3us/raw", "noise raw/raw")
    cells = [header] + [
        (_size(r.size), _duration(r.raw_s), _duration(r.off_s), _duration(r.on_s),
         _ratio(r.off_ratio), _ratio(r.on_ratio), _ratio(r.busy_ratio), _ratio(r.noise_ratio))
        for r in rows
    ]  # fmt: skip
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer calls (about a minute)")
    parser.add_argument("--runs", type=int, metavar="N", help="runs (default: 3, quick: 2)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows here")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.runs is not None:
        if args.runs < 1:
            parser.error(f"--runs must be at least 1, got {args.runs}")
        plan = Plan(plan.sizes, plan.iters, plan.repeats, args.runs, plan.serial_loops)

    started = time.perf_counter()
    serial = serial_rows(plan)
    results = idist.spawn("gloo", worker, args=(plan,), nproc_per_node=NPROC, job_timeout=1800)
    rows = rows_from(results[0], plan)
    elapsed = time.perf_counter() - started

    print(format_tables(serial, rows))
    print(
        f"\n{'quick' if args.quick else 'full'} run, {plan.runs} runs, {elapsed:.0f} s; "
        f"torch {torch.__version__}, python {platform.python_version()}, "
        f"{NPROC} gloo processes on one machine"
    )
    if args.json is not None:
        report = {
            "quick": args.quick,
            "plan": asdict(plan),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "seconds": elapsed,
            "serial": [{"name": n, "off_s": off, "on_s": on} for n, off, on in serial],
            "rows": [asdict(row) for row in rows],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    # Workers are started with "spawn" and unpickle ``bench_telemetry.worker``: run the module
    # under that name, not as ``__main__``.
    import bench_telemetry

    raise SystemExit(bench_telemetry.main())
