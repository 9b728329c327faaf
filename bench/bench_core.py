"""The cost of the distbridge facade over hand-written torch.distributed code.

Every row times a distbridge call and the raw torch.distributed code it replaces in the
same process and the same run, alternating the two, and reports their ratio against a
target. See bench/README.md for what each row measures.

Usage (from the repository root)::

    python bench/bench_core.py [--quick] [--json PATH] [--strict]
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

MIB = 1 << 20
NPROC = 2
TEXT = "some str"

# Ratio targets (distbridge time / raw time), highest allowed.
TARGET_SERIAL_RANK = 2.0
TARGET_SERIAL_DEVICE = 3.0
TARGET_TENSOR = 1.05
TARGET_SMALL_TENSOR = 1.10  # 4 B: a few µs of facade over the engine's latency
TARGET_ORDERED_MIN_MAX = 6.0  # float MIN / MAX through ordered integer keys (IEEE answer)
TARGET_NUMBER = 1.15
TARGET_STR = 1.0

# The raw single-tensor all-gather (the same choice distbridge's native model makes).
_gather_into: Callable[..., Any] = (
    getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
)


@dataclass(frozen=True)
class Plan:
    """How many iterations each kind of row runs: the whole bench, or ``--quick``."""

    serial_loops: int  # calls per timeit repeat, serial rows
    serial_repeats: int  # timeit repeats; the fastest counts
    tiny_iters: int  # calls per side in each timed block: Python numbers and strings
    small_iters: int  # calls per side in each timed block: 1 MiB tensors
    big_iters: int  # calls per side in each timed block: 64 MiB tensors
    repeats: int  # timed blocks (each after a barrier); the median over all calls counts
    big_repeats: int  # timed blocks for 64 MiB tensors
    warmup: int  # untimed calls per side before the first block (64 MiB: one)


FULL = Plan(
    serial_loops=200_000,
    serial_repeats=7,
    tiny_iters=200,
    small_iters=20,
    big_iters=3,
    repeats=9,
    big_repeats=7,
    warmup=3,
)
QUICK = Plan(
    serial_loops=50_000,
    serial_repeats=5,
    tiny_iters=50,
    small_iters=5,
    big_iters=1,
    repeats=5,
    big_repeats=5,
    warmup=1,
)


@dataclass(frozen=True)
class Row:
    """One measurement: seconds per call for distbridge and for raw torch.distributed."""

    name: str
    size: int | None  # bytes each rank sends; None where it does not apply
    distbridge_s: float
    raw_s: float
    target: float  # the highest acceptable ratio

    @property
    def ratio(self) -> float:
        return self.distbridge_s / self.raw_s

    @property
    def passed(self) -> bool:
        return self.ratio <= self.target

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "passed": self.passed}


# ---- serial mode (no process group) -----------------------------------------------------------


def _min_per_call(fn: Callable[[], object], loops: int) -> float:
    """Seconds per call of one timeit repeat of ``loops`` calls."""
    return timeit.Timer("fn()", globals={"fn": fn}).timeit(loops) / loops


def _time_serial(
    facade: Callable[[], object], raw: Callable[[], object], plan: Plan
) -> tuple[float, float]:
    """Best-of-repeats seconds per call of ``facade`` and ``raw``, alternating the two."""
    facade_best = raw_best = float("inf")
    for _ in range(plan.serial_repeats):
        raw_best = min(raw_best, _min_per_call(raw, plan.serial_loops))
        facade_best = min(facade_best, _min_per_call(facade, plan.serial_loops))
    return facade_best, raw_best


def serial_rows(plan: Plan) -> list[Row]:
    """The facade's per-call cost without a distributed context."""
    if dist.is_initialized():
        raise RuntimeError("The serial rows need a process without a process group.")
    if idist.model_name() != "serial":
        raise RuntimeError(f"Expected the serial model, got {idist.model_name()!r}.")
    rows = []
    for name, facade, target in (
        ("serial get_rank()", idist.get_rank, TARGET_SERIAL_RANK),
        ("serial device()", idist.device, TARGET_SERIAL_DEVICE),
    ):
        facade_s, raw_s = _time_serial(facade, dist.is_initialized, plan)
        rows.append(Row(name, None, facade_s, raw_s, target))
    return rows


# ---- two gloo processes -----------------------------------------------------------------------


