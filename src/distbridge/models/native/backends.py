"""Which backends the native model runs, the backend of a live process group, and the device
a rank computes on for a backend: from torch's own tables (``models/_accelerator.py``)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from distbridge.models._accelerator import (
    accelerator_count,
    accelerator_type,
    backend_device_types,
    registered_backends,
    takes_cpu_tensors,
)
from distbridge.models._layout import Layout

__all__ = ["NativeBackends", "backend_of", "device_for", "native_backends"]


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
