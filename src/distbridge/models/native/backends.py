"""Which backends the native model runs and whether each can run here, the backend of a live
process group, the device a rank computes on (from torch's own tables,
``models/_accelerator.py``), and the arguments that must fail on every rank alike before torch
sees them (torch fails on some ranks only, or with a RuntimeError): NCCL's GPU per process
among them, said before the rendezvous (and before ``spawn`` starts workers), where the peers
would otherwise wait."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from distbridge.errors import DistributedError
from distbridge.models._accelerator import (
    accelerator_count,
    accelerator_type,
    backend_device_types,
    registered_backends,
    takes_cpu_tensors,
)
from distbridge.models._layout import Layout, visible_gpus

__all__ = [
    "NativeBackends",
    "available_backends",
    "backend_of",
    "backend_problem",
    "check_group_options",
    "check_nccl_gpus",
    "device_for",
    "native_backends",
    "nccl_gpu_problem",
    "optional_argument",
]


def backend_of(pg: Any) -> str | None:
    """The backend ("gloo", "nccl", a registered one, ...) of a process group of this model;
    None for others (e.g. xla)."""
    name = str(dist.get_backend(pg)).lower()
    backends = native_backends()
    if name in backends:
        return name
    for backend in backends:  # a name that holds it, e.g. a device map "cuda:nccl"
        if backend in name:
            return backend
    return None


class NativeBackends:
    """``NativeModel.backends``, read when asked: torch's nccl, gloo, mpi (and xccl where
    torch has it), then any backend registered with ``Backend.register_backend`` since."""

    def __get__(self, _instance: object, _owner: type) -> tuple[str, ...]:
        return native_backends()


def native_backends() -> tuple[str, ...]:
    """The backends the native model runs now: built-in, then registered ones."""
    built_in = ("nccl", "gloo", "mpi", "xccl") if hasattr(dist, "is_xccl_available") else ()
    return (*(built_in or ("nccl", "gloo", "mpi")), *registered_backends())


def device_for(backend: str, layout: Layout) -> torch.device:
    """This rank's accelerator where ``backend`` takes its tensors (or needs one, as NCCL
    does), else the CPU: gloo on a CUDA machine computes on CUDA, on an XPU one on the CPU."""
    kind = accelerator_type()
    usable = kind is not None and kind in backend_device_types(backend)
    count = accelerator_count() if usable else 0
    return layout.device(count, gpu_required=not takes_cpu_tensors(backend), kind=kind or "cuda")


def available_backends() -> tuple[str, ...]:
    """The native backends that can run here (``NativeModel.available_backends``)."""
    return tuple(b for b in native_backends() if backend_problem(b) is None)


def backend_problem(backend: str) -> str | None:
    """Why the native ``backend`` ("gloo", "nccl", "mpi") cannot run here; None when it can."""
    if not dist.is_available():
        return "this torch build has no torch.distributed (torch.distributed.is_available())"
    if backend == "gloo" and not dist.is_gloo_available():
        return "this torch build has no Gloo (torch.distributed.is_gloo_available() is False)"
    if backend == "nccl":
        if not dist.is_nccl_available():
            return (
                "this torch build has no NCCL (torch.distributed.is_nccl_available() is False; "
                "CPU-only wheels lack it). Install a CUDA build of torch, or use 'gloo'"
            )
        if visible_gpus() == 0:  # NVML's count: no driver query, forks stay usable
            return "NCCL needs a CUDA GPU and torch.cuda.device_count() is 0 here; use 'gloo'"
    if backend == "xccl" and not getattr(dist, "is_xccl_available", lambda: False)():
        return (
            "this torch build has no XCCL (torch.distributed.is_xccl_available() is False); "
            "XCCL runs on Intel GPUs with an XPU build of torch. Use 'gloo'"
        )
    if backend == "mpi" and not dist.is_mpi_available():
        return (
            "torch was built without MPI (torch.distributed.is_mpi_available() is False; "
            "pip wheels never include it). Build torch from source with MPI, or use 'gloo' "
            "under mpirun"
        )
    return None


def nccl_gpu_problem(
    processes_on_node: int | None = None, local_rank: int | None = None, *, gpus: int | None = None
) -> str | None:
    """Why NCCL cannot give each process of this node a GPU of its own (of ``gpus``; None: the
    visible ones), or None if it can. ``spawn`` asks it before any worker starts.

    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and local rank ``r``
    computes on ``cuda:r``; a process without a GPU would fail later, or hang its peers.
    """
    gpus = visible_gpus() if gpus is None else gpus
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f"{gpus} visible CUDA GPU{'' if gpus == 1 else 's'}" + (
        "" if visible is None else f" (CUDA_VISIBLE_DEVICES={visible!r})"
    )
    fix = f"start at most {gpus} processes per node, or use the 'gloo' backend."
    if gpus == 0:
        return (
            f"Backend 'nccl' needs a CUDA GPU per process, and this machine has {seen}; use 'gloo'."
        )
    if processes_on_node is not None and processes_on_node > gpus:
        return (
            f"Backend 'nccl' needs a CUDA GPU per process: {processes_on_node} processes on "
            f"this node, {seen}; {fix}"
        )
    if local_rank is not None and local_rank >= gpus:
        return (
            f"Backend 'nccl' needs a CUDA GPU per process: local rank {local_rank} would "
            f"compute on cuda:{local_rank}, and this machine has {seen}; {fix}"
        )
    return None


def check_nccl_gpus(processes_on_node: int | None, local_rank: int | None) -> None:
    """``DistributedError`` with ``nccl_gpu_problem``'s reason, if there is one."""
    problem = nccl_gpu_problem(processes_on_node, local_rank)
    if problem is not None:
        raise DistributedError(problem)


def optional_argument(name: str, value: object, kind: type, least: int) -> Any:
    """``value`` when it is None or a ``kind`` (an int at least ``least``); TypeError or
    ValueError naming it otherwise, before torch sees it."""
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"initialize(): {name} must be a {kind.__name__}, got {value!r}.")
    if isinstance(value, int) and value < least:
        raise ValueError(f"initialize(): {name} must be at least {least}, got {value!r}.")
    return value


def check_group_options(options: Mapping[str, Any]) -> None:
    """TypeError for an option ``torch.distributed.new_group`` does not take; ValueError for a
    ``backend`` option that cannot run here. Checked on every rank alike, before any rank
    calls torch (which would fail on some ranks only)."""
    known = set(inspect.signature(dist.new_group).parameters) - {"ranks"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(
            f"new_group() got unexpected keyword arguments {unknown}; torch.distributed."
            f"new_group takes {', '.join(sorted(known))}."
        )
    backend = options.get("backend")
    if backend is not None and str(backend).lower() not in available_backends():
        raise ValueError(
            f"new_group(backend={backend!r}): not a backend that can run here; available: "
            f"{', '.join(available_backends())}."
        )
