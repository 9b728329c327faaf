"""distbridge's reduce, gather, scatter, reduce_scatter, all_to_all against raw torch.distributed.

Two parts, each timed in the same gloo processes as its baseline (calls interleaved one by
one, medians; the helpers come from ``bench_core``):

1. Native ops: each facade call against the torch.distributed op it delegates to. distbridge's
   gather, scatter and all_to_all first exchange shapes (one small collective) unless told
   ``same_shape=True``; the judged gather and all_to_all rows use ``same_shape=True``, the
   plain rows (reported, not judged) pay for the exchange, and the ``shape exchange`` rows
   time that alone, so the gap can be read off. torch's own ops need the shapes known.
   all_to_all of a list returns a list: it is judged against ``all_to_all_single`` whose
   output is cut into views (the fastest hand-written list-in, list-out code); all_to_all
   of one tensor against the bare ``all_to_all_single``.
2. Emulated ops: the base class's default emulations (what a backend without the op gets),
   forced on gloo, against the fastest hand-written emulation that does not use the native
   op (point-to-point sends and receives).

See bench/README.md for what each row measures.

Usage (from the repository root)::

    python bench/bench_collectives.py [--quick] [--json PATH] [--nproc 2 4] [--strict]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import distbridge as idist
from distbridge import _state
from distbridge.algorithms import shape_rows
from distbridge.models import ComputationModel, NativeModel

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import MIB, _duration, _size, _time_pair

TARGET_NATIVE = 1.05  # distbridge / the same native op
DST = SRC = 0

# The raw single-tensor all-gather and reduce-scatter: the same choice distbridge's native
# model makes (torch 2.13's names where they exist, the deprecated ones before).
_gather_into: Callable[..., Any] = (
    getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
)
_reduce_scatter_into: Callable[..., Any] = (
    getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
)


@dataclass(frozen=True)
class Plan:
    """Which sizes, and how many calls each kind of row makes: the whole bench, or ``--quick``."""

    sizes: tuple[int, ...]  # bytes of each rank's tensor; every size after the first is "big"
    small_iters: int  # calls per side in each timed block, 1 MiB rows
    small_repeats: int  # timed blocks (each after a barrier), 1 MiB rows
    big_iters: int  # the same for the big size
    big_repeats: int
    tiny_iters: int  # the same for the shape-exchange rows (a few hundred bytes)
    tiny_repeats: int
    warmup: int  # untimed calls per side before the first block (1 MiB and tiny rows)
    big_warmup: int  # untimed calls per side at the big size


FULL = Plan(
    sizes=(1 * MIB, 64 * MIB),
    small_iters=20,
    small_repeats=15,
    big_iters=1,
    big_repeats=10,
    tiny_iters=30,
    tiny_repeats=4,
    warmup=2,
    big_warmup=0,  # every 64 MiB call maps fresh memory anyway; the 1 MiB rows warmed the code
)
QUICK = Plan(
    sizes=(1 * MIB, 16 * MIB),  # 64 MiB calls take seconds each on a busy 2-core machine
    small_iters=2,
    small_repeats=2,
    big_iters=1,
    big_repeats=2,
    tiny_iters=10,
    tiny_repeats=2,
    warmup=1,
    big_warmup=0,
)


@dataclass(frozen=True)
class Row:
    """One measurement: seconds per call (rank 0's medians) for distbridge and the baseline."""

    nproc: int
    name: str
    size: int | None  # bytes of each rank's tensor (see README); None where it does not apply
    distbridge_s: float
    raw_s: float
    target: float | None  # the highest acceptable ratio; None: reported, not judged
    spread: tuple[float, float] | None = None  # lowest and highest ratio over --runs runs

    @property
    def ratio(self) -> float:
        return self.distbridge_s / self.raw_s

    @property
    def passed(self) -> bool:
        return self.target is None or self.ratio <= self.target

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "passed": self.passed}


