"""``python -m distbridge info``: the launcher environment, what ``initialize()`` would do,
the backends, versions and devices, gathered without creating any distributed context.

`collect` returns one JSON-ready dict, `format_info` its text; the dict's keys are the schema
documented in ``docs/cli.md`` (bump `SCHEMA_VERSION` when a key changes meaning or disappears;
adding keys is compatible).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import socket
import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

import distbridge
from distbridge import environments
from distbridge._registry import registry
from distbridge.environments import LaunchEnvironment
from distbridge.models import _accelerator
from distbridge.models.native.init import DEFAULT_MASTER, rendezvous

__all__ = ["SCHEMA_VERSION", "collect", "format_info", "main"]

SCHEMA_VERSION = 1

#: What docs/troubleshooting.md has users set; shown set or not. Other variables that tune
#: the backends (the prefixes) are shown when set.
TUNING_VARIABLES = (
    "DISTBRIDGE_DEBUG", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS",
    "NCCL_DEBUG", "NCCL_IB_DISABLE", "TORCH_DISTRIBUTED_DEBUG",
)  # fmt: skip
_TUNING_PREFIXES = ("DISTBRIDGE_", "NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "TP_")
#: The variables of the launchers that environments/ reads (and their families), shown when set.
_LAUNCHER_NAMES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
)  # fmt: skip
_LAUNCHER_PREFIXES = (
    "TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "MV2_", "HOROVOD_", "LSB_", "JSM_",
    "PJRT_", "XRT_", "TPU_",
)  # fmt: skip
_ABSENT = {"cuda": "none (a CPU build of torch)", "nccl": "none (this torch build has no NCCL)"}
_LAUNCH_FIELDS = (
    "rank", "world_size", "local_rank", "local_world_size", "node_rank", "nnodes",
    "master_addr", "master_port",
)  # fmt: skip


def main(as_json: bool) -> int:
    """Print the report of `collect` (JSON or text); the exit code (0)."""
    report = collect()
    print(json.dumps(report, indent=2) if as_json else format_info(report))
    return 0


def collect(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything ``info`` reports, as one JSON-ready dict.

    Args:
        env: the environment variables to read the launcher from (default: ``os.environ``).
            Backends, versions and devices always describe this machine.
    """
    env = os.environ if env is None else env
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            found, error = environments.detect(env), None
        except ValueError as err:  # malformed launcher variables: report, do not crash
            found, error = None, str(err)
    launch = None
    if found is not None:
        launch = {"name": found.launcher, **{key: getattr(found, key) for key in _LAUNCH_FIELDS}}
    return {
        "schema": SCHEMA_VERSION,
        "hostname": socket.gethostname(),
        "launcher": launch,
        "launcher_warnings": [str(w.message) for w in caught],
        "launcher_error": error,
        "initialize": _plan(found, error, env),
        "backends": _backends(),
        "versions": _versions(),
        "devices": _devices(env),
        "system": _system(),
        "environment": _environment(env),
    }


