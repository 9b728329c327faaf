"""A tensor as its raw bytes, and bytes back as a tensor: the one place that does it.

Backends move the dtypes they lack (and object frames their tensors) as uint8. Viewing a
tensor as bytes with ``tensor.view(torch.uint8)`` fails on layouts torch calls contiguous:
a dimension of size 1 may have any stride (``torch.arange(4.)[::2][:1]`` has stride 2), and
``view`` to another element size wants a last stride of 1. Here a contiguous tensor is read
as the dense run of elements it is (no copy, its storage shared, so writes into the bytes
land in the tensor); any other layout is copied first. Going back, bytes that do not start
on an element boundary of the wanted dtype are copied once, never misread.
"""

from __future__ import annotations

import math

import torch

__all__ = ["as_bytes", "from_bytes"]


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s elements in order as a flat uint8 tensor (``numel * itemsize`` bytes): a
    view when ``tensor.is_contiguous()``, else a copy. Bools give their bytes as stored."""
    dense = tensor if tensor.is_contiguous() else tensor.contiguous()
    flat = dense.reshape(-1)  # a view: dense is contiguous
    if flat.stride(0) != 1:  # one element, or none, with any stride
        flat = flat.as_strided((flat.numel(),), (1,))  # from the same storage offset
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def from_bytes(data: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor of ``dtype`` and ``shape`` whose bytes are ``data`` (read in order): a view
    where its layout allows, else a copy; ValueError when ``shape`` needs another size."""
    need = math.prod(shape) * dtype.itemsize
    if data.numel() * data.element_size() != need:
        raise ValueError(
            f"Got {data.numel() * data.element_size()} bytes for a {dtype} tensor of shape "
            f"{tuple(shape)}, which needs {need}: the bytes and the shape must come from the "
            "same tensor."
        )
    if not need:  # an empty row of a stacked buffer may start at any offset
        return torch.empty(shape, dtype=dtype, device=data.device)
    raw = as_bytes(data)
    try:
        out = raw.view(dtype)
    except RuntimeError:  # not on an element boundary (a slice of a received buffer)
        out = raw.clone().view(dtype)
    return out.view(shape)
