"""The facade's cost on one GPU: distbridge against raw torch.distributed in an NCCL world of
one on cuda:0 (``--cpu``: a gloo world of one on the CPU, to check the bench runs anywhere).

One process: ``dist.init_process_group`` with a FileStore, which distbridge adopts as it
finds it. Each row times the facade call and the raw torch.distributed call it replaces
(pytorch-ignite's too, where it is importable) in interleaved rounds: a round runs a block
of ``--calls`` calls of each side in turn (the order alternating from round to round) and
ends each block with ``torch.cuda.synchronize()``, so a side's time counts its kernels too.
Per side, the median over the ``--rounds`` rounds of the time per call; the ratio is the
facade's median over raw's. The noise row times raw against itself.

Usage (from the repository root; ``ci/gpu_suite.sh`` runs it)::

    PYTHONPATH=src python bench/bench_gpu.py [--cpu] [--rounds 15] [--calls 1000]
        [--markdown PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import distbridge as idist

Call = Callable[[], object]
MIB = 1 << 20


@dataclass(frozen=True)
class Row:
    """One row: seconds per call of each side (median over rounds; None: not timed)."""

    name: str
    size: int | None  # bytes of the tensor; None where it does not apply
    distbridge_s: float
    raw_s: float
    ignite_s: float | None

    @property
    def ratio(self) -> float:
        return self.distbridge_s / self.raw_s

    @property
    def ignite_ratio(self) -> float | None:
        return None if self.ignite_s is None else self.ignite_s / self.raw_s


def nccl_version() -> str:
    """NCCL's version as torch reports it ("2.27.3"), "-" without CUDA or NCCL."""
    if not (torch.cuda.is_available() and dist.is_nccl_available()):
        return "-"
    found = torch.cuda.nccl.version()  # a tuple; an int on old torch
    return ".".join(map(str, found)) if isinstance(found, tuple) else str(found)


def environment(device: torch.device) -> dict[str, str]:
    """What ran the bench: Python, torch, CUDA, NCCL, the device."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda or "-"),
        "nccl": nccl_version(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }


def _sync(device: torch.device) -> Call:
    """What ends each block: ``torch.cuda.synchronize`` on a GPU, nothing on the CPU."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def time_sides(
    sides: dict[str, Call], rounds: int, calls: int, sync: Call, warmup: int = 20
) -> dict[str, float]:
    """Median seconds per call of each side over ``rounds`` rounds; a round runs a block of
    ``calls`` calls of every side in turn (the order reversed every other round), each
    block ended by ``sync``."""
    names = list(sides)
    for name in names:  # warm: the first call of a kind builds communicators and caches
        for _ in range(warmup):
            sides[name]()
    sync()
    per_call: dict[str, list[float]] = {name: [] for name in names}
    clock = time.perf_counter
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            fn = sides[name]
            start = clock()
            for _ in range(calls):
                fn()
            sync()
            per_call[name].append((clock() - start) / calls)
    return {name: statistics.median(times) for name, times in per_call.items()}


def _ignite() -> Any:
    """``ignite.distributed`` where pytorch-ignite is importable and adopts this process
    group, else None (the column shows "-")."""
    try:
        import ignite.distributed as ignite_dist
    except ImportError:
        return None
    try:
        with warnings.catch_warnings():  # its guess of the local rank from the host names
            warnings.simplefilter("ignore")
            ignite_dist.sync()  # adopt the process group made by hand, as distbridge does
            ignite_dist.all_reduce(torch.zeros(1, device=idist.device()))
    except Exception as err:  # an ignite that cannot run here: say so, bench the rest
        print(f"pytorch-ignite is importable but does not run here: {err!r}", file=sys.stderr)
        return None
    return ignite_dist


