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
``_OrderKeys``): one collective as before, in integers of the same width (int32 for 16-bit
floats), and a few element-wise operations on each side.
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


def _wrapped(value: int, bits: int) -> int:
    """``value`` modulo ``2**bits``, as a signed integer of that width."""
    value %= 2**bits
    return value - 2**bits if value >= 2 ** (bits - 1) else value


class _OrderKeys:
    """The integer keys of one float dtype under MIN or MAX: their constants and formulas.

    ``i`` is a float's bits as a signed integer of the float's width ``v``, sign-extended to
    the keys' width ``w`` (wider only for 16-bit floats: gloo and NCCL have no int16),
    ``s = i >> (w - 1)`` (0, or -1 where the sign is set), ``INF`` the bits of +inf, and
    every sum wraps at ``w`` bits:

    - MAX key = ``(i ^ s) + alpha * s``, ``alpha = 2**(w-1) + 2**(v-1) - 1 - INF``. A
      non-negative ``i`` stays: +0.0 to +inf, then the positive NaNs above +inf. A negative
      one becomes ``~i - alpha``: the negative numbers wrap to the bottom in reverse order
      (-inf lowest, -0.0 highest, still below +0.0's 0) and the negative NaNs to the top.
      (For ``v == w``, ``alpha = -(INF + 1)``.)
    - MIN key = MAX key + ``rotate``, ``rotate = 2**(w-1) - 1 - INF``: everything above +inf
      (the NaNs) wraps to the bottom, the rest keeps its order.

    Decoding: ``key - rotate`` for MIN, then ``s = key >> (w - 1)``, ``i = (key - alpha * s)
    ^ s``. Every number comes back bit for bit, a NaN as a NaN (a negative one may come back
    positive, with another payload). The eager path spends three operations on each side
    (MIN one more), no test for NaN, and its constants are 0-d tensors of the keys' dtype
    (a Python number costs a conversion to a tensor per call; a 0-d CPU tensor also serves
    a CUDA tensor); while torch.compile traces, the same formulas take Python numbers.
    """

    __slots__ = ("alpha", "narrow", "rotate", "rotate_tensor", "shift", "shift_tensor", "wide")

    def __init__(self, narrow: torch.dtype, wide: torch.dtype, inf: int, op: str) -> None:
        v, w = torch.iinfo(narrow).bits, torch.iinfo(wide).bits
        self.narrow, self.wide, self.shift = narrow, wide, w - 1
        self.alpha = _wrapped(2 ** (w - 1) + 2 ** (v - 1) - 1 - inf, w)
        self.rotate = 2 ** (w - 1) - 1 - inf if op == "MIN" else None
        self.shift_tensor = torch.tensor(self.shift, dtype=wide, device="cpu")
        self.rotate_tensor = (
            None if self.rotate is None else torch.tensor(self.rotate, dtype=wide, device="cpu")
        )

    def _constants(self) -> tuple[torch.Tensor | int, torch.Tensor | int | None]:
        if torch.compiler.is_compiling():
            return self.shift, self.rotate
        return self.shift_tensor, self.rotate_tensor

    def encode(self, bits: torch.Tensor, into: torch.Tensor | None) -> torch.Tensor:
        """The keys of ``bits`` (integers of the keys' dtype), written into ``into`` (which
        may be ``bits``), or new where it is None."""
        shift, rotate = self._constants()
        s = torch.bitwise_right_shift(bits, shift)
        keys = torch.bitwise_xor(bits, s, out=into)
        keys = torch.add(keys, s, alpha=self.alpha, out=into)
        return keys if rotate is None else torch.add(keys, rotate, out=into)

    def decode(
        self, keys: torch.Tensor, scratch: torch.Tensor | None, into: torch.Tensor | None
    ) -> torch.Tensor:
        """The integers ``keys`` were made of (in the keys' dtype), written into ``into``;
        ``scratch`` is ``keys`` where they may be overwritten on the way, else None (and then
        None for ``into`` too: everything new)."""
        shift, rotate = self._constants()
        if rotate is not None:
            keys = torch.sub(keys, rotate, out=scratch)
        s = torch.bitwise_right_shift(keys, shift)
        keys = torch.add(keys, s, alpha=-self.alpha, out=scratch)
        return torch.bitwise_xor(keys, s, out=into)


#: (float dtype, "MIN" or "MAX"): its keys
_KEYS = {
    (dtype, op): _OrderKeys(narrow, wide, inf, op)
    for dtype, narrow, wide, inf in (
        (torch.float16, torch.int16, torch.int32, 0x7C00),
        (torch.bfloat16, torch.int16, torch.int32, 0x7F80),
        (torch.float32, torch.int32, torch.int32, 0x7F800000),
        (torch.float64, torch.int64, torch.int64, 0x7FF0000000000000),
    )
    for op in ("MIN", "MAX")
}


def ordered_carrier(
    tensor: torch.Tensor, op: str, in_place: bool = False
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """For MIN or MAX of a float tensor: integer keys whose MIN / MAX is the floats' IEEE
    minimum / maximum, and the function that turns the reduced keys back into floats (see
    ``_OrderKeys``).

    ``in_place`` (an all-reduce, whose reduced keys have ``tensor``'s shape): the keys are
    made in ``tensor``'s own memory (a float32 or float64 one; 16-bit floats get a new int32
    tensor), and the function writes the floats back into ``tensor`` and returns it, so an
    in-place all-reduce copies nothing; it overwrites the reduced keys it is given. Called on
    the keys before they are reduced, it puts ``tensor`` back (a NaN may come back with
    another sign or payload). Otherwise neither ``tensor`` nor the reduced keys are written
    to (as torch.compile wants), and the reduced keys may have any shape (a fold's row, a
    reduce-scatter's chunk). Off the CPU and CUDA (XLA) the keys are a CPU copy's, and the
    floats come back as a new tensor either way.
    """
    if tensor.device.type not in ("cpu", "cuda"):
        # XLA: the keys stay on the CPU (XLA lowers int32's extremes through a float, and may
        # keep int64 as int32); the backend moves them where it reduces them exactly
        keys, from_keys = ordered_carrier(tensor.cpu(), op, in_place)
        device = tensor.device
        return keys, lambda out: from_keys(out.cpu()).to(device)
    dtype, order = tensor.dtype, _KEYS[(tensor.dtype, op)]
    narrow, wide = order.narrow, order.wide
    bits = tensor.view(narrow)
    if not in_place:
        keys = order.encode(bits if wide is narrow else bits.to(wide), None)

        def back(out: torch.Tensor) -> torch.Tensor:
            got = order.decode(out, None, None)
            return (got if wide is narrow else got.to(narrow)).view(dtype)

        return keys, back
    if wide is narrow:
        keys = order.encode(bits, bits)

        def back_into(out: torch.Tensor) -> torch.Tensor:
            order.decode(out, out, bits)
            return tensor

        return keys, back_into
    keys = torch.empty(tensor.shape, dtype=wide, device=tensor.device)
    keys.copy_(bits)  # sign-extended: the formulas' constants are for the wider integer
    keys = order.encode(keys, keys)

    def back_narrowed(out: torch.Tensor) -> torch.Tensor:
        bits.copy_(order.decode(out, out, out))
        return tensor

    return keys, back_narrowed


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
