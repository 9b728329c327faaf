"""What every tensor collective does with the caller's tensor: the checks it makes of it, the
kinds of tensor that passed them (a fast path), and the result written back into it."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["FastPath", "check_dense", "check_reducible", "divide_", "write_back"]

_NOT_DENSE = "{what} needs a dense (strided) tensor, got layout {layout}."
_MOST_REMEMBERED = 64  # kinds per collective; beyond them, calls take the checks


def check_dense(tensor: torch.Tensor, what: str) -> None:
    """TypeError unless ``tensor`` is dense (strided)."""
    if tensor.layout != torch.strided:
        raise TypeError(_NOT_DENSE.format(what=what, layout=tensor.layout))


def check_reducible(tensor: torch.Tensor, op: str, what: str = "all_reduce") -> None:
    """TypeError when reduction ``op`` is undefined or inexact for ``tensor``'s dtype, or
    ``tensor`` is not dense."""
    if tensor.layout != torch.strided:  # check_dense's, written out: one call fewer on each call
        raise TypeError(_NOT_DENSE.format(what=what, layout=tensor.layout))
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


class FastPath:
    """The kinds of tensor one collective (of the world) may send without its checks.

    Collectives called in a loop with tensors of one kind, as a training step does: a kind
    (dtype, shape, device, layout) that passed every check once and went to the backend as it
    was lets later calls with tensors like it skip the checks. At 1 MiB the checks cost 20-30 us
    a call with the caches cold between transfers."""

    __slots__ = ("_kinds",)

    def __init__(self) -> None:
        self._kinds: set[tuple[Any, ...]] = set()

    def knows(self, x: torch.Tensor) -> bool:
        """Whether ``x`` may skip the checks: a tensor like it passed them, and it is
        contiguous (so it goes as it is)."""
        return (x.dtype, x.shape, x.device, x.layout) in self._kinds and x.is_contiguous()

    def remember(self, x: torch.Tensor) -> None:
        """Let later tensors like ``x`` skip the checks: ``x`` passed them and went as it was."""
        if len(self._kinds) < _MOST_REMEMBERED:
            self._kinds.add((x.dtype, x.shape, x.device, x.layout))


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
