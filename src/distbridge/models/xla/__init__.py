"""The XLA model: PyTorch/XLA (PJRT). `XlaModel` lives in ``model``, with the judgement of
whether torch_xla can run here; ``dtypes`` says which dtypes the device holds exactly."""

from __future__ import annotations

from distbridge.models.xla.model import XlaGroup, XlaModel

__all__ = ["XlaGroup", "XlaModel"]
