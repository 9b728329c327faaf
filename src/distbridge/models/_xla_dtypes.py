"""Exact dtypes on an XLA device: which ones the device holds bit for bit, and the rank-order
fold that reduces gathered rows on the CPU where XLA's own all-reduce is inexact or lacks an
op. Pure torch: nothing here imports torch_xla."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from distbridge.models import _carriers as carriers

__all__ = ["fold", "round_trips"]


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
    return back.dtype == dtype and torch.equal(carriers.as_bytes(back), carriers.as_bytes(sent))


_STEPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "AVG": torch.add,
    "SUM": torch.add,
    "PRODUCT": torch.mul,
    "MIN": torch.minimum,
    "MAX": torch.maximum,
    "AND": torch.bitwise_and,
    "OR": torch.bitwise_or,
}


def fold(rows: torch.Tensor, op: str) -> torch.Tensor:
    """Reduce the gathered ``rows`` (one per rank) with ``op``, in rank order."""
    dtype = rows.dtype
    back: Callable[[torch.Tensor], torch.Tensor] | None = None
    if dtype in carriers.UNCARRIED_BY_C10D:  # no CPU add / minimum for uint16-64: widen or view
        rows, back = carriers.reduce_carrier(rows, op)
    elif (dtype.itemsize == 1 and dtype.is_floating_point) or dtype is torch.complex32:
        wide = torch.complex64 if dtype.is_complex else torch.float32  # no CPU arithmetic
        rows, back = rows.to(wide), lambda out: out.to(dtype)
    out = rows[0]
    for row in rows[1:]:
        out = _STEPS[op](out, row)
    if op == "AVG":
        out = out / len(rows)
    return out if back is None else back(out)