class EmulatingNativeModel(NativeModel):
    """The native model with gather, scatter, reduce_scatter and all_to_all switched off: the
    base class's default emulations do the work (as tests/distributed/checks.py does)."""

    _do_gather = ComputationModel._do_gather
    _do_scatter = ComputationModel._do_scatter
    _do_reduce_scatter = ComputationModel._do_reduce_scatter
    _do_all_to_all = ComputationModel._do_all_to_all
    _do_all_to_all_even = ComputationModel._do_all_to_all_even


# ---- hand-written code: native ops ------------------------------------------------------------


def raw_reduce(x: torch.Tensor, me: int) -> torch.Tensor:
    """Like idist.reduce: in place on dst; other ranks reduce a clone, x stays unchanged."""
    dist.reduce(x if me == DST else x.clone(), dst=DST)
    return x


def raw_gather(x: torch.Tensor, me: int, world: int) -> list[torch.Tensor] | None:
    parts = [torch.empty_like(x) for _ in range(world)] if me == DST else None
    dist.gather(x, gather_list=parts, dst=DST)
    return parts


def raw_scatter(chunks: list[torch.Tensor] | None, numel: int) -> torch.Tensor:
    out = torch.empty(numel, dtype=torch.float32)
    dist.scatter(out, scatter_list=chunks, src=SRC)
    return out


