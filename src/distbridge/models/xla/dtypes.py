"""Exact dtypes on an XLA device: which ones the device holds bit for bit (where it does not,
the XLA model reduces with ``algorithms/fold.py``), and the signed zeros XLA's sum loses.
Pure torch: nothing here imports torch_xla."""

from __future__ import annotations

from typing import Any

import torch

from distbridge.algorithms import byte_view

__all__ = ["own_zeros", "round_trips"]


def _probe(dtype: torch.dtype) -> torch.Tensor:
    """Values that lose bits on a device that stores ``dtype`` in a narrower type."""
    if dtype.is_complex:
        real = _probe(getattr(torch, torch.finfo(dtype).dtype))  # finfo names the part's dtype
        return torch.complex(real, -real)
    if dtype is torch.bool:
        return torch.tensor([True, False])
    info: Any = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    extra = [info.tiny, 1 + info.eps, -0.0] if dtype.is_floating_point else [1]
    return torch.tensor([info.max, info.min, *extra], dtype=dtype)


def round_trips(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a CPU tensor of ``dtype`` comes back from ``device`` bit for bit."""
    try:
        sent = _probe(dtype)
        back = sent.to(device).cpu()
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return False  # the device cannot hold the dtype at all (e.g. complex32)
    return back.dtype == dtype and torch.equal(byte_view.as_bytes(back), byte_view.as_bytes(sent))


def own_zeros(out: torch.Tensor, sent: torch.Tensor) -> torch.Tensor:
    """``out``, XLA's sum over a group of one of ``sent``, with ``sent``'s own zeros where it
    is zero (their signs kept; parts of a complex number apart)."""
    if not (out.is_floating_point() or out.is_complex()):
        return out
    got = torch.view_as_real(out) if out.is_complex() else out
    mine = torch.view_as_real(sent) if sent.is_complex() else sent
    fixed = torch.where(got == 0, mine.to(got.device), got)
    return torch.view_as_complex(fixed) if out.is_complex() else fixed
