"""Tensor checks and small tensor helpers shared by every collective."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["check_dense", "check_reducible", "divide_", "region", "write_back"]


def check_dense(tensor: torch.Tensor, what: str) -> None:
    """TypeError unless ``tensor`` is dense (strided)."""
    if tensor.layout != torch.strided:
        raise TypeError(f"{what} needs a dense (strided) tensor, got layout {tensor.layout}.")


def check_reducible(tensor: torch.Tensor, op: str, what: str = "all_reduce") -> None:
    """TypeError when reduction ``op`` is undefined or inexact for ``tensor``'s dtype."""
    check_dense(tensor, what)
    dtype = tensor.dtype
    if op in ("AND", "OR") and (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"Reduction {op} needs a bool or integer tensor, got dtype {dtype}.")
    if op == "AVG" and not (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(
            f"Reduction AVG needs a floating-point tensor, got dtype {dtype}: an integer "
            "average would be truncated. Convert with .double() or use SUM."
        )
    if op in ("MIN", "MAX") and dtype.is_complex:
        raise TypeError(f"Reduction {op} is undefined for complex dtype {dtype}.")


def divide_(tensor: torch.Tensor, n: int) -> torch.Tensor:
    """Divide ``tensor`` by ``n`` in place (an average), a complex one part by part, as
    torch.distributed's AVG does: a complex division would spread an inf or NaN of one part
    to the other and turn -0.0 into 0.0."""
    (torch.view_as_real(tensor) if tensor.is_complex() else tensor).div_(n)
    return tensor


def region(index: int | None, shape: Sequence[int]) -> tuple[int | slice, ...]:
    """The index that cuts a tensor (entry ``index`` of a stacked one) down to ``shape``."""
    cut = [slice(0, d) for d in shape]
    return tuple(cut) if index is None else (index, *cut)


def write_back(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Make ``x`` hold ``out`` (when the collective worked on a copy) and return ``x``."""
    if out is not x and not _same_elements(x, out):
        with torch.no_grad():
            x.copy_(out)
    return x


def _same_elements(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether ``out`` is ``x`` through another view, as when a carrier filled ``x``'s bytes in
    place (copying would fail: torch refuses a copy between overlapping tensors whose strides
    differ, which a contiguous ``x`` may have in dims of size 1). XLA tensors have no
    address (``data_ptr()`` is 0 for all of them): never the same elements there."""
    return (
        x.data_ptr() != 0
        and out.data_ptr() == x.data_ptr()
        and (out.dtype, out.shape, out.device) == (x.dtype, x.shape, x.device)
        and x.is_contiguous()
        and out.is_contiguous()
    )
