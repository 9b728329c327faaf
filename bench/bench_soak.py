"""Soak: many mixed collectives on 4 gloo ranks; memory and process groups must not grow.

Every rank runs the same seeded schedule of collectives (tensors of several dtypes and
sizes, Python numbers, strings, objects, reduce / gather / scatter / reduce_scatter /
all_to_all, groups given as lists of ranks, barriers, dict reductions), checking each
result. After a warm-up that runs every kind of call at least once, each rank records its
RSS and the number of live process groups; at the end it records them again. RSS growth
must stay under 20 MB per rank and the process-group count must not change.

Usage (from the repository root)::

    python bench/bench_soak.py [--quick] [--ops N] [--json PATH] [--strict]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import distbridge as idist

WORLD = 4
FULL_OPS, QUICK_OPS = 20_000, 2_000
WARMUP_FRACTION = 0.1  # the first 10 % of the calls (at least every kind once) are warm-up
RSS_LIMIT_MB = 20.0
JOB_TIMEOUT = 1_200.0  # seconds: a hang fails with the workers' stacks instead of blocking

_GROUPS = ([0, 1], [1, 2, 3], [0, 2], [0, 1, 2, 3], [3])


@dataclass(frozen=True)
class RankResult:
    """What one rank measured."""

    rank: int
    ops: int
    seconds: float
    rss_warm_mb: float
    rss_end_mb: float
    groups_warm: int
    groups_end: int

    @property
    def growth_mb(self) -> float:
        return self.rss_end_mb - self.rss_warm_mb

    @property
    def passed(self) -> bool:
        return self.growth_mb < RSS_LIMIT_MB and self.groups_end == self.groups_warm


def _rss_mb() -> float:
    """This process's resident set size (VmRSS), in MB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line in /proc/self/status")


def _process_groups() -> int:
    """The number of live torch.distributed process groups (the default one included)."""
    return len(dist.distributed_c10d._world.pg_map)


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"rank {idist.get_rank()}: wrong result of {what}")


# ---- the calls: each draws from the shared generator (alike on every rank) and returns the
# number of facade collectives it made


def _tensor_all_reduce(rng: random.Random) -> int:
    dtype = rng.choice((torch.float32, torch.float64, torch.int64, torch.bfloat16))
    n = rng.choice((1, 1_000, 65_536))
    x = torch.ones(n, dtype=dtype)
    idist.all_reduce(x)
    _check(bool((x == WORLD).all()), "all_reduce")
    return 1


def _tensor_all_gather(rng: random.Random) -> int:
    dtype = rng.choice((torch.float32, torch.int32, torch.uint8, torch.float16))
    n = rng.choice((1, 100, 10_000))
    out = idist.all_gather(torch.full((n,), idist.get_rank(), dtype=dtype))
    _check(out.shape == (WORLD * n,) and int(out[-1]) == WORLD - 1, "all_gather")
    return 1


def _tensor_broadcast(rng: random.Random) -> int:
    src, n = rng.randrange(WORLD), rng.choice((1, 4_096))
    x = torch.full((n,), float(idist.get_rank()))
    idist.broadcast(x, src=src)
    _check(bool((x == src).all()), "broadcast")
    return 1


