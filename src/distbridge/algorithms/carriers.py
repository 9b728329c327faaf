"""Carrying dtypes a backend lacks, bit-exactly.

Gloo (and NCCL) have no int16, uint16, uint32 or uint64. Gathers and broadcasts
move such tensors as raw bytes. Reductions widen int16 / uint16 / uint32 (sums and
products then wrap exactly as in the narrow type once cast back), and view uint64
as int64 (two's complement makes SUM, PRODUCT, AND, OR identical; for MIN / MAX the
sign bit is flipped first, which maps unsigned order onto signed order).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["UNCARRIED_BY_C10D", "as_bytes", "from_bytes", "reduce_carrier"]

UNCARRIED_BY_C10D: frozenset[torch.dtype] = frozenset(
    d
    for d in (torch.int16, getattr(torch, "uint16", None), getattr(torch, "uint32", None),
              getattr(torch, "uint64", None))
    if d is not None
)  # fmt: skip

_WIDER = {torch.int16: torch.int32}
if hasattr(torch, "uint16"):
    _WIDER.update({torch.uint16: torch.int32, torch.uint32: torch.int64})
_SIGN_BIT = -(2**63)


def reduce_carrier(
    tensor: torch.Tensor, op: str
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """A tensor the backend can reduce with ``op``, and the function that turns the reduced
    carrier back into ``tensor``'s dtype."""
    dtype = tensor.dtype
    if dtype in _WIDER:
        return tensor.to(_WIDER[dtype]), lambda out: out.to(dtype)
    as_signed = tensor.view(torch.int64)  # uint64
    if op in ("MIN", "MAX"):
        return as_signed ^ _SIGN_BIT, lambda out: (out ^ _SIGN_BIT).view(dtype)
    return as_signed.clone(), lambda out: out.view(dtype)


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of a contiguous tensor (shares its storage)."""
    flat = tensor.reshape(-1)
    if flat.stride(0) != 1:  # one element with any stride still counts as contiguous
        flat = flat.as_strided((flat.numel(),), (1,))
    return flat.view(torch.uint8)


def from_bytes(data: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor whose bytes are ``data``."""
    if not data.numel():  # an empty row of a stacked buffer may start at an odd offset
        return torch.empty(shape, dtype=dtype, device=data.device)
    return data.view(dtype).reshape(shape)
