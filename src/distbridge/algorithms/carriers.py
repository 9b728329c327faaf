"""Carrying dtypes a backend lacks, bit-exactly.

Gloo (and NCCL) have no int16, uint16, uint32 or uint64. Gathers and broadcasts
move such tensors as raw bytes. Reductions widen int16 / uint16 / uint32 (sums and
products then wrap exactly as in the narrow type once cast back), and view uint64
as int64 (two's complement makes SUM, PRODUCT, AND, OR identical; for MIN / MAX the
sign bit is flipped first, which maps unsigned order onto signed order).

Float MIN and MAX go through integers on every backend, so that their answer is defined
and the same everywhere: IEEE 754-2019's minimum / maximum, where a NaN wins and -0.0 is
below 0.0. (gloo keeps whichever operand comes first when one is NaN or both are zeros,
so its answer depends on the rank order; NCCL and Horovod differ again.) Each float's bits,
read as a signed integer with every bit but the sign flipped where the sign is set, order
as the floats do; a NaN becomes the integer extreme that wins, and comes back as NaN.
Cost: one collective as before, in integers of the same width (int32 for 16-bit floats),
and about two copies' worth of element-wise work on each side.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "ORDERED_FLOATS",
    "UNCARRIED_BY_C10D",
    "integer_carrier",
    "ordered_carrier",
    "reduction_carrier",
]

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

#: float dtype: (the integer of its width, the integer its MIN / MAX key is reduced in)
_ORDER_INTS = {
    torch.float16: (torch.int16, torch.int32),  # gloo has no int16
    torch.bfloat16: (torch.int16, torch.int32),
    torch.float32: (torch.int32, torch.int32),
    torch.float64: (torch.int64, torch.int64),
}
#: the float dtypes whose MIN and MAX go through `ordered_carrier`
ORDERED_FLOATS: frozenset[torch.dtype] = frozenset(_ORDER_INTS)


def integer_carrier(
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


def ordered_carrier(
    tensor: torch.Tensor, op: str
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """For MIN or MAX of a float tensor: integer keys whose MIN / MAX is the floats' IEEE
    minimum / maximum, and the function that turns the reduced keys back into floats.

    A key is the float's bits with every bit but the sign flipped where the sign is set
    (``bits ^ ((bits >> width - 1) & flip)``, its own inverse); a NaN's key is the extreme of
    the float's width that wins under ``op``, which decodes to a NaN again.
    """
    if tensor.device.type not in ("cpu", "cuda"):
        # XLA: the keys stay on the CPU (XLA lowers int32's extremes through a float, and may
        # keep int64 as int32); the backend moves them where it reduces them exactly
        keys, from_keys = ordered_carrier(tensor.cpu(), op)
        device = tensor.device
        return keys, lambda out: from_keys(out.cpu()).to(device)
    dtype = tensor.dtype
    narrow, wide = _ORDER_INTS[dtype]
    info = torch.iinfo(narrow)
    flip, nan_key, shift = info.max, info.min if op == "MIN" else info.max, info.bits - 1
    bits = tensor.view(narrow).to(wide)  # no copy where the widths agree

    def order(values: torch.Tensor) -> torch.Tensor:
        out = values >> shift
        out &= flip
        out ^= values
        return out

    keys = order(bits).masked_fill_(torch.isnan(tensor), nan_key)
    return keys, lambda out: order(out).to(narrow).view(dtype)


def reduction_carrier(
    tensor: torch.Tensor, op: str, uncarried: frozenset[torch.dtype]
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor] | None]:
    """What a backend that cannot move ``uncarried`` reduces for ``tensor`` under ``op``,
    and how the result comes back (None: ``tensor`` goes as it is)."""
    if op in ("MIN", "MAX") and tensor.dtype in ORDERED_FLOATS:
        return ordered_carrier(tensor, op)
    if tensor.dtype in uncarried:
        return integer_carrier(tensor, op)
    return tensor, None
