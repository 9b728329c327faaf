"""How Python values travel through tensor collectives: op names, kinds, numbers, dtypes.

Numbers travel as 64-bit patterns next to a kind code, so a received value comes
back with the sender's exact type and value (ints stay ints, floats are float64).
Strings travel as UTF-8 bytes. Dtypes travel as an index into a fixed table:
nothing received is ever evaluated.
"""

from __future__ import annotations

import numbers
import struct
from pathlib import Path, PurePath
from typing import Any

import torch

from distbridge.errors import suggest

__all__ = [
    "CANONICAL_OPS",
    "KIND_BOOL",
    "KIND_FLOAT",
    "KIND_INT",
    "KIND_NAMES",
    "KIND_OBJECT",
    "KIND_PATH",
    "KIND_STR",
    "KIND_TENSOR",
    "NUMBER_KINDS",
    "can_send",
    "canonical_op",
    "decode_number",
    "decode_text",
    "dtype_code",
    "dtype_from_code",
    "encode_number",
    "kind_of",
    "op_spellings",
]

CANONICAL_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AND", "OR", "AVG", "ADASUM")
_OP_ALIASES = {"AVERAGE": "AVG", "MEAN": "AVG", "PROD": "PRODUCT", "BAND": "AND", "BOR": "OR"}

#: kind code -> name: the codes count from 1 in this order (0 is no kind)
KIND_NAMES = dict(enumerate(("int", "float", "bool", "str", "Path", "object", "tensor"), start=1))
KIND_INT, KIND_FLOAT, KIND_BOOL, KIND_STR, KIND_PATH, KIND_OBJECT, KIND_TENSOR = KIND_NAMES
NUMBER_KINDS = frozenset((KIND_INT, KIND_FLOAT, KIND_BOOL))

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
    torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64,
)  # fmt: skip
_DTYPE_CODES = {d: i for i, d in enumerate(_DTYPES)}


def op_spellings(supported: frozenset[str]) -> dict[str, str]:
    """The usual spellings of the ops in ``supported`` (upper, lower and capitalized, and
    their aliases) -> the canonical name `canonical_op` gives them."""
    names = {alias: name for alias, name in _OP_ALIASES.items() if name in supported}
    names.update((name, name) for name in supported)
    return {
        form: name
        for spelled, name in names.items()
        for form in (spelled, spelled.lower(), spelled.capitalize())
    }


def canonical_op(op: object, supported: frozenset[str], model_name: str) -> str:
    """Return the upper-case name of reduction ``op``; ValueError naming the allowed ones."""
    if not isinstance(op, str):
        raise TypeError(f"op must be a str such as 'SUM', got {op!r}.")
    name = op.upper()
    name = _OP_ALIASES.get(name, name)
    if name not in supported:
        allowed = [o for o in CANONICAL_OPS if o in supported]
        where = "" if name not in CANONICAL_OPS else f" on the {model_name} model"
        raise ValueError(
            f"Unsupported reduction operation {op!r}{where}. Supported: {', '.join(allowed)}."
            + suggest(name, allowed)
        )
    return name


def kind_of(value: object) -> int:
    """The kind code of a non-tensor value (int, float, bool, str, Path or any other object)."""
    if isinstance(value, bool) or _is_numpy_bool(value):  # first: bools are Integral too
        return KIND_BOOL
    if isinstance(value, numbers.Integral):
        return KIND_INT
    if isinstance(value, numbers.Real):
        return KIND_FLOAT
    if isinstance(value, str):
        return KIND_STR
    if isinstance(value, PurePath):
        return KIND_PATH
    return KIND_OBJECT


def _is_numpy_bool(value: object) -> bool:
    """``numpy.bool_`` (and 0-d bool arrays), recognised without importing numpy."""
    dtype = getattr(value, "dtype", None)
    return getattr(dtype, "kind", None) == "b" and getattr(value, "ndim", None) == 0


def encode_number(value: Any, kind: int) -> int:
    """The 64-bit pattern of a number, as a signed int; ValueError when an int does not fit."""
    if kind == KIND_FLOAT:
        return int(struct.unpack("<q", struct.pack("<d", float(value)))[0])
    as_int = int(value)
    if not _INT64_MIN <= as_int <= _INT64_MAX:
        raise ValueError(
            f"Integer {value!r} does not fit in 64 bits; send it as a str or an object instead."
        )
    return as_int


def decode_number(bits: int, kind: int) -> int | float | bool:
    """The number whose 64-bit pattern is ``bits``; inverse of `encode_number`."""
    if kind == KIND_FLOAT:
        return float(struct.unpack("<d", struct.pack("<q", bits))[0])
    if kind == KIND_BOOL:
        return bool(bits)
    return bits


def decode_text(payload: bytes, kind: int) -> str | PurePath:
    """A received str or Path (always a concrete ``pathlib.Path`` here) from its UTF-8 bytes."""
    text = payload.decode("utf-8")
    return text if kind == KIND_STR else Path(text)


def dtype_code(dtype: torch.dtype) -> int:
    """The index of ``dtype`` in the table both sides share; TypeError for dtypes it lacks."""
    try:
        return _DTYPE_CODES[dtype]
    except KeyError:
        raise TypeError(
            f"Cannot send a tensor of dtype {dtype} with safe_mode=True; supported dtypes: "
            f"{', '.join(str(d) for d in _DTYPES)}. Broadcast it with safe_mode=False."
        ) from None


def can_send(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` is in the table both sides share (see ``dtype_code``)."""
    return dtype in _DTYPE_CODES


def dtype_from_code(code: int) -> torch.dtype:
    """The dtype at ``code``; ValueError when the code is not in the table."""
    if not 0 <= code < len(_DTYPES):
        raise ValueError(
            f"Received dtype code {code}, which is not in this side's table of "
            f"{len(_DTYPES)} dtypes: are all ranks running the same distbridge version?"
        )
    return _DTYPES[code]
