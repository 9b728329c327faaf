"""The native model: torch.distributed (gloo, NCCL, MPI). `NativeModel` lives in ``model``;
``init`` creates the default process group, ``backends`` and ``ops`` are its helpers."""

from __future__ import annotations

from distbridge.models.native.model import NativeModel

__all__ = ["NativeModel"]
