"""Which accelerator this process sees, and which devices a torch.distributed backend takes.

Read from ``torch.accelerator`` (CUDA, XPU, MPS, ...) and from torch.distributed's own tables
(``Backend.backend_capability``, ``get_default_backend_for_device``), so that a new device or
a backend registered with ``torch.distributed.Backend.register_backend`` needs no code here.
Older torch (without those, e.g. 2.9 under XLA) falls back to CUDA and torch's built-in
backends.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = [
    "accelerator_count",
    "accelerator_type",
    "backend_device_types",
    "default_backend",
    "local_device",
    "registered_backends",
    "takes_cpu_tensors",
]

_CPU = torch.device("cpu")
_ACCELERATOR = getattr(torch, "accelerator", None)  # None: torch < 2.6
# Backends torch ships (and its placeholders) and torch_xla's own (the XLA model runs it,
# under the backend name "xla-tpu"): not plug-ins of the native model.
_TORCH_BACKENDS = frozenset(("undefined", "gloo", "nccl", "xccl", "ucc", "mpi", "fake", "xla"))
# What each built-in backend takes, where torch has no Backend.backend_capability.
_KNOWN_DEVICES = {
    "nccl": ("cuda",),
    "xccl": ("xpu",),
    "gloo": ("cpu", "cuda"),
    "mpi": ("cpu", "cuda"),
}
_DEFAULT_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl"}


def accelerator_type() -> str | None:
    """The type of this process's accelerator ("cuda", "xpu", "mps", ...); None without one."""
    if _ACCELERATOR is None:
        return "cuda" if torch.cuda.is_available() else None
    if not _ACCELERATOR.is_available():
        return None
    found = _ACCELERATOR.current_accelerator()
    return None if found is None else str(found.type)


def accelerator_count() -> int:
    """How many devices of that accelerator this process can use (0 without one)."""
    if accelerator_type() is None:
        return 0
    return int((_ACCELERATOR or torch.cuda).device_count())  # CUDA's before torch 2.6


def local_device() -> torch.device:
    """The accelerator's current device with its index (``cuda:0`` equals a tensor's
    device, ``cuda`` does not), or the CPU without one."""
    kind = accelerator_type()
    if kind is None:
        return _CPU
    if _ACCELERATOR is None:
        return torch.device(kind, torch.cuda.current_device())
    return torch.device(kind, _ACCELERATOR.current_device_index())


def default_backend(device_type: str | None = None) -> str:
    """The torch.distributed backend for ``device_type`` (default: this process's accelerator,
    else the CPU): torch's ``get_default_backend_for_device`` ("gloo", "nccl", "xccl", ...)."""
    kind = device_type or accelerator_type() or "cpu"
    choose = getattr(dist, "get_default_backend_for_device", None)
    if choose is not None:
        try:
            return str(choose(kind))
        except (RuntimeError, ValueError):  # a device type without a default backend
            return "gloo"
    return _DEFAULT_BACKENDS.get(kind, "gloo")


def backend_device_types(backend: str) -> tuple[str, ...]:
    """The device types whose tensors ``backend``'s collectives take (torch's
    ``Backend.backend_capability``; a plug-in says so in ``register_backend(devices=...)``)."""
    capability = getattr(dist.Backend, "backend_capability", None) or {}
    if backend in capability:
        return tuple(capability[backend])
    return _KNOWN_DEVICES.get(backend, ("cpu",))


def takes_cpu_tensors(backend: str) -> bool:
    """Whether ``backend`` communicates CPU tensors (False for NCCL and XCCL)."""
    return "cpu" in backend_device_types(backend)


def registered_backends() -> tuple[str, ...]:
    """Backends registered with ``torch.distributed.Backend.register_backend``, lower case."""
    names = getattr(dist.Backend, "backend_list", ())
    return tuple(name for name in names if name not in _TORCH_BACKENDS)