def _time_pair(
    facade: Callable[[], object],
    raw: Callable[[], object],
    iters: int,
    repeats: int,
    warmup: int,
) -> tuple[float, float]:
    """Median seconds per call of ``facade`` and ``raw``.

    After ``warmup`` untimed calls of each, ``repeats`` blocks run, each after a barrier (so
    no rank starts a block while its peer is still busy). A block makes ``iters`` calls of
    each side, interleaved one by one (raw then facade, then facade then raw, ...) and timed
    one by one, so both sides see the same machine load. The median over every timed call
    shrugs off the calls a busy machine preempted. Every rank must make the same calls.
    """
    for _ in range(warmup):
        raw()
        facade()
    samples: dict[str, list[float]] = {"facade": [], "raw": []}
    pair = (("raw", raw), ("facade", facade))
    clock = time.perf_counter
    for repeat in range(repeats):
        dist.barrier()
        for i in range(iters):
            for side, fn in pair if (repeat * iters + i) % 2 == 0 else pair[::-1]:
                start = clock()
                fn()
                samples[side].append(clock() - start)
    return statistics.median(samples["facade"]), statistics.median(samples["raw"])


def _raw_number_all_reduce() -> float:
    """The hand-written way to sum a Python float over ranks."""
    t = torch.tensor([3.5], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item()


def _raw_str_all_gather(text: str) -> list[str]:
    """The hand-written way to gather a str: byte lengths first, then the padded bytes."""
    world = dist.get_world_size()
    payload = text.encode("utf-8")
    lengths_t = torch.empty(world, dtype=torch.int64)
    _gather_into(lengths_t, torch.tensor([len(payload)], dtype=torch.int64))
    lengths = lengths_t.tolist()
    longest = max(lengths)
    padded = torch.zeros(longest, dtype=torch.uint8)
    if payload:
        padded[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    gathered = torch.empty(world * longest, dtype=torch.uint8)
    _gather_into(gathered, padded)
    rows = gathered.view(world, longest).numpy()
    return [rows[i, :n].tobytes().decode("utf-8") for i, n in enumerate(lengths)]


def _facade_number_all_reduce() -> float:
    return idist.all_reduce(3.5)


def _facade_str_all_gather() -> list[str]:
    return idist.all_gather(TEXT)


def _raw_str_gather_text() -> list[str]:
    return _raw_str_all_gather(TEXT)


def _check_same(what: str, facade: object, raw: object) -> None:
    if facade != raw:
        raise RuntimeError(f"{what}: distbridge returned {facade!r}, raw code {raw!r}.")


def _tensor_rows(plan: Plan, size: int) -> list[Row]:
    """all_reduce, all_gather and broadcast of a float32 tensor of ``size`` bytes."""
    big = size >= 64 * MIB
    iters = plan.big_iters if big else plan.small_iters
    repeats = plan.big_repeats if big else plan.repeats
    warmup = 1 if big else plan.warmup
    world = dist.get_world_size()
    # Zeros keep an in-place sum at zero however often it runs (no overflow, no denormals).
    x = torch.zeros(size // 4, dtype=torch.float32)

    def raw_all_gather() -> torch.Tensor:
        # all_gather returns a new tensor, so the raw equivalent allocates its output too
        out = torch.empty(world * x.numel(), dtype=torch.float32)
        _gather_into(out, x)
        return out

    cases: list[tuple[str, Callable[[], object], Callable[[], object], float]] = [
        ("all_reduce", lambda: idist.all_reduce(x), lambda: dist.all_reduce(x), TARGET_TENSOR),
        ("all_gather", lambda: idist.all_gather(x), raw_all_gather, TARGET_TENSOR),
        ("broadcast", lambda: idist.broadcast(x, src=0), lambda: dist.broadcast(x, src=0),
         TARGET_TENSOR),
        # IEEE minimum (a NaN wins) against gloo's MIN, which keeps the first operand: the
        # keys' element-wise work is the cost of a defined answer
        ("all_reduce MIN", lambda: idist.all_reduce(x, op="MIN"),
         lambda: dist.all_reduce(x, op=dist.ReduceOp.MIN), TARGET_ORDERED_MIN_MAX),
    ]  # fmt: skip
    rows = []
    for name, facade, raw, target in cases:
        facade_s, raw_s = _time_pair(facade, raw, iters, repeats, warmup)
        rows.append(Row(f"tensor {name} float32", size, facade_s, raw_s, target))
    return rows


def _small_all_reduce_row(plan: Plan) -> Row:
    """all_reduce of a one-element float32 tensor (4 B): the engine's latency, so the row
    shows the facade's own cost per call (its checks, the ledger, the failure wrapper)."""
    x = torch.zeros(1, dtype=torch.float32)
    facade_s, raw_s = _time_pair(
        lambda: idist.all_reduce(x), lambda: dist.all_reduce(x), plan.tiny_iters, plan.repeats,
        plan.warmup,
    )  # fmt: skip
    return Row("tensor all_reduce float32", 4, facade_s, raw_s, TARGET_SMALL_TENSOR)


def distributed_rows(plan: Plan) -> list[Row]:
    """Every multi-process row; each rank runs the same calls in the same order."""
    _check_same("all_reduce(3.5)", _facade_number_all_reduce(), _raw_number_all_reduce())
    _check_same(f"all_gather({TEXT!r})", _facade_str_all_gather(), _raw_str_gather_text())
    rows = [_small_all_reduce_row(plan), *_tensor_rows(plan, 1 * MIB)]
    rows += _tensor_rows(plan, 64 * MIB)
    tiny: list[tuple[str, Callable[[], object], Callable[[], object], float]] = [
        ("all_reduce(3.5) float", _facade_number_all_reduce, _raw_number_all_reduce, TARGET_NUMBER),
        (f"all_gather({TEXT!r}) str", _facade_str_all_gather, _raw_str_gather_text, TARGET_STR),
    ]
    for name, facade, raw, target in tiny:
        facade_s, raw_s = _time_pair(facade, raw, plan.tiny_iters, plan.repeats, plan.warmup)
        rows.append(Row(name, None, facade_s, raw_s, target))
    return rows


def worker(local_rank: int, plan: Plan) -> list[dict[str, Any]] | None:
    """Run in each spawned process: time every row; rank 0 returns them."""
    torch.set_num_threads(1)  # two processes on a small machine: no intra-op oversubscription
    if idist.backend() != "gloo" or idist.get_world_size() != NPROC:
        raise RuntimeError(f"Expected {NPROC} gloo ranks, got {idist.backend()!r}.")
    rows = distributed_rows(plan)
    dist.barrier()
    return [asdict(row) for row in rows] if idist.get_rank() == 0 else None


# ---- report -----------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    for unit, scale in (("µs", 1e6), ("ms", 1e3)):
        if seconds * scale < 999.5:
            return f"{seconds * scale:.3g} {unit}"
    return f"{seconds:.3g} s"


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size // MIB} MiB" if size >= MIB else f"{size} B"


def format_table(rows: Sequence[Row]) -> str:
    header = ("name", "size", "distbridge", "raw", "ratio", "target", "result")
    lines = [
        (
            row.name,
            _size(row.size),
            _duration(row.distbridge_s),
            _duration(row.raw_s),
            f"{row.ratio:.3f}",
            f"<= {row.target:g}",
            "pass" if row.passed else "FAIL",
        )
        for row in rows
    ]
    widths = [max(len(cells[i]) for cells in (header, *lines)) for i in range(len(header))]

    def fmt(cells: Sequence[str]) -> str:
        left = cells[0].ljust(widths[0])
        return "  ".join([left, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), rule, *(fmt(cells) for cells in lines)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time the distbridge facade against raw torch.distributed code."
    )
    parser.add_argument("--quick", action="store_true", help="fewer iterations (about 15 s)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a row misses")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL

    started = time.perf_counter()
    rows = serial_rows(plan)
    results = idist.spawn("gloo", worker, args=(plan,), nproc_per_node=NPROC)
    rows += [Row(**fields) for fields in results[0]]
    elapsed = time.perf_counter() - started

    print(format_table(rows))
    print(
        f"\n{'quick' if args.quick else 'full'} run, {elapsed:.0f} s; torch {torch.__version__}, "
        f"python {platform.python_version()}, {NPROC} gloo processes on one machine"
    )
    if args.json is not None:
        report = {
            "quick": args.quick,
            "plan": asdict(plan),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "seconds": elapsed,
            "rows": [row.to_json() for row in rows],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if args.strict and not all(row.passed for row in rows) else 0


if __name__ == "__main__":
    # Workers are started with "spawn" and unpickle ``bench_core.worker``: make this
    # directory importable and run the module under that name, not as ``__main__``.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_core

    raise SystemExit(bench_core.main())
