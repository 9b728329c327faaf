"""``python -m distbridge check``: a short timed all-reduce across a world, per message size.

Under a launcher (torchrun, srun, mpirun, ...) every rank runs it and rank 0 prints; with
``--nproc N`` it spawns N local workers; otherwise it runs alone, a world of one. Each size
is all-reduced once and verified (a wrong sum is a failure), then timed over ``iters``
rounds; the latency is the slowest rank's mean, and the bandwidths follow nccl-tests:
algbw = bytes / latency, busbw = algbw * 2 (n - 1) / n.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

import distbridge as idist
from distbridge import environments
from distbridge._registry import registry
from distbridge.errors import BackendUnavailableError, DistributedError, WorkerFailedError

__all__ = ["CheckOptions", "format_bytes", "format_check", "main", "measure", "parse_sizes", "run"]

SCHEMA_VERSION = 1
DEFAULT_SIZES = "4,64,1K,16K,256K,4M,64M"
USAGE_ERROR = 2  # the exit code of a bad argument (as argparse's); a failed check exits 1
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"(\d+)\s*([KMG]?)(?:I?B)?", re.IGNORECASE)


@dataclass(frozen=True)
class CheckOptions:
    """What to check: ``backend`` over ``sizes`` (bytes), ``iters`` timed rounds per size,
    on ``nproc`` spawned workers (None: the detected world), within ``timeout`` seconds."""

    backend: str
    sizes: tuple[int, ...]
    iters: int = 10
    nproc: int | None = None
    timeout: float = 300.0


def main(options: CheckOptions, as_json: bool) -> int:
    """Run the check and print its report (under a launcher, rank 0 prints); the exit code."""
    report, code = run(options)
    if code == USAGE_ERROR and not as_json:
        print(f"distbridge check: error: {report['error']['message']}", file=sys.stderr)
    elif idist.get_rank() == 0:  # the launcher's rank (finalized or never initialized here)
        print(json.dumps(report, indent=2) if as_json else format_check(report), flush=True)
    return code


def measure(sizes: tuple[int, ...], iters: int) -> list[dict[str, Any]]:
    """Verify and time an all-reduce of each size in the active context (every rank calls
    this). Without a distributed context it times a world of one."""
    world, rank, device = idist.get_world_size(), idist.get_rank(), idist.device()
    expected = world * (world + 1) / 2  # the sum of rank + 1 over the world
    rows = []
    for size in sizes:
        data = torch.full((size // 4,), float(rank + 1), dtype=torch.float32, device=device)
        total = idist.all_reduce(data)
        if not bool(torch.all(total == expected)):
            raise RuntimeError(
                f"all_reduce of {size} bytes gave wrong values on rank {rank}: expected "
                f"{expected} everywhere, got {total.flatten()[:4].tolist()}..."
            )
        data = torch.zeros_like(data)  # sums of zeros stay finite for any number of rounds
        idist.barrier()
        _synchronize(device)
        start = time.perf_counter()
        for _ in range(iters):
            data = idist.all_reduce(data)
        _synchronize(device)
        latency = idist.all_reduce(time.perf_counter() - start, op="MAX") / iters
        algbw = size / latency
        rows.append(
            {
                "bytes": size,
                "latency_s": latency,
                "algbw_bytes_per_s": algbw,
                "busbw_bytes_per_s": algbw * 2 * (world - 1) / world,
            }
        )
    return rows


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _spawned(local_rank: int, sizes: tuple[int, ...], iters: int) -> list[dict[str, Any]]:
    """What each worker of ``--nproc`` runs (top level, so spawned workers can import it)."""
    return measure(sizes, iters)


def run(options: CheckOptions) -> tuple[dict[str, Any], int]:
    """Run the check; return its report (the ``--json`` output) and the exit code.

    Exit codes: 0 passed, 1 the check failed (the report names the rank), 2 a bad argument
    or an unavailable backend.
    """
    report: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "ok": False,
        "backend": options.backend,
        "world_size": options.nproc or 1,
        "launcher": None,
        "iters": options.iters,
        "results": [],
        "error": None,
    }
    try:
        model = registry.for_backend(options.backend)
        launch = environments.detect()
    except (BackendUnavailableError, ValueError) as err:
        report["error"] = _error(None, err)
        return report, USAGE_ERROR
    if options.nproc is not None and launch is not None:
        message = (
            f"--nproc {options.nproc} spawns its own world, but this process is already rank "
            f"{launch.rank} of {launch.world_size} under {launch.launcher}. Drop --nproc to "
            "check the launcher's world, or run outside the launcher."
        )
        report["error"] = {"rank": None, "message": message, "traceback": ""}
        return report, USAGE_ERROR
    if options.nproc is not None:
        return _run_spawned(options, model.spawn_options, report)
    if launch is not None:  # else the report's defaults hold: no launcher, a world of one
        report.update(launcher=launch.launcher, world_size=launch.world_size)
    init_kwargs = {"timeout": options.timeout} if "timeout" in model.spawn_options else {}
    return _run_here(options, 0 if launch is None else launch.rank, init_kwargs, report)


def _run_spawned(
    options: CheckOptions, spawn_options: tuple[str, ...], report: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    """Spawn ``options.nproc`` local workers that measure; rank 0's rows are the report's."""
    report["launcher"] = "spawn"
    # job_timeout bounds the whole job; timeout (native models) the process group's waits.
    bounds: dict[str, Any] = {
        k: options.timeout for k in ("job_timeout", "timeout") if k in spawn_options
    }
    try:
        results = idist.spawn(
            options.backend,
            _spawned,
            args=(options.sizes, options.iters),
            nproc_per_node=options.nproc or 1,
            **bounds,
        )
    except WorkerFailedError as err:
        summary = str(err).split("\n\n", 1)[0]  # the rest repeats the traceback
        report["error"] = {"rank": err.rank, "message": summary, "traceback": err.worker_traceback}
        return report, 1
    except DistributedError as err:  # a timeout, or the job could not start
        report["error"] = _error(None, err)
        return report, 1
    report.update(ok=True, results=results[0])
    return report, 0


def _run_here(
    options: CheckOptions, rank: int, init_kwargs: dict[str, Any], report: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    """Initialize in this process (a rank of the launcher's world), measure, finalize."""
    watchdog = threading.Timer(options.timeout, _expire, args=(rank, options.timeout))
    watchdog.daemon = True
    watchdog.start()
    try:
        idist.initialize(options.backend, **init_kwargs)
        try:
            report.update(ok=True, results=measure(options.sizes, options.iters))
        finally:
            idist.finalize()
    except Exception as err:  # reported with this rank; the launcher stops the others
        report.update(ok=False, error=_error(rank, err, traceback.format_exc()))
        if rank != 0:
            print(f"distbridge check: rank {rank} failed: {err}", file=sys.stderr)
        return report, 1
    finally:
        watchdog.cancel()
    return report, 0


def _expire(rank: int, seconds: float) -> None:
    """The ``--timeout`` watchdog of a rank under a launcher: say so, and exit."""
    print(
        f"distbridge check: rank {rank} did not finish within --timeout {seconds:g} s; exiting.",
        file=sys.stderr,
        flush=True,
    )
    os._exit(1)


def _error(rank: int | None, err: BaseException, trace: str = "") -> dict[str, Any]:
    return {"rank": rank, "message": f"{type(err).__name__}: {err}", "traceback": trace}


def parse_size(text: str) -> int:
    """``"4"``, ``"1K"``, ``"64MiB"`` or ``"1G"`` as a number of bytes (binary multiples)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"Message size {text!r} is not a size; write bytes as 4, 1K, 64M or 64MiB."
        )
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"4,1K,64M"`` as byte counts; each must be a positive multiple of 4 (float32)."""
    sizes = tuple(parse_size(part) for part in text.split(",") if part.strip())
    bad = [size for size in sizes if size < 4 or size % 4]
    if not sizes or bad:
        raise ValueError(
            f"--sizes {text!r}: sizes must be multiples of 4 bytes (float32 elements), at least "
            f"4; got {bad or 'none'}. Example: --sizes 4,1K,1M."
        )
    return sizes


def format_bytes(size: int) -> str:
    """``1048576`` as ``"1 MiB"``, ``4`` as ``"4 B"``."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} us"


def _rate(bytes_per_s: float) -> str:
    for unit, factor in (("GB/s", 1e9), ("MB/s", 1e6)):
        if bytes_per_s >= factor:
            return f"{bytes_per_s / factor:.2f} {unit}"
    return f"{bytes_per_s / 1e3:.2f} kB/s"


def format_check(report: Mapping[str, Any]) -> str:
    """The human-readable page of ``python -m distbridge check``."""
    launcher = report["launcher"]
    if launcher is None:
        where = "this process alone (--nproc N spawns N local workers)"
    else:
        where = "spawned here" if launcher == "spawn" else f"under {launcher}"
    rounds = "round" if report["iters"] == 1 else "rounds"
    lines = [
        f"all_reduce (SUM, float32) with {report['backend']} on a world of "
        f"{report['world_size']}, {where}; {report['iters']} timed {rounds} per size",
    ]
    if report["results"]:
        lines.append(f"{'size':>10} {'latency':>11} {'algbw':>12} {'busbw':>12}")
    for row in report["results"]:
        lines.append(
            f"{format_bytes(row['bytes']):>10} {_seconds(row['latency_s']):>11} "
            f"{_rate(row['algbw_bytes_per_s']):>12} {_rate(row['busbw_bytes_per_s']):>12}"
        )
    error = report["error"]
    if error is None:
        lines.append("OK")
    else:
        where = "" if error["rank"] is None else f" on rank {error['rank']}"
        lines.append(f"FAILED{where}: {error['message']}")
        if error.get("traceback"):
            lines += ["", error["traceback"].rstrip()]
    return "\n".join(lines)
