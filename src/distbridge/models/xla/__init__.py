"""The XLA model: PyTorch/XLA (PJRT). `XlaModel` lives in ``model``; ``install`` judges
whether torch_xla can run here, ``dtypes`` which dtypes the device holds exactly."""

from __future__ import annotations

from distbridge.models.xla.model import XlaGroup, XlaModel

__all__ = ["XlaGroup", "XlaModel"]
