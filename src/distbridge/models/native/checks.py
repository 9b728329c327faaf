"""Checks of the native model: which backends can run here, and the arguments that must fail
on every rank alike before torch sees them (torch fails on some ranks only, or with a
RuntimeError)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch.distributed as dist

from distbridge.models._layout import visible_gpus

__all__ = ["backend_problem", "check_group_options", "optional_argument"]


def _available() -> tuple[str, ...]:
    return tuple(b for b in ("nccl", "gloo", "mpi") if backend_problem(b) is None)


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
    if backend is not None and str(backend).lower() not in _available():
        raise ValueError(
            f"new_group(backend={backend!r}): not a backend that can run here; available: "
            f"{', '.join(_available())}."
        )
