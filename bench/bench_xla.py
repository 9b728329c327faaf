"""The cost of the distbridge facade over raw ``xm.all_reduce`` on an XLA device.

One process on the XLA CPU device (``PJRT_DEVICE=CPU``, a world of one) times
``idist.all_reduce`` against the raw ``torch_xla`` call it replaces, alternating the two call
by call (see bench/README.md). ``XLA_ALWAYS_ALLREDUCE=1`` makes XLA compile and run its real
all-reduce for one replica (otherwise ``xm.all_reduce`` returns at once and both sides time
nothing). Each timed call ends with ``torch_xla.sync()`` and ``xm.wait_device_ops()``, so the
device work is in the time of both sides. The Python-number row compares
``idist.all_reduce(3.5)`` with the raw code that gets a float back without growing the graph
(all-reduce, ``torch_xla.sync()``, ``.item()``).

Usage (from the repository root, in the XLA venv: ``nox -s xla`` runs it)::

    python bench/bench_xla.py [--quick] [--json PATH] [--strict]
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

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ["XLA_ALWAYS_ALLREDUCE"] = "1"  # before torch_xla is imported

import torch

import distbridge as idist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_core import FULL, MIB, QUICK, Plan, Row, format_table  # noqa: E402

TARGET_TENSOR = 1.05
TARGET_NUMBER = 1.15


def _time_pair(
    facade: Callable[[], object], raw: Callable[[], object], iters: int, plan: Plan
) -> tuple[float, float]:
    """Median seconds per call of each side, the calls interleaved and timed one by one."""
    for _ in range(plan.warmup):
        raw()
        facade()
    samples: dict[str, list[float]] = {"facade": [], "raw": []}
    pair = (("raw", raw), ("facade", facade))
    clock = time.perf_counter
    for i in range(iters * plan.repeats):
        for side, fn in pair if i % 2 == 0 else pair[::-1]:
            start = clock()
            fn()
            samples[side].append(clock() - start)
    return statistics.median(samples["facade"]), statistics.median(samples["raw"])


def rows(plan: Plan) -> list[Row]:
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = idist.device()

    def done() -> None:
        torch_xla.sync()
        xm.wait_device_ops()

    out = []
    for size in (1 * MIB, 64 * MIB):
        x = torch.zeros(size // 4, dtype=torch.float32, device=device)  # sums stay at zero

        def facade(x: torch.Tensor = x) -> None:
            idist.all_reduce(x)
            done()

        def raw(x: torch.Tensor = x) -> None:
            xm.all_reduce(xm.REDUCE_SUM, [x])
            done()

        iters = plan.big_iters if size >= 64 * MIB else plan.small_iters
        facade_s, raw_s = _time_pair(facade, raw, iters, plan)
        out.append(Row("xla all_reduce float32", size, facade_s, raw_s, TARGET_TENSOR))

    def raw_number() -> float:
        # torch_xla.sync() ends the graph: without it each call's graph also holds every
        # earlier all-reduce (XLA chains them through a token) and recompiles, ever slower.
        t = torch.tensor([3.5], dtype=torch.float64, device=device)
        xm.all_reduce(xm.REDUCE_SUM, [t])
        torch_xla.sync()
        return float(t.item())

    if idist.all_reduce(3.5) != raw_number():
        raise RuntimeError("all_reduce(3.5): distbridge and raw torch_xla disagree.")
    facade_s, raw_s = _time_pair(lambda: idist.all_reduce(3.5), raw_number, plan.tiny_iters, plan)
    out.append(Row("xla all_reduce(3.5) float", None, facade_s, raw_s, TARGET_NUMBER))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a row misses")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    torch.set_num_threads(1)
    idist.initialize("xla-tpu")
    where = f"{idist.device()} ({os.environ['PJRT_DEVICE']}) on {platform.node()}"
    try:
        results = rows(plan)
    finally:
        idist.finalize()
    print(f"distbridge facade vs raw torch_xla, one replica, {where}")
    print(format_table(results))
    if args.json:
        data: dict[str, Any] = {"plan": asdict(plan), "rows": [r.to_json() for r in results]}
        args.json.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return 1 if args.strict and not all(r.passed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
