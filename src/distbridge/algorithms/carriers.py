"""Carrying dtypes a backend lacks, bit-exactly.

Gloo (and NCCL) have no int16, uint16, uint32 or uint64. Gathers and broadcasts
move such tensors as raw bytes. Reductions widen int16 / uint16 / uint32 (sums and
products then wrap exactly as in the narrow type once cast back), and view uint64
as int64 (two's complement makes SUM, PRODUCT, AND, OR identical; for MIN / MAX the
sign bit is flipped first, which maps unsigned order onto signed order).

Float MIN and MAX go through integers on every backend, so that their answer is defined
and the same everywhere: IEEE 754-2019's minimum / maximum, where a NaN wins and -0.0 is
below 0.0. (gloo keeps whichever operand comes first when one is NaN or both are zeros,
so its answer depends on the rank order; NCCL and Horovod differ again.) Each float becomes
an integer key whose order is the floats' order with every NaN at the winning end (see
``_OrderKeys``): one collective as before, in integers of the same width (16-bit floats go
as float32), and a few element-wise operations on each side.
"""

from __future__ import annotations

import math
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
    (torch.int16, torch.uint16, torch.uint32, torch.uint64)
)
_WIDER = {torch.int16: torch.int32, torch.uint16: torch.int32, torch.uint32: torch.int64}
_SIGN_BIT = -(2**63)

#: the float dtypes whose MIN and MAX go through `ordered_carrier`
ORDERED_FLOATS: frozenset[torch.dtype] = frozenset(
    (torch.float16, torch.bfloat16, torch.float32, torch.float64)
)


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


class _OrderKeys:
    """The integer keys of float32 or float64 under MIN or MAX: one formula, two constants.

    ``i`` is a float's bits as a signed integer of its width ``w``, ``s = i >> (w - 1)`` (0,
    or -1 where the sign is set), ``INF`` the bits of +inf, and sums wrap at ``w`` bits. The
    key is ``(i ^ s) + alpha * s``: a non-negative ``i`` stays, a negative one becomes
    ``~i - alpha``.

    - MAX, ``alpha = -(INF + 1)``: +0.0 to +inf keep their bits, the positive NaNs lie above
      +inf; the negative numbers wrap to the bottom in reverse order (-inf lowest, -0.0
      highest, still below +0.0's 0) and the negative NaNs to the top.
    - MIN, ``alpha = -2**(w-1)``: a negative ``i`` becomes ``i ^ (2**(w-1) - 1)``, the
      negative numbers below zero in reverse order. The positive NaNs would lie above +inf,
      so every NaN is first made one negative NaN (``nan_to_num``), whose key is the lowest.

    Decoding: ``s = key >> (w - 1)``, ``i = (key - alpha * s) ^ s``. Every number comes back
    bit for bit, a NaN as a NaN (with another sign or payload). Three operations each way
    (MIN one more, the ``nan_to_num``), no test for NaN; the shift is a 0-d tensor of the
    keys' dtype (a Python number costs a conversion to a tensor per call; a 0-d CPU tensor
    also serves a CUDA tensor); while torch.compile traces, the same formulas take Python
    numbers, and MIN's NaNs are replaced in the integers (a traced graph drops the sign of a
    NaN constant).
    """

    __slots__ = ("alpha", "ints", "nan_bits", "op", "shift", "shift_tensor", "undo")

    def __init__(self, ints: torch.dtype, inf: int, op: str) -> None:
        w = torch.iinfo(ints).bits
        self.ints, self.op, self.shift = ints, op, w - 1
        self.alpha = -(inf + 1) if op == "MAX" else -(2 ** (w - 1))
        # decoding subtracts alpha: -2**(w-1) is its own negative at w bits
        self.undo = inf + 1 if op == "MAX" else self.alpha
        self.shift_tensor = torch.tensor(self.shift, dtype=ints, device="cpu")
        # the bits of nan_to_num's -nan: the sign, the exponent and the quiet bit set
        self.nan_bits = inf + (2 ** (w - 1) - inf) // 2 - 2 ** (w - 1)

    def encode(self, floats: torch.Tensor, in_place: bool) -> torch.Tensor:
        """The keys of ``floats``; ``in_place``: made in their own memory."""
        compiling = torch.compiler.is_compiling()
        shift = self.shift if compiling else self.shift_tensor
        if self.op == "MIN" and not compiling:
            out = floats if in_place else None
            floats = torch.nan_to_num(floats, _NEGATIVE_NAN, math.inf, -math.inf, out=out)
        bits = floats.view(self.ints)
        if self.op == "MIN" and compiling:  # a traced graph drops a NaN constant's sign
            nan_free = torch.where(torch.isnan(floats), self.nan_bits, bits)
            bits = bits.copy_(nan_free) if in_place else nan_free
        into = bits if in_place else None
        s = torch.bitwise_right_shift(bits, shift)
        keys = torch.bitwise_xor(bits, s, out=into)
        return torch.add(keys, s, alpha=self.alpha, out=into)

    def decode(self, keys: torch.Tensor, into: torch.Tensor | None) -> torch.Tensor:
        """The float bits ``keys`` were made of (integers), written into ``into`` (and
        ``keys`` used as scratch), or new where it is None."""
        shift = self.shift if torch.compiler.is_compiling() else self.shift_tensor
        scratch = None if into is None else keys
        s = torch.bitwise_right_shift(keys, shift)
        keys = torch.add(keys, s, alpha=self.undo, out=scratch)
        return torch.bitwise_xor(keys, s, out=into)


