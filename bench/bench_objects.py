"""Object collectives: distbridge against torch.distributed's own, in time and in memory.

Speed rows time each of ``idist.all_gather_object``, ``gather_object``, ``broadcast_object``
and ``scatter_object`` against torch.distributed's ``all_gather_object``, ``gather_object``,
``broadcast_object_list`` and ``scatter_object_list`` in the same processes, alternating the
two (bench_core's ``_time_pair``), on a dict of numpy arrays and CPU tensors of about 64 MiB
per object and on a small dict of about 1 KiB, with 2 and 4 gloo processes. Each row also
times the distbridge call against a *tensor floor*: the raw torch.distributed tensor
collective moving a uint8 tensor of the object's pickled size (the limit a serializer can
approach). Memory rows measure the peak RSS growth of each rank during one 64 MiB call, in
fresh worker processes (bench_objects_memory.py). See bench/README.md.

Usage (from the repository root)::

    python bench/bench_objects.py [--quick] [--json PATH] [--strict]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import distbridge as idist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import MIB, _duration, _gather_into, _size, _time_pair
from bench_objects_memory import MemoryRow, memory_lines, peak_growth

WORLDS = (2, 4)
OPS = ("all_gather_object", "gather_object", "broadcast_object", "scatter_object")
BIG_PART = 16 * MIB  # four parts (two numpy arrays, two tensors): 64 MiB per object

# Targets (issue 16): distbridge / torch seconds, highest allowed. 64 MiB: at least 1.5x
# faster than torch; ~1 KiB: at least 0.9x torch's speed. The same for every collective.
TARGET_BIG = 1 / 1.5
TARGET_SMALL = 1 / 0.9

JOB_TIMEOUT = 600.0  # seconds for one set of workers: a hang fails with the workers' stacks


@dataclass(frozen=True)
class Plan:
    """How many calls each row makes: the whole bench, or ``--quick``."""

    small_iters: int  # calls per side in each timed block: ~1 KiB
    small_repeats: int  # timed blocks, ~1 KiB
    small_warmup: int  # untimed calls per side first, ~1 KiB
    big_iters: int  # calls per side in each timed block: 64 MiB
    big_repeats: int  # timed blocks, 64 MiB (one untimed call per side first)


FULL = Plan(small_iters=40, small_repeats=7, small_warmup=5, big_iters=1, big_repeats=6)
QUICK = Plan(small_iters=15, small_repeats=3, small_warmup=2, big_iters=1, big_repeats=1)


@dataclass(frozen=True)
class SpeedRow:
    """Median seconds per call: distbridge against torch's object collective, and
    distbridge again (a second pairing) against the tensor floor."""

    name: str
    world: int
    size: int  # bytes of each object, pickled in band (what torch sends per object)
    distbridge_s: float  # paired with raw_s
    raw_s: float  # torch.distributed's object collective
    floor_distbridge_s: float  # paired with floor_s
    floor_s: float  # the raw tensor collective of ``size`` bytes per object
    target: float  # the highest acceptable distbridge / raw

    @property
    def ratio(self) -> float:
        return self.distbridge_s / self.raw_s

    @property
    def vs_floor(self) -> float:
        return self.floor_distbridge_s / self.floor_s

    @property
    def passed(self) -> bool:
        return self.ratio <= self.target

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "ratio": self.ratio,
            "speedup": 1 / self.ratio,
            "vs_tensor": self.vs_floor,
            "passed": self.passed,
        }


# ---- the objects ------------------------------------------------------------------------------


def make_object(rank: int, big: bool) -> dict[str, Any]:
    """Rank ``rank``'s object: distinct, exactly reproducible values on every rank."""
    n = BIG_PART // 4 if big else 16  # float32 elements per part; < 2**24, so exact
    parts: dict[str, Any] = {}
    for k, key in enumerate(("np_a", "np_b", "t_c", "t_d")):
        values = np.arange(n, dtype=np.float32)
        values += 10 * rank + k
        parts[key] = torch.from_numpy(values) if key.startswith("t_") else values
    if big:
        return {"rank": rank, **parts}
    return {
        "rank": rank,
        "step": 1234,
        "loss": 0.25 * rank,
        "name": f"worker-{rank}",
        "tags": ["train", "eval", "ckpt"],
        **parts,
    }


