"""Text rendering for the command line: sizes, durations, rates, and the reports of
``info`` and ``check`` (their dicts are the ``--json`` output; this is the human view)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["format_bytes", "format_check", "format_info", "parse_size", "parse_sizes"]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_ABSENT = {"cuda": "none (a CPU build of torch)", "nccl": "none (this torch build has no NCCL)"}
_SIZE = re.compile(r"(\d+)\s*([KMG]?)(?:I?B)?", re.IGNORECASE)


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
            f"4; got {list(bad) or 'none'}. Example: --sizes 4,1K,1M."
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


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def format_info(report: Mapping[str, Any]) -> str:
    """The human-readable page of ``python -m distbridge info``."""
    versions, launch, plan = report["versions"], report["launcher"], report["initialize"]
    lines = [f"distbridge {versions['distbridge']} on {report['hostname']}", "", "Launcher"]
    if report["launcher_error"] is not None:
        lines.append(f"  unreadable: {report['launcher_error']}")
    elif launch is None:
        lines.append("  none detected (not under torchrun, srun, mpirun, horovodrun, ...)")
    else:
        lines += [
            f"  detected       {launch['name']}",
            f"  rank           {launch['rank']} of {launch['world_size']}",
            f"  local rank     {_or_dash(launch['local_rank'])} of "
            f"{_or_dash(launch['local_world_size'])}",
            f"  node rank      {_or_dash(launch['node_rank'])} of {_or_dash(launch['nnodes'])}",
            f"  master         {_or_dash(launch['master_addr'])}:{_or_dash(launch['master_port'])}",
        ]
    lines += [f"  warning: {message}" for message in report["launcher_warnings"]]
    lines += [
        "",
        "initialize() would",
        f"  backend        {plan['backend']} (default: nccl with a CUDA GPU, else gloo)",
        f"  rank           {plan['rank']} of {plan['world_size']}, "
        f"local rank {_or_dash(plan['local_rank'])}",
        f"  rendezvous     {plan['summary']}",
        "",
        "Backends",
    ]
    for row in report["backends"]["all"]:
        state = "available" if row["available"] else f"unavailable: {row['reason']}"
        lines.append(f"  {row['name']:<9} {row['model']:<13} {state}")
    lines += ["", "Versions"]
    for name, value in versions.items():
        if isinstance(value, bool):
            text = "yes" if value else "no"
        elif value is None:
            text = _ABSENT.get(name, "not installed")
        else:
            text = value
        lines.append(f"  {name:<14} {text}")
    devices = report["devices"]
    lines += [
        "",
        "Devices",
        f"  CUDA_VISIBLE_DEVICES  {_or_dash(devices['cuda_visible_devices'])}",
    ]
    if not devices["cuda"]:
        lines.append("  cuda           none (torch.cuda.is_available() is False)")
    for gpu in devices["cuda"]:
        lines.append(
            f"  cuda:{gpu['index']:<9} {gpu['name']}, {_gib(gpu['memory_bytes'])}, "
            f"compute capability {gpu['capability']}"
        )
    return "\n".join(lines + _system_lines(report["system"], report["environment"]))


def _gib(size: int | None) -> str:
    return "unknown" if size is None else f"{size / (1 << 30):.1f} GiB"


def _system_lines(system: Mapping[str, Any], environment: Mapping[str, Any]) -> list[str]:
    usable = system["usable_cpus"]
    cpus = f"{_or_dash(system['cpu_count'])}" + (
        "" if usable is None else f" ({usable} usable by this process)"
    )
    memory = _gib(system["memory_bytes"])
    if system["memory_available_bytes"] is not None:
        memory += f" ({_gib(system['memory_available_bytes'])} available)"
    lines = [
        "",
        "System",
        f"  os             {system['os']}",
        f"  cpus           {cpus}",
        f"  memory         {memory}",
        "",
        "Tuning variables (-: not set)",
    ]
    tuning, launcher = environment["tuning"], environment["launcher"]
    width = max(map(len, tuning)) + 2
    lines += [f"  {name:<{width}}{_or_dash(value)}" for name, value in tuning.items()]
    lines += ["", "Launcher variables"]
    if not launcher:
        lines.append("  none set (RANK, WORLD_SIZE, MASTER_ADDR, SLURM_*, OMPI_*, HOROVOD_*, ...)")
    lines += [f"  {name}={value}" for name, value in launcher.items()]
    return lines


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