def raw_reduce_scatter(x: torch.Tensor, world: int) -> torch.Tensor:
    out = x.new_empty(x.shape[0] // world)
    _reduce_scatter_into(out, x)
    return out


def raw_all_to_all(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    return out


def raw_all_to_all_chunks(x: torch.Tensor, world: int) -> list[torch.Tensor]:
    """The fastest hand-written list-in, list-out all_to_all when the chunks tile ``x``:
    ``all_to_all_single`` on ``x`` itself, its output cut into views."""
    return list(raw_all_to_all(x).chunk(world))


def raw_all_to_all_lists(parts: list[torch.Tensor]) -> list[torch.Tensor]:
    """torch's list form, which takes and returns a list as idist.all_to_all does."""
    outs = [torch.empty_like(p) for p in parts]
    dist.all_to_all(outs, parts)
    return outs


# ---- hand-written emulations without the native op: point to point ---------------------------


def p2p_gather(x: torch.Tensor, me: int, world: int) -> list[torch.Tensor] | None:
    """Every rank sends to dst, which receives into a new tensor per rank."""
    if me != DST:
        dist.send(x, dst=DST)
        return None
    parts = [torch.empty_like(x) for _ in range(world)]
    works = [dist.irecv(parts[j], src=j) for j in range(world) if j != me]
    parts[me].copy_(x)  # a new tensor, as idist.gather returns
    for work in works:
        work.wait()
    return parts


def p2p_scatter(chunks: list[torch.Tensor] | None, me: int, world: int, numel: int) -> torch.Tensor:
    """src sends chunk j to rank j and keeps a copy of its own."""
    if me != SRC:
        out = torch.empty(numel, dtype=torch.float32)
        dist.recv(out, src=SRC)
        return out
    assert chunks is not None
    works = [dist.isend(chunks[j], dst=j) for j in range(world) if j != me]
    out = chunks[me].clone()
    for work in works:
        work.wait()
    return out


def p2p_reduce_scatter(x: torch.Tensor, me: int, world: int) -> torch.Tensor:
    """Send chunk j to rank j, receive every rank's chunk ``me`` and sum them."""
    chunks = x.chunk(world)
    received = {j: torch.empty_like(chunks[me]) for j in range(world) if j != me}
    ops = []
    for j, buf in received.items():
        ops.append(dist.P2POp(dist.isend, chunks[j], j))
        ops.append(dist.P2POp(dist.irecv, buf, j))
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    bufs = list(received.values())
    out = torch.add(chunks[me], bufs[0])
    for buf in bufs[1:]:
        out += buf
    return out


def p2p_all_to_all(chunks: list[torch.Tensor], me: int, world: int) -> list[torch.Tensor]:
    """Uneven 1-d chunks: all-gather the split table, then one send and receive per peer."""
    counts = torch.tensor([c.numel() for c in chunks], dtype=torch.int64)
    table = torch.empty(world * world, dtype=torch.int64)
    _gather_into(table, counts)
    out_splits = table.view(world, world)[:, me].tolist()
    out = torch.empty(sum(out_splits), dtype=chunks[0].dtype)
    pieces = list(out.split(out_splits))
    ops = []
    for j in range(world):
        if j == me:
            continue
        if chunks[j].numel():
            ops.append(dist.P2POp(dist.isend, chunks[j], j))
        if out_splits[j]:
            ops.append(dist.P2POp(dist.irecv, pieces[j], j))
    works = dist.batch_isend_irecv(ops) if ops else []
    pieces[me].copy_(chunks[me])
    for work in works:
        work.wait()
    return pieces


# ---- hand-written: distbridge's own emulation algorithms (--same-algorithm) -------------------


def alg_gather(x: torch.Tensor, me: int, world: int) -> list[torch.Tensor] | None:
    out = torch.empty((world, *x.shape), dtype=x.dtype)
    _gather_into(out, x.unsqueeze(0))
    return list(out.unbind(0)) if me == DST else None


def alg_scatter(chunks: list[torch.Tensor] | None, me: int, world: int, numel: int) -> torch.Tensor:
    stacked = torch.stack(chunks) if chunks is not None else torch.empty(world, numel)
    dist.broadcast(stacked, src=SRC)
    return stacked[me].clone()


def alg_reduce_scatter(x: torch.Tensor, me: int, world: int) -> torch.Tensor:
    full = x.clone()
    dist.all_reduce(full)
    return full.chunk(world)[me].clone()


def alg_all_to_all(chunks: list[torch.Tensor], me: int, world: int) -> list[torch.Tensor]:
    counts = torch.tensor([c.numel() for c in chunks], dtype=torch.int64)
    table = torch.empty(world * world, dtype=torch.int64)
    _gather_into(table, counts)
    splits = table.view(world, world)
    totals = splits.sum(1)
    longest = int(totals.max())
    padded = torch.zeros(longest, dtype=chunks[0].dtype)
    torch.cat(chunks, out=padded[: int(totals[me])])
    everything = torch.empty(world * longest, dtype=padded.dtype)
    _gather_into(everything, padded)
    rows = everything.view(world, longest)
    pieces = []
    for sender in range(world):
        start = int(splits[sender, :me].sum())
        pieces.append(rows[sender, start : start + int(splits[sender, me])])
    return list(torch.cat(pieces).split([p.numel() for p in pieces]))


# ---- rows -------------------------------------------------------------------------------------


def uneven_chunks(numel: int, me: int, world: int) -> list[torch.Tensor]:
    """Rank ``me``'s chunks for an uneven all_to_all: ``numel`` elements in all, rank j gets
    a share proportional to 1 + (me + j) % world (so ranks receive different amounts)."""
    weights = [1 + (me + j) % world for j in range(world)]
    counts = [numel * w // sum(weights) for w in weights]
    counts[-1] += numel - sum(counts)
    return [torch.zeros(c, dtype=torch.float32) for c in counts]


def _same(what: str, got: object, want: object) -> None:
    """RuntimeError unless two results (tensors, lists of tensors or None) are equal."""
    if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor):
        ok = got.shape == want.shape and torch.equal(got, want)
    elif isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        ok = len(got) == len(want) and all(
            g.shape == w.shape and torch.equal(g, w) for g, w in zip(got, want, strict=True)
        )
    else:
        ok = (got is None or got == []) and (want is None or want == [])
    if not ok:
        raise RuntimeError(f"{what}: distbridge returned {got!r}, the raw code {want!r}.")


def check_results(me: int, world: int, emulated: bool) -> None:
    """Before timing: each facade call and its baseline return the same values (small,
    distinct integer-valued data, so sums are exact in any order)."""
    numel = 6 * world
    x = torch.arange(numel, dtype=torch.float32) + 100 * me
    chunks = [torch.arange(numel, dtype=torch.float32) + 10 * j for j in range(world)]
    mine = chunks if me == SRC else None
    uneven = [c + me for c in uneven_chunks(numel + 5, me, world)]
    uneven = [c + torch.arange(c.numel()) for c in uneven]
    if emulated:
        _same("gather", idist.gather(x, dst=DST), p2p_gather(x, me, world))
        _same("scatter", idist.scatter(mine, src=SRC), p2p_scatter(mine, me, world, numel))
        _same("reduce_scatter", idist.reduce_scatter(x), p2p_reduce_scatter(x, me, world))
        _same("all_to_all", idist.all_to_all(uneven), p2p_all_to_all(uneven, me, world))
        _same("gather (alg)", alg_gather(x, me, world), p2p_gather(x, me, world))
        _same("scatter (alg)", alg_scatter(mine, me, world, numel), raw_scatter(mine, numel))
        _same(
            "reduce_scatter (alg)", alg_reduce_scatter(x, me, world), raw_reduce_scatter(x, world)
        )
        _same("all_to_all (alg)", alg_all_to_all(uneven, me, world), idist.all_to_all(uneven))
        return
    _same("reduce", idist.reduce(x.clone(), dst=DST), raw_reduce(x.clone(), me))
    _same("gather", idist.gather(x, dst=DST), raw_gather(x, me, world))
    _same("scatter", idist.scatter(mine, src=SRC), raw_scatter(mine, numel))
    _same("reduce_scatter", idist.reduce_scatter(x), raw_reduce_scatter(x, world))
    _same("all_to_all", torch.cat(idist.all_to_all(list(x.chunk(world)))), raw_all_to_all(x))
    _same("gather same_shape", idist.gather(x, dst=DST, same_shape=True), raw_gather(x, me, world))
    into = idist.scatter(mine, src=SRC, out=torch.empty(numel))
    _same("scatter out=", into, raw_scatter(mine, numel))
    same = idist.all_to_all(list(x.chunk(world)), same_shape=True)
    _same("all_to_all same_shape", torch.cat(same), raw_all_to_all(x))
    _same("all_to_all one tensor", idist.all_to_all(x), raw_all_to_all(x))


Case = tuple[str, Callable[[], object], Callable[[], object], float | None]


def _time_cases(
    cases: Sequence[Case], world: int, size: int | None, iters: int, repeats: int, warmup: int
) -> list[Row]:
    rows = []
    for name, facade, raw, target in cases:
        facade_s, raw_s = _time_pair(facade, raw, iters, repeats, warmup)
        rows.append(Row(world, name, size, facade_s, raw_s, target))
    return rows


def native_cases(size: int, me: int, world: int, small: bool) -> list[Case]:
    """Part 1: each facade call against the native op it uses. Zeros keep repeated
    sums at zero (no overflow, no denormals).

    The ``+`` rows give the raw side distbridge's extra work too (the shape collective, and
    all_to_all's copy of its chunks into one buffer): a ratio near 1 there says the plain
    row's gap is that work and nothing else. gather and scatter get them at the small size
    only (at the big one the shape collective is lost in the noise). The noise row times
    the raw reduce against itself: how far from 1.0 a ratio strays on this machine now."""
    numel = size // 4
    x = torch.zeros(numel, dtype=torch.float32)
    chunks = [torch.zeros(numel, dtype=torch.float32) for _ in range(world)] if me == SRC else None
    parts = list(x.chunk(world))
    row = shape_rows.row(x)
    rows = [row] * world

    def shape_all_gather(n_rows: int) -> torch.Tensor:
        out = torch.empty(world * n_rows * len(row), dtype=torch.int64)
        _gather_into(out, torch.tensor([row] * n_rows, dtype=torch.int64).reshape(-1))
        return out

    def shape_broadcast() -> torch.Tensor:
        table = torch.tensor(rows, dtype=torch.int64)
        dist.broadcast(table, src=SRC)
        return table

    def shaped_gather() -> object:
        shape_all_gather(1)
        return raw_gather(x, me, world)

    def shaped_scatter() -> object:
        shape_broadcast()
        return raw_scatter(chunks, numel)

    def shaped_all_to_all() -> object:
        shape_all_gather(world)
        return raw_all_to_all(torch.cat(parts))

    cases: list[Case] = [
        ("reduce", lambda: idist.reduce(x, dst=DST), lambda: raw_reduce(x, me), TARGET_NATIVE),
        (
            "gather same_shape",
            lambda: idist.gather(x, dst=DST, same_shape=True),
            lambda: raw_gather(x, me, world),
            TARGET_NATIVE,
        ),
        ("gather", lambda: idist.gather(x, dst=DST), lambda: raw_gather(x, me, world), None),
        (
            "scatter out=",
            lambda: idist.scatter(chunks, src=SRC, out=torch.empty(numel)),
            lambda: raw_scatter(chunks, numel),
            TARGET_NATIVE,
        ),
        (
            "scatter",
            lambda: idist.scatter(chunks, src=SRC),
            lambda: raw_scatter(chunks, numel),
            None,
        ),
        (
            "reduce_scatter",
            lambda: idist.reduce_scatter(x),
            lambda: raw_reduce_scatter(x, world),
            TARGET_NATIVE,
        ),
        (
            "all_to_all same_shape",
            lambda: idist.all_to_all(parts, same_shape=True),
            lambda: raw_all_to_all_chunks(x, world),
            TARGET_NATIVE,
        ),
        (
            "all_to_all one tensor",
            lambda: idist.all_to_all(x),
            lambda: raw_all_to_all(x),
            TARGET_NATIVE,
        ),
        ("all_to_all", lambda: idist.all_to_all(parts), lambda: raw_all_to_all(x), None),
    ]
    if small:
        cases += [
            (
                "noise: dist.reduce / itself",
                lambda: raw_reduce(x, me),
                lambda: raw_reduce(x, me),
                None,
            ),
            ("gather / +shape all_gather", lambda: idist.gather(x, dst=DST), shaped_gather, None),
            (
                "scatter / +shape broadcast",
                lambda: idist.scatter(chunks, src=SRC),
                shaped_scatter,
                None,
            ),
        ]
    cases.append(
        ("all_to_all / +shapes +cat", lambda: idist.all_to_all(parts), shaped_all_to_all, None)
    )
    cases.append(
        (
            "all_to_all same_shape / bare single",
            lambda: idist.all_to_all(parts, same_shape=True),
            lambda: raw_all_to_all(x),
            None,
        )
    )
    cases.append(
        (
            "all_to_all same_shape / list form",
            lambda: idist.all_to_all(parts, same_shape=True),
            lambda: raw_all_to_all_lists(parts),
            None,
        )
    )
    return cases


def emulated_cases(size: int, me: int, world: int, same_algorithm: bool) -> list[Case]:
    """Part 2: the base-class emulations against point-to-point code (and, with
    ``same_algorithm``, against their own algorithm written by hand)."""
    numel = size // 4
    x = torch.zeros(numel, dtype=torch.float32)
    chunks = [torch.zeros(numel, dtype=torch.float32) for _ in range(world)] if me == SRC else None
    uneven = uneven_chunks(numel, me, world)
    cases: list[Case] = [
        (
            "emu gather / p2p",
            lambda: idist.gather(x, dst=DST),
            lambda: p2p_gather(x, me, world),
            None,
        ),
        (
            "emu scatter / p2p",
            lambda: idist.scatter(chunks, src=SRC),
            lambda: p2p_scatter(chunks, me, world, numel),
            None,
        ),
        (
            "emu reduce_scatter / p2p",
            lambda: idist.reduce_scatter(x),
            lambda: p2p_reduce_scatter(x, me, world),
            None,
        ),
        (
            "emu all_to_all uneven / p2p",
            lambda: idist.all_to_all(uneven),
            lambda: p2p_all_to_all(uneven, me, world),
            None,
        ),
    ]
    if same_algorithm:
        cases += [
            (
                "emu gather / same alg.",
                lambda: idist.gather(x, dst=DST),
                lambda: alg_gather(x, me, world),
                None,
            ),
            (
                "emu scatter / same alg.",
                lambda: idist.scatter(chunks, src=SRC),
                lambda: alg_scatter(chunks, me, world, numel),
                None,
            ),
            (
                "emu reduce_scatter / same alg.",
                lambda: idist.reduce_scatter(x),
                lambda: alg_reduce_scatter(x, me, world),
                None,
            ),
            (
                "emu all_to_all uneven / same alg.",
                lambda: idist.all_to_all(uneven),
                lambda: alg_all_to_all(uneven, me, world),
                None,
            ),
        ]
    return cases


def shape_cases(me: int, world: int) -> list[Case]:
    """What gather and all_to_all do before moving data (distbridge's own helpers: all-gather
    one 80-byte shape row per rank, decode the table) and what scatter does (broadcast the
    table of rows from src, decode it), each against the bare tiny collective."""
    model = _state.current()
    row = shape_rows.row(torch.zeros(4))
    table = [row] * world

    def facade_exchange() -> object:
        return shape_rows.decode(shape_rows.exchange(model, [row], None))

    def raw_exchange() -> object:
        out = torch.empty(world * len(row), dtype=torch.int64)
        _gather_into(out, torch.tensor(row, dtype=torch.int64))
        return out

    def facade_table() -> object:
        t = torch.tensor(table, dtype=torch.int64)
        return shape_rows.decode(model._do_broadcast(t, SRC, None).cpu().numpy())

    def raw_table() -> object:
        t = torch.tensor(table, dtype=torch.int64)
        dist.broadcast(t, src=SRC)
        return t

    return [
        ("shape exchange (all_gather)", facade_exchange, raw_exchange, None),
        ("shape table (broadcast)", facade_table, raw_table, None),
    ]


def worker(local_rank: int, plan: Plan, same_algorithm: bool) -> Any:
    """Run in each spawned process: time every row; rank 0 returns them."""
    torch.set_num_threads(1)  # several processes on a small machine: no oversubscription
    me, world = idist.get_rank(), idist.get_world_size()
    if idist.backend() != "gloo":
        raise RuntimeError(f"Expected gloo, got {idist.backend()!r}.")
    rows: list[Row] = []
    check_results(me, world, emulated=False)
    rows += _time_cases(
        shape_cases(me, world), world, None, plan.tiny_iters, plan.tiny_repeats, plan.warmup
    )
    native = _state.current()
    emulating = EmulatingNativeModel.from_context()
    if emulating is None:
        raise RuntimeError("No torch.distributed context to emulate on.")
    for size in plan.sizes:
        big = size != plan.sizes[0]
        iters = plan.big_iters if big else plan.small_iters
        repeats = plan.big_repeats if big else plan.small_repeats
        warmup = plan.big_warmup if big else plan.warmup
        rows += _time_cases(
            native_cases(size, me, world, not big), world, size, iters, repeats, warmup
        )
        gc.collect()
        _state.install(emulating)
        try:
            if _state.current() is not emulating:
                raise RuntimeError("The emulating model did not stay installed.")
            if size == plan.sizes[0]:
                check_results(me, world, emulated=True)
            rows += _time_cases(
                emulated_cases(size, me, world, same_algorithm), world, size, iters, repeats, warmup
            )
        finally:
            _state.install(native)
        gc.collect()
    dist.barrier()
    if me != 0:
        return None
    return [asdict(r) for r in rows]


# ---- report -----------------------------------------------------------------------------------


def combine(runs: Sequence[Sequence[Row]]) -> list[Row]:
    """One row per measurement over several runs: the median times, so the median ratio,
    and the lowest and highest ratio of any run."""
    combined = []
    for same in zip(*runs, strict=True):
        first = same[0]
        ratios = [row.ratio for row in same]
        combined.append(
            Row(
                first.nproc,
                first.name,
                first.size,
                statistics.median(row.distbridge_s for row in same),
                statistics.median(row.raw_s for row in same),
                first.target,
                (min(ratios), max(ratios)) if len(same) > 1 else None,
            )
        )
    return combined


def format_table(rows: Sequence[Row]) -> str:
    header = ("np", "name", "size", "distbridge", "raw", "ratio", "runs", "target", "result")
    lines = [
        (
            str(row.nproc),
            row.name,
            _size(row.size),
            _duration(row.distbridge_s),
            _duration(row.raw_s),
            f"{row.ratio:.3f}",
            "-" if row.spread is None else f"{row.spread[0]:.2f}-{row.spread[1]:.2f}",
            "-" if row.target is None else f"<= {row.target:g}",
            "info" if row.target is None else ("pass" if row.passed else "FAIL"),
        )
        for row in rows
    ]
    widths = [max(len(cells[i]) for cells in (header, *lines)) for i in range(len(header))]

    def fmt(cells: Sequence[str]) -> str:
        first = cells[0].rjust(widths[0])
        name = cells[1].ljust(widths[1])
        rest = (c.rjust(w) for c, w in zip(cells[2:], widths[2:], strict=True))
        return "  ".join([first, name, *rest])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), rule, *(fmt(cells) for cells in lines)])


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time distbridge's reduce, gather, scatter, reduce_scatter and all_to_all "
        "against raw torch.distributed code."
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer calls, 16 MiB instead of 64 MiB (under a minute)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows here")
    parser.add_argument(
        "--nproc", type=int, nargs="+", default=[2, 4], metavar="N", help="gloo world sizes"
    )
    parser.add_argument(
        "--same-algorithm",
        action="store_true",
        help="also time each emulation against its own algorithm written by hand",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        metavar="N",
        help="repeat the whole bench N times; report median times and the range of ratios",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a row misses")
    args = parser.parse_args(argv)
    if any(n < 2 for n in args.nproc):
        parser.error("--nproc takes world sizes of 2 or more")
    if args.runs < 1:
        parser.error("--runs takes 1 or more")
    plan = QUICK if args.quick else FULL

    load_before = _load()
    started = time.perf_counter()
    runs: list[list[Row]] = []
    for _ in range(args.runs):
        rows: list[Row] = []
        for nproc in args.nproc:
            results = idist.spawn(
                "gloo", worker, args=(plan, args.same_algorithm), nproc_per_node=nproc
            )
            rows += [Row(**fields) for fields in results[0]]
        runs.append(rows)
    rows = combine(runs)
    elapsed = time.perf_counter() - started
    load_after = _load()

    print(format_table(rows))
    print(
        f"\n{'quick' if args.quick else 'full'} run x{args.runs}, {elapsed:.0f} s; "
        f"torch {torch.__version__}, "
        f"python {platform.python_version()}, gloo, {os.cpu_count()} CPUs; "
        f"load average {load_before} before, {load_after} after"
    )
    if args.json is not None:
        report = {
            "quick": args.quick,
            "runs": args.runs,
            "plan": asdict(plan),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": load_after,
            "seconds": elapsed,
            "rows": [row.to_json() for row in rows],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if args.strict and not all(row.passed for row in rows) else 0


if __name__ == "__main__":
    # Workers are started with "spawn" and unpickle ``bench_collectives.worker``: run the
    # module under that name, not as ``__main__`` (the directory is on sys.path above).
    import bench_collectives

    raise SystemExit(bench_collectives.main())