def _system() -> dict[str, Any]:
    """The OS, CPU count and memory of this machine, for bug reports: total memory from
    sysconf, available memory from /proc/meminfo (Linux); None where unknown."""
    system: dict[str, Any] = {"os": platform.platform(), "cpu_count": os.cpu_count()}
    system.update(usable_cpus=None, memory_bytes=None, memory_available_bytes=None)
    with contextlib.suppress(AttributeError, OSError):  # not on Linux
        system["usable_cpus"] = len(os.sched_getaffinity(0))
    with contextlib.suppress(AttributeError, OSError, ValueError):  # not POSIX
        system["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as file:
        for line in file:
            if line.startswith("MemAvailable:"):  # "MemAvailable:  123 kB"
                system["memory_available_bytes"] = int(line.split()[1]) * 1024
    return system


def _environment(env: Mapping[str, str]) -> dict[str, dict[str, str | None]]:
    """The tuning variables (each of `TUNING_VARIABLES`, None when unset, and any other of
    their families that is set) and the launchers' variables that are set."""
    tuning: dict[str, str | None] = {name: env.get(name) for name in TUNING_VARIABLES}
    tuning.update(
        (name, env[name])
        for name in sorted(env)
        if name.startswith(_TUNING_PREFIXES) and name not in tuning
    )
    launcher: dict[str, str | None] = {
        name: env[name]
        for name in sorted(env)
        if name in _LAUNCHER_NAMES or name.startswith(_LAUNCHER_PREFIXES)
    }
    return {"tuning": tuning, "launcher": launcher}


def _plan(
    launch: LaunchEnvironment | None, error: str | None, env: Mapping[str, str]
) -> dict[str, Any]:
    """What ``initialize()`` of the default backend (torch's for this process's accelerator)
    would do here, as ``models/native/init.py`` decides it."""
    plan: dict[str, Any] = {
        "backend": _accelerator.default_backend(),
        "rank": 0,
        "world_size": 1,
        "local_rank": 0,
        "master_addr": None,
        "master_port": None,
        "rendezvous": "in-memory",
        "rank0_hosts_store": False,
        "summary": "no launcher: a world of one on an in-memory store (no port is opened)",
    }
    if error is not None:
        plan.update(rendezvous="invalid", summary=f"none: initialize() would fail: {error}")
    if launch is None:
        return plan
    plan.update(rank=launch.rank, world_size=launch.world_size, local_rank=launch.local_rank)
    name, how = launch.launcher, rendezvous(launch, plan["backend"], env)
    addr, port = launch.master_addr, launch.master_port
    if how == "env":  # initialize fills in ignite's default where unset
        addr = addr or DEFAULT_MASTER["MASTER_ADDR"]
        port = port or int(DEFAULT_MASTER["MASTER_PORT"])
    where = f"{addr or '(MASTER_ADDR unknown)'}:{port or '(unknown)'}"
    summaries = {
        "in-memory": f"a world of one under {name}: an in-memory store (no port is opened)",
        "mpi": "the MPI runtime knows the ranks (no store)",
        "launcher-store": f"connect to the store the launcher hosts at {where}",
        "env": f"env:// rendezvous: rank 0 hosts a TCPStore at {where}",
        "rank0-store": f"rank 0 hosts a TCPStore at {where}, from {name}'s variables",
    }
    plan.update(
        rendezvous=how,
        rank0_hosts_store=how in ("env", "rank0-store"),
        summary=summaries[how],
        master_addr=addr,
        master_port=port,
    )
    if how in ("rank0-store", "launcher-store") and (addr is None or port is None):
        plan["summary"] += "; initialize() will fail until MASTER_ADDR and MASTER_PORT are set"
    elif how == "env" and None in (launch.master_addr, launch.master_port):
        plan["summary"] += " (ignite's default where MASTER_ADDR / MASTER_PORT are unset)"
    return plan


def _backends() -> dict[str, Any]:
    """Every registered backend, available or not, with the reason when not."""
    rows = []
    for model in registry.models():
        for name in model.backends:
            reason = model.unavailable_reason(name)
            rows.append(
                {"name": name, "model": model.name, "available": reason is None, "reason": reason}
            )
    return {"available": list(registry.available_backends()), "all": rows}


def _versions() -> dict[str, Any]:
    """Versions of Python, torch and the optional backends (none of them imported)."""
    return {
        "distbridge": distbridge.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": _nccl_version(),
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "mpi": dist.is_available() and dist.is_mpi_available(),
        "horovod": _installed_version("horovod"),
        "torch_xla": _installed_version("torch_xla"),
    }


def _nccl_version() -> str | None:
    """NCCL's version as "2.21.5", None when this torch build has no NCCL."""
    if not (dist.is_available() and dist.is_nccl_available()):
        return None
    try:
        version = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
    except (AttributeError, RuntimeError):  # CPU builds lack the binding
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _installed_version(module: str) -> str | None:
    """The installed version of ``module``, found without importing it; None when absent.
    (Its distribution has the module's name: importlib.metadata equates ``_`` and ``-``.)"""
    if importlib.util.find_spec(module) is None:  # a top-level find_spec runs no module code
        return None
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (no package metadata)"


def _devices(env: Mapping[str, str]) -> dict[str, Any]:
    """CUDA_VISIBLE_DEVICES and the CUDA devices torch sees, with names and memory."""
    cuda = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            cuda.append(
                {
                    "index": index,
                    "name": props.name,
                    "memory_bytes": int(props.total_memory),
                    "capability": f"{props.major}.{props.minor}",
                }
            )
    return {"cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"), "cuda": cuda}


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
    cpus = _or_dash(system["cpu_count"])
    if system["usable_cpus"] is not None:
        cpus += f" ({system['usable_cpus']} usable by this process)"
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
