"""Computation models: one class per backend family."""

from __future__ import annotations

from distbridge.models.base import ComputationModel
from distbridge.models.native import NativeModel
from distbridge.models.serial import SerialModel

__all__ = ["BUILTIN_MODELS", "ComputationModel", "NativeModel", "SerialModel"]

#: The models distbridge registers itself (XLA and Horovod join here).
BUILTIN_MODELS: tuple[type[ComputationModel], ...] = (NativeModel, SerialModel)