def payload_size(obj: Any) -> int:
    """Bytes of ``obj`` pickled in band (what torch.distributed sends)."""
    return len(pickle.dumps(obj, protocol=5))


def check_equal(what: str, got: Any, expected: Any) -> None:
    """Raise unless ``got`` equals ``expected`` (same types, dtypes, shapes and values)."""
    if type(got) is not type(expected):
        raise RuntimeError(f"{what}: got a {type(got).__name__}, expected {type(expected)}.")
    if isinstance(expected, dict):
        if list(got) != list(expected):
            raise RuntimeError(f"{what}: keys {list(got)} != {list(expected)}.")
        for key in expected:
            check_equal(f"{what}[{key!r}]", got[key], expected[key])
    elif isinstance(expected, np.ndarray):
        if got.dtype != expected.dtype or not np.array_equal(got, expected):
            raise RuntimeError(f"{what}: numpy arrays differ.")
    elif isinstance(expected, torch.Tensor):
        if got.dtype != expected.dtype or not torch.equal(got, expected):
            raise RuntimeError(f"{what}: tensors differ.")
    elif got != expected:
        raise RuntimeError(f"{what}: {got!r} != {expected!r}.")


# ---- the calls (rank 0 is every root) ---------------------------------------------------------


def _inputs(op: str, big: bool) -> Any:
    """What this rank passes to ``op``: its object; for broadcasts rank 0's object (None
    elsewhere); for scatters, on rank 0, the list of every rank's object (None elsewhere)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if op in ("all_gather_object", "gather_object"):
        return make_object(rank, big)
    if rank != 0:
        return None
    if op == "broadcast_object":
        return make_object(0, big)
    return [make_object(r, big) for r in range(world)]


def _calls(op: str, obj: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """distbridge's call and torch.distributed's for ``op``, on ``_inputs(op, ...)``."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if op == "all_gather_object":

        def facade() -> Any:
            return idist.all_gather_object(obj)

        def raw() -> Any:
            out: list[Any] = [None] * world
            dist.all_gather_object(out, obj)
            return out

    elif op == "gather_object":

        def facade() -> Any:
            return idist.gather_object(obj, dst=0)

        def raw() -> Any:
            out: list[Any] | None = [None] * world if rank == 0 else None
            dist.gather_object(obj, out, dst=0)
            return out

    elif op == "broadcast_object":

        def facade() -> Any:
            return idist.broadcast_object(obj, src=0)

        def raw() -> Any:
            box = [obj]
            dist.broadcast_object_list(box, src=0)
            return box[0]

    elif op == "scatter_object":

        def facade() -> Any:
            return idist.scatter_object(obj, src=0)

        def raw() -> Any:
            box: list[Any] = [None]
            dist.scatter_object_list(box, obj, src=0)
            return box[0]

    else:
        raise ValueError(op)
    return facade, raw