def rows_of(
    device: torch.device, backend: str, ignite: Any
) -> list[tuple[str, int | None, Call, Call, Call | None]]:
    """(name, size, facade, raw, ignite or None) of every row."""
    one = torch.zeros(1, dtype=torch.float32, device=device)
    big = torch.zeros(MIB // 4, dtype=torch.float32, device=device)
    ids = [device.index or 0] if backend == "nccl" else None  # what the facade passes NCCL
    max_op, min_op = dist.ReduceOp.MAX, dist.ReduceOp.MIN

    def ig(fn: Callable[[Any], object]) -> Call | None:
        return None if ignite is None else (lambda: fn(ignite))

    return [
        ("all_reduce SUM float32", 4, lambda: idist.all_reduce(one), lambda: dist.all_reduce(one),
         ig(lambda i: i.all_reduce(one))),
        ("all_reduce SUM float32", MIB, lambda: idist.all_reduce(big), lambda: dist.all_reduce(big),
         ig(lambda i: i.all_reduce(big))),
        ("broadcast float32", 4, lambda: idist.broadcast(one, src=0),
         lambda: dist.broadcast(one, src=0), ig(lambda i: i.broadcast(one, src=0))),
        ("all_reduce MAX float32", 4, lambda: idist.all_reduce(one, op="MAX"),
         lambda: dist.all_reduce(one, op=max_op), ig(lambda i: i.all_reduce(one, op="MAX"))),
        ("all_reduce MIN float32", 4, lambda: idist.all_reduce(one, op="MIN"),
         lambda: dist.all_reduce(one, op=min_op), ig(lambda i: i.all_reduce(one, op="MIN"))),
        ("barrier", None, idist.barrier, lambda: dist.barrier(device_ids=ids),
         ig(lambda i: i.barrier())),
        ("noise: raw all_reduce 4 B / itself", 4, lambda: dist.all_reduce(one),
         lambda: dist.all_reduce(one), None),
    ]  # fmt: skip


def _check_answers(device: torch.device) -> None:
    """The facade's answers are raw's before anything is timed."""
    x = torch.arange(4, dtype=torch.float32, device=device)
    for op in ("SUM", "MAX", "MIN"):
        ours, raw = idist.all_reduce(x.clone(), op=op), x.clone()
        dist.all_reduce(raw, op=getattr(dist.ReduceOp, op))
        if not torch.equal(ours, raw):
            raise AssertionError(f"all_reduce {op}: distbridge gave {ours}, torch {raw}")


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size // MIB} MiB" if size >= MIB else f"{size} B"


def _micro(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.2f}"


def markdown(
    rows: Sequence[Row], env: dict[str, str], rounds: int, calls: int, backend: str
) -> str:
    """The rows as a markdown table, under a line that says what ran them."""
    head = (
        f"{env['date']}: {env['device']}, torch {env['torch']}, CUDA {env['cuda']}, "
        f"NCCL {env['nccl']}, Python {env['python']}; {backend} world of one, median of "
        f"{rounds} interleaved rounds of {calls} calls a side\n\n"
        "| row | size | distbridge µs | raw µs | ratio | ignite µs | ignite ratio |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for row in rows:
        size = _size(row.size)
        ignite = "-" if row.ignite_ratio is None else f"{row.ignite_ratio:.2f}"
        lines.append(
            f"| {row.name} | {size} | {_micro(row.distbridge_s)} | {_micro(row.raw_s)} | "
            f"{row.ratio:.2f} | {_micro(row.ignite_s)} | {ignite} |"
        )  # fmt: skip
    return head + "\n".join(lines) + "\n"


def run(cpu: bool, rounds: int, calls: int) -> tuple[list[Row], dict[str, str], str]:
    """Every row in a world of one of NCCL on cuda:0 (``cpu``: gloo on the CPU)."""
    if not cpu and not (torch.cuda.is_available() and dist.is_nccl_available()):
        raise SystemExit("bench_gpu: no CUDA GPU or no NCCL here; --cpu runs the gloo variant")
    backend = "gloo" if cpu else "nccl"
    device = torch.device("cpu") if cpu else torch.device("cuda", 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as folder:
        store = dist.FileStore(str(Path(folder) / "store"), 1)  # type: ignore[attr-defined]
        options: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, rank=0, world_size=1, store=store, **options)
        try:
            if idist.backend() != backend or idist.device() != device:
                raise AssertionError(
                    f"distbridge adopted {idist.backend()!r} on {idist.device()}, "
                    f"not {backend!r} on {device}"
                )
            _check_answers(device)
            ignite = _ignite()
            sync = _sync(device)
            rows = []
            for name, size, facade, raw, ignite_call in rows_of(device, backend, ignite):
                sides = {"distbridge": facade, "raw": raw}
                if ignite_call is not None:
                    sides["ignite"] = ignite_call
                times = time_sides(sides, rounds, calls, sync)
                rows.append(Row(name, size, times["distbridge"], times["raw"], times.get("ignite")))
                print(
                    f"  {name} {_size(size)}: ratio {rows[-1].ratio:.2f}",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            dist.destroy_process_group()
    return rows, environment(device), backend


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="gloo on the CPU (fewer calls)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=None, help="calls a side per round")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    calls = args.calls or (200 if args.cpu else 1000)
    rows, env, backend = run(args.cpu, args.rounds, calls)
    table = markdown(rows, env, args.rounds, calls, backend)
    print(table)
    if args.markdown:
        args.markdown.write_text(table)
    if args.json:
        found = [{**asdict(r), "ratio": r.ratio, "ignite_ratio": r.ignite_ratio} for r in rows]
        out = {"environment": env, "backend": backend, "rounds": args.rounds, "calls": calls}
        args.json.write_text(json.dumps({**out, "rows": found}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
