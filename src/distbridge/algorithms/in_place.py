"""Results written into the caller's tensor, as torch.distributed's in-place collectives do."""

from __future__ import annotations

import torch

__all__ = ["divide_", "write_back"]


def divide_(tensor: torch.Tensor, n: int) -> torch.Tensor:
    """Divide ``tensor`` by ``n`` in place (an average), a complex one part by part, as
    torch.distributed's AVG does: a complex division would spread an inf or NaN of one part
    to the other and turn -0.0 into 0.0."""
    (torch.view_as_real(tensor) if tensor.is_complex() else tensor).div_(n)
    return tensor


def write_back(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Make ``x`` hold ``out`` (when the collective worked on a copy) and return ``x``.

    No copy when ``out`` is ``x`` through another view, as when a carrier filled ``x``'s
    bytes in place (copying would fail: torch refuses a copy between overlapping tensors whose
    strides differ, which a contiguous ``x`` may have in dims of size 1). XLA tensors have no
    address (``data_ptr()`` is 0 for all of them): never the same elements there."""
    same = out is x or (
        x.data_ptr() != 0
        and out.data_ptr() == x.data_ptr()
        and (out.dtype, out.shape, out.device) == (x.dtype, x.shape, x.device)
        and x.is_contiguous()
        and out.is_contiguous()
    )
    if not same:
        with torch.no_grad():
            x.copy_(out)
    return x