def _floor(op: str, size: int) -> Callable[[], Any]:
    """The raw tensor collective behind ``op``, moving a uint8 tensor of ``size`` bytes per
    object: what is sent exists already (as the object does); what is received is a fresh
    tensor every call (as the rebuilt object is)."""
    world, rank = dist.get_world_size(), dist.get_rank()

    def send() -> torch.Tensor:
        return torch.ones(size, dtype=torch.uint8)  # written: its pages are resident

    def fresh() -> torch.Tensor:
        return torch.empty(size, dtype=torch.uint8)

    if op == "all_gather_object":
        mine = send()

        def floor() -> Any:
            out = torch.empty(world * size, dtype=torch.uint8)
            _gather_into(out, mine)
            return out

    elif op == "gather_object":
        mine = send()

        def floor() -> Any:
            out = [fresh() for _ in range(world)] if rank == 0 else None
            dist.gather(mine, out, dst=0)
            return out

    elif op == "broadcast_object":
        mine = send() if rank == 0 else None

        def floor() -> Any:
            out = mine if mine is not None else fresh()
            dist.broadcast(out, src=0)
            return out

    elif op == "scatter_object":
        chunks = [send() for _ in range(world)] if rank == 0 else None

        def floor() -> Any:
            out = fresh()
            dist.scatter(out, chunks, src=0)
            return out

    else:
        raise ValueError(op)
    return floor


def _check_case(op: str, big: bool, facade: Callable[[], Any], raw: Callable[[], Any]) -> None:
    """Once per case: both sides give every rank exactly the objects it should get."""
    world, rank = dist.get_world_size(), dist.get_rank()
    for side, fn in (("distbridge", facade), ("torch", raw)):
        got = fn()
        what = f"{side} {op} on rank {rank}"
        if op == "broadcast_object":
            check_equal(what, got, make_object(0, big))
        elif op == "scatter_object":
            check_equal(what, got, make_object(rank, big))
        else:
            expected = world if op == "all_gather_object" or rank == 0 else 0
            got = [] if got is None else got  # torch's gather_object: None off the root
            if len(got) != expected:
                raise RuntimeError(f"{what}: {len(got)} objects, expected {expected}.")
            for r in range(expected):  # one expected object at a time: little extra memory
                check_equal(f"{what}, object {r}", got[r], make_object(r, big))
        del got


def _then_barrier(fn: Callable[[], Any]) -> Callable[[], None]:
    """``fn`` followed by a barrier: the timed call ends when every rank is done with it."""

    def synced() -> None:
        fn()
        dist.barrier()

    return synced


def speed_rows(plan: Plan) -> list[SpeedRow]:
    """Every speed row for this world; each rank makes the same calls in the same order."""
    world = dist.get_world_size()
    rows = []
    for big in (False, True):
        size = payload_size(make_object(0, big))  # every rank's object pickles to this size
        for op in OPS:
            obj = _inputs(op, big)
            facade, raw = _calls(op, obj)
            floor = _floor(op, size)
            _check_case(op, big, facade, raw)  # also the first, untimed call of each side
            if big:
                # A 64 MiB call leaves seconds of decoding on the receiving ranks (torch's)
                # or almost none (distbridge's): without the barrier, rank 0's next call
                # would pay for the previous one's tail.
                facade, raw, floor = (_then_barrier(fn) for fn in (facade, raw, floor))
                floor()  # its untimed first call
                timing = (plan.big_iters, plan.big_repeats, 0)
            else:
                timing = (plan.small_iters, plan.small_repeats, plan.small_warmup)
            vs_raw = _time_pair(facade, raw, *timing)
            vs_floor = _time_pair(facade, floor, *timing)
            target = TARGET_BIG if big else TARGET_SMALL
            rows.append(SpeedRow(op, world, size, *vs_raw, *vs_floor, target))
            del obj, facade, raw, floor
            gc.collect()
    return rows


def speed_worker(local_rank: int, plan: Plan) -> list[dict[str, Any]] | None:
    """Run in each spawned process: time every row; rank 0 returns them."""
    torch.set_num_threads(1)  # several processes on a small machine: no oversubscription
    rows = speed_rows(plan)
    dist.barrier()
    return [asdict(row) for row in rows] if idist.get_rank() == 0 else None


# ---- memory -----------------------------------------------------------------------------------