_NEGATIVE_NAN = -math.nan

#: (float32 or float64, "MIN" or "MAX"): its keys
_KEYS = {
    (dtype, op): _OrderKeys(ints, inf, op)
    for dtype, ints, inf in (
        (torch.float32, torch.int32, 0x7F800000),
        (torch.float64, torch.int64, 0x7FF0000000000000),
    )
    for op in ("MIN", "MAX")
}


def ordered_carrier(
    tensor: torch.Tensor, op: str, in_place: bool = False
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """For MIN or MAX of a float tensor: integer keys whose MIN / MAX is the floats' IEEE
    minimum / maximum, and the function that turns the reduced keys back into floats (see
    ``_OrderKeys``). 16-bit floats go as float32 (exactly: gloo and NCCL have no int16).

    ``in_place`` (an all-reduce, whose reduced keys have ``tensor``'s shape): the keys are
    made in ``tensor``'s own memory (a float32 or float64 one; 16-bit floats get a new
    float32 tensor), and the function writes the floats back into ``tensor`` and returns it,
    so an in-place all-reduce copies nothing; it overwrites the reduced keys it is given.
    Called on the keys before they are reduced, it puts ``tensor`` back (a NaN may come back
    with another sign or payload). Otherwise neither ``tensor`` nor the reduced keys are
    written to (as torch.compile wants), and the reduced keys may have any shape (a fold's
    row, a reduce-scatter's chunk). Off the CPU and CUDA (XLA) the keys are a CPU copy's,
    and the floats come back as a new tensor either way.
    """
    if tensor.device.type not in ("cpu", "cuda"):
        # XLA: the keys stay on the CPU (XLA lowers int32's extremes through a float, and may
        # keep int64 as int32); the backend moves them where it reduces them exactly
        keys, from_keys = ordered_carrier(tensor.cpu(), op, in_place)
        device = tensor.device
        return keys, lambda out: from_keys(out.cpu()).to(device)
    dtype = tensor.dtype
    order = _KEYS[(dtype if dtype is torch.float64 else torch.float32, op)]
    floats = dtype if order.ints is torch.int64 else torch.float32
    if not in_place:
        keys = order.encode(tensor.to(floats), in_place=False)
        return keys, lambda out: order.decode(out, None).view(floats).to(dtype)
    work = tensor
    if dtype is not floats:  # a new float32 tensor, the number exactly
        work = torch.empty(tensor.shape, dtype=floats, device=tensor.device)
        work.copy_(tensor)
    keys = order.encode(work, in_place=True)

    def back_into(out: torch.Tensor) -> torch.Tensor:
        order.decode(out, keys)
        if work is not tensor:
            tensor.copy_(work)
        return tensor

    return keys, back_into


def reduction_carrier(
    tensor: torch.Tensor, op: str, uncarried: frozenset[torch.dtype], in_place: bool = False
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor] | None]:
    """What a backend that cannot move ``uncarried`` reduces for ``tensor`` under ``op``,
    and how the result comes back (None: ``tensor`` goes as it is). ``in_place``: ``tensor``
    is the caller's to overwrite, and float MIN / MAX keys are made in it (see
    ``ordered_carrier``)."""
    if op in ("MIN", "MAX") and tensor.dtype in ORDERED_FLOATS:
        return ordered_carrier(tensor, op, in_place)
    if tensor.dtype in uncarried:
        return integer_carrier(tensor, op)
    return tensor, None
