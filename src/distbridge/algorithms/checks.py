"""The checks every tensor collective makes of its tensor."""

from __future__ import annotations

import torch

__all__ = ["check_dense", "check_reducible"]

_NOT_DENSE = "{what} needs a dense (strided) tensor, got layout {layout}."


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