def memory_worker(local_rank: int, library: str, op: str) -> tuple[int, int, str]:
    """Run in fresh processes: this rank's peak RSS growth (bytes) during one 64 MiB call,
    the payload (bytes) and how the peak was read."""
    torch.set_num_threads(1)
    side = 0 if library == "distbridge" else 1
    # Warm the same code path with a small object first: lazy imports and gloo's own
    # buffers are then in the baseline, not in the measured call.
    _calls(op, _inputs(op, big=False))[side]()
    call = _calls(op, _inputs(op, big=True))[side]
    gc.collect()
    dist.barrier()
    growth, method = peak_growth(call)
    dist.barrier()
    payload = payload_size(make_object(0, big=True)) if dist.get_rank() == 0 else 0
    return growth, payload, method


def memory_rows() -> list[MemoryRow]:
    """One fresh set of processes per (world, op, library)."""
    rows = []
    for world in WORLDS:
        for op in OPS:
            for library in ("distbridge", "torch"):
                results = _spawn(memory_worker, (library, op), world)
                growth = tuple(g for g, _, _ in results)
                rows.append(MemoryRow(op, library, world, results[0][1], growth, results[0][2]))
    return rows


def _spawn(fn: Callable[..., Any], args: tuple[Any, ...], world: int) -> list[Any]:
    """``fn(local_rank, *args)`` in ``world`` fresh gloo processes. Forked: a spawned worker
    imports torch again (tens of seconds for 4 workers on a busy 2-core machine); the parent
    has started no threads, and each child builds its own objects after the fork."""
    return idist.spawn(
        "gloo",
        fn,
        args=args,
        nproc_per_node=world,
        start_method="fork",
        job_timeout=JOB_TIMEOUT,
    )


# ---- report -----------------------------------------------------------------------------------


def _table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(cells[i]) for cells in (header, *lines)) for i in range(len(header))]

    def fmt(cells: Sequence[str]) -> str:
        left = cells[0].ljust(widths[0])
        return "  ".join([left, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), rule, *(fmt(cells) for cells in lines)])


def format_speed(rows: Sequence[SpeedRow]) -> str:
    header = (
        *("name", "world", "size", "distbridge", "raw", "ratio", "speedup", "target", "result"),
        *("tensor", "vs tensor"),
    )
    lines = [
        (
            row.name,
            str(row.world),
            _size(row.size),
            _duration(row.distbridge_s),
            _duration(row.raw_s),
            f"{row.ratio:.3f}",
            f"{1 / row.ratio:.2f}x",
            f"<= {row.target:.3g}",
            "pass" if row.passed else "FAIL",
            _duration(row.floor_s),
            f"{row.vs_floor:.2f}",
        )
        for row in rows
    ]
    return _table(header, lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time and measure distbridge's object collectives against torch's."
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls (a few minutes)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a row misses")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL

    started = time.perf_counter()
    speed: list[SpeedRow] = []
    for world in WORLDS:
        results = _spawn(speed_worker, (plan,), world)
        speed += [SpeedRow(**fields) for fields in results[0]]
    memory = memory_rows()
    elapsed = time.perf_counter() - started

    print(format_speed(speed))
    print()
    print(_table(*memory_lines(memory)))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\n{'quick' if args.quick else 'full'} run, {elapsed:.0f} s; torch {torch.__version__}, "
        f"numpy {np.__version__}, python {platform.python_version()}, gloo processes on one "
        f"machine ({os.cpu_count()} cores, load average {load}); memory method "
        f"{memory[0].method}"
    )
    if args.json is not None:
        report = {
            "quick": args.quick,
            "plan": asdict(plan),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "seconds": elapsed,
            "speed": [row.to_json() for row in speed],
            "memory": [row.to_json() for row in memory],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    passed = all(row.passed for row in speed) and all(row.passed for row in memory)
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    # Run the module under its own name, not as ``__main__``, as bench_core does: the rows'
    # classes and the workers then have one home, whatever the start method.
    import bench_objects

    raise SystemExit(bench_objects.main())
