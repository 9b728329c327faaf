"""Computation models: one class per backend family."""

from __future__ import annotations

from distbridge.models._layout import Layout
from distbridge.models.base import ComputationModel
from distbridge.models.horovod import HorovodModel
from distbridge.models.native import NativeModel
from distbridge.models.serial import SerialModel
from distbridge.models.xla import XlaModel

__all__ = [
    "BUILTIN_MODELS",
    "ComputationModel",
    "HorovodModel",
    "Layout",
    "NativeModel",
    "SerialModel",
    "XlaModel",
]

#: The models distbridge registers itself (XLA and Horovod join here).
BUILTIN_MODELS: tuple[type[ComputationModel], ...] = (
    HorovodModel,
    NativeModel,
    SerialModel,
    XlaModel,
)