def _numbers(rng: random.Random) -> int:
    total = idist.all_reduce(idist.get_rank() + 1)
    _check(total == WORLD * (WORLD + 1) // 2 and type(total) is int, "all_reduce(int)")
    value = idist.broadcast(0.1 * (idist.get_rank() + 1), src=rng.randrange(WORLD))
    _check(isinstance(value, float), "broadcast(float)")
    _check(idist.all_reduce(1.5, "MAX") == 1.5, "all_reduce(float)")
    return 3


def _strings(rng: random.Random) -> int:
    text = "é" * rng.choice((1, 100)) + str(idist.get_rank())
    _check(idist.all_gather(text)[-1].endswith(str(WORLD - 1)), "all_gather(str)")
    _check(idist.broadcast(text, src=0).endswith("0"), "broadcast(str)")
    return 2


def _objects(rng: random.Random) -> int:
    obj = {"rank": idist.get_rank(), "data": list(range(rng.choice((1, 1_000))))}
    _check(idist.all_gather_object(obj)[-1]["rank"] == WORLD - 1, "all_gather_object")
    _check(idist.broadcast_object(obj, src=1)["rank"] == 1, "broadcast_object")
    _check(idist.all_gather({"any": "object"}) == [{"any": "object"}] * WORLD, "all_gather(obj)")
    return 3


def _reduce(rng: random.Random) -> int:
    dst = rng.randrange(WORLD)
    x = torch.ones(rng.choice((1, 1_000)))
    idist.reduce(x, dst=dst)
    _check(float(x[0]) == (WORLD if idist.get_rank() == dst else 1), "reduce")
    idist.reduce(idist.get_rank(), dst=dst)
    return 2


def _gather(rng: random.Random) -> int:
    dst, same = rng.randrange(WORLD), rng.random() < 0.5
    x = torch.ones(3 if same else idist.get_rank() + 1)
    parts = idist.gather(x, dst=dst, same_shape=same)
    _check(len(parts) == (WORLD if idist.get_rank() == dst else 0), "gather")
    return 1


def _scatter(rng: random.Random) -> int:
    src = rng.randrange(WORLD)
    parts = [torch.full((r + 1,), float(r)) for r in range(WORLD)]
    got = idist.scatter(parts if idist.get_rank() == src else None, src=src)
    _check(got.shape == (idist.get_rank() + 1,), "scatter")
    _check(idist.scatter_object(list(range(WORLD)), src=src) == idist.get_rank(), "scatter_obj")
    return 2


def _reduce_scatter(rng: random.Random) -> int:
    k = rng.choice((1, 256))
    out = idist.reduce_scatter(torch.ones(WORLD * k))
    _check(out.shape == (k,) and float(out[0]) == WORLD, "reduce_scatter")
    return 1


def _all_to_all(rng: random.Random) -> int:
    same = rng.random() < 0.5
    sizes = [2] * WORLD if same else [j + 1 for j in range(WORLD)]
    got = idist.all_to_all([torch.ones(n) for n in sizes], same_shape=same)
    _check(len(got) == WORLD, "all_to_all")
    return 1


def _groups(rng: random.Random) -> int:
    group = rng.choice(_GROUPS)
    x = torch.ones(8)
    idist.all_reduce(x, group=group)
    inside = idist.get_rank() in group
    _check(float(x[0]) == (len(group) if inside else 1), "all_reduce(group)")
    idist.all_gather(idist.get_rank(), group=group)
    idist.broadcast(torch.zeros(4), src=group[0], group=group)
    idist.barrier(group=group)
    return 4


def _barrier(rng: random.Random) -> int:
    idist.barrier()
    return 1


def _dicts(rng: random.Random) -> int:
    out = idist.all_reduce_dict({"loss": torch.tensor(1.0), "n": 2}, op="sum")
    _check(out["n"] == 2 * WORLD, "all_reduce_dict")
    idist.reduce_dict({"loss": torch.tensor(1.0)}, dst=rng.randrange(WORLD))
    return 2


CALLS: tuple[Callable[[random.Random], int], ...] = (
    _tensor_all_reduce,
    _tensor_all_reduce,
    _tensor_all_gather,
    _tensor_broadcast,
    _numbers,
    _strings,
    _objects,
    _reduce,
    _gather,
    _scatter,
    _reduce_scatter,
    _all_to_all,
    _groups,
    _barrier,
    _dicts,
)


def soak_worker(local_rank: int, ops: int, seed: int) -> dict[str, Any]:
    """Run at least ``ops`` facade collectives, in the order a generator seeded with ``seed``
    gives (alike on every rank), and measure RSS and process groups after the warm-up."""
    torch.set_num_threads(1)
    rng = random.Random(seed)
    warmup = max(int(ops * WARMUP_FRACTION), 1)
    done = sum(call(rng) for call in CALLS)  # every kind of call before measuring,
    for group in _GROUPS:  # and every group (a group is created at its first use)
        idist.all_reduce(torch.ones(1), group=group)
        done += 1
    while done < warmup:
        done += rng.choice(CALLS)(rng)
    gc.collect()
    idist.barrier()
    rss_warm, groups_warm = _rss_mb(), _process_groups()
    started = time.perf_counter()
    while done < ops:
        done += rng.choice(CALLS)(rng)
    idist.barrier()
    seconds = time.perf_counter() - started
    gc.collect()
    return asdict(
        RankResult(
            rank=idist.get_rank(),
            ops=done,
            seconds=seconds,
            rss_warm_mb=rss_warm,
            rss_end_mb=_rss_mb(),
            groups_warm=groups_warm,
            groups_end=_process_groups(),
        )
    )


def format_table(rows: Sequence[RankResult]) -> str:
    head = (
        f"{'rank':>4}  {'ops':>6}  {'seconds':>8}  {'RSS warm MB':>11}  {'RSS end MB':>10}  "
        f"{'growth MB':>9}  {'groups':>7}  result"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.rank:>4}  {r.ops:>6}  {r.seconds:>8.1f}  {r.rss_warm_mb:>11.1f}  "
            f"{r.rss_end_mb:>10.1f}  {r.growth_mb:>+9.2f}  {r.groups_warm:>3}->{r.groups_end:<3}"
            f"  {'pass' if r.passed else 'FAIL'}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Mixed collectives on 4 gloo ranks: leaks?")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_OPS} ops, not {FULL_OPS}")
    parser.add_argument("--ops", type=int, help="collectives per rank (overrides --quick)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shared schedule")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a rank fails")
    args = parser.parse_args(argv)
    ops = args.ops or (QUICK_OPS if args.quick else FULL_OPS)

    started = time.perf_counter()
    results = idist.spawn(
        "gloo",
        soak_worker,
        args=(ops, args.seed),
        nproc_per_node=WORLD,
        job_timeout=JOB_TIMEOUT,
    )
    elapsed = time.perf_counter() - started
    rows = [RankResult(**fields) for fields in results]
    print(format_table(rows))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\n{rows[0].ops} collectives per rank on {WORLD} gloo ranks in {elapsed:.0f} s "
        f"(after warm-up: {max(r.seconds for r in rows):.0f} s); RSS growth limit "
        f"{RSS_LIMIT_MB:.0f} MB; torch {torch.__version__}, python "
        f"{platform.python_version()}, {os.cpu_count()} cores, load average {load}"
    )
    if args.json is not None:
        report = {
            "ops": ops,
            "world": WORLD,
            "seconds": elapsed,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "ranks": [dict(asdict(r), growth_mb=r.growth_mb, passed=r.passed) for r in rows],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if args.strict and not all(r.passed for r in rows) else 0


if __name__ == "__main__":
    # Run the module under its own name, not as ``__main__``, as the other benches do: the
    # workers then import the same module, whatever the start method.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_soak

    raise SystemExit(bench_soak.main())
