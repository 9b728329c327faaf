"""Picklable payloads drawn by hypothesis, and a deep, byte-exact comparison of two of them.

A payload is what a user sends through an object collective: nested dicts, lists and tuples
of CPU tensors of every dtype and layout (non-contiguous, offset views, conjugate views,
tensors that require grad, 0-d, empty), numpy arrays of every dtype and layout (C and
Fortran order, transposed, strided, offset views, 0-d, empty, structured and object
dtypes), numpy scalars, and plain Python values. The values of tensors and arrays are
drawn as raw bytes, so NaNs with any payload, -0.0, subnormals and infinities all occur.

``difference(expected, got)`` is "" when ``got`` is the same object as ``expected`` in
every observable way a user relies on: same types, dtypes, shapes, ``requires_grad``,
values byte for byte (strides aside), and writable arrays and tensors where ``expected``'s
are writable.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

__all__ = ["PAYLOADS", "difference", "pickle_round_trip"]

TENSOR_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.bool,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
)
ARRAY_DTYPES = tuple(
    np.dtype(d)
    for d in (
        "f2", "f4", "f8", "c8", "c16", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "?",
        ">i4", ">f8", "M8[s]", "m8[ms]", "U3", "S2", "V3", np.longdouble,
        [("a", "<i4"), ("b", "f8", (2,))],
    )
)  # fmt: skip
_SHAPES = st.lists(st.integers(0, 4), min_size=0, max_size=3)


#: Tensor dtypes torch itself cannot unpickle (torch 2.13: "UntypedStorage has no attribute
#: dtype"); the reference sends their bytes, dtype and shape instead.
_UNPICKLABLE_BY_TORCH = (
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
)


def _from_raw(data: bytes, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0)
    return flat.to(torch.uint8).view(dtype).reshape(shape)


class _ReferencePickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and obj.dtype in _UNPICKLABLE_BY_TORCH:
            return _from_raw, (_tensor_bytes(obj), obj.dtype, tuple(obj.shape))
        return NotImplemented


def pickle_round_trip(obj: Any) -> Any:
    """The reference every object collective must match: what pickle itself rebuilds
    (protocol 5, in band), with torch's own unpickling bug for uint16/32/64 worked around."""
    stream = io.BytesIO()
    _ReferencePickler(stream, protocol=5).dump(obj)
    return pickle.loads(stream.getvalue())


# ---- strategies -------------------------------------------------------------------------------


def _raw(draw: st.DrawFn, count: int, itemsize: int) -> bytes:
    return draw(st.binary(min_size=count * itemsize, max_size=count * itemsize))


@st.composite
def _base_tensor(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(st.sampled_from(TENSOR_DTYPES))
    shape = draw(_SHAPES)
    count = math.prod(shape)
    data = bytearray(_raw(draw, count, dtype.itemsize))
    if dtype == torch.bool:  # only 0 and 1 are valid bools
        data = bytearray(b % 2 for b in data)
    flat = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(shape).clone()


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    """A CPU tensor of any dtype, in one of the layouts a user meets."""
    base = draw(_base_tensor())
    layout = draw(
        st.sampled_from(["plain", "transposed", "offset", "stepped", "expanded", "grad", "conj"])
    )
    if layout == "transposed" and base.dim() >= 2:
        return base.transpose(0, base.dim() - 1)
    if layout == "offset" and base.dim() >= 1 and base.shape[0] > 1:
        return base[1:]
    if layout == "stepped" and base.dim() >= 1:
        return base[::2]
    if layout == "expanded" and base.dim() == 1 and base.shape[0] == 1:
        return base.expand(3)  # stride 0
    differentiable = base.dtype.is_floating_point or base.dtype.is_complex
    if layout == "grad" and differentiable and base.dtype.itemsize > 1:  # float8: no autograd
        return base.detach().requires_grad_(True)
    if layout == "conj" and base.dtype.is_complex:
        return base.conj()
    return base


@st.composite
def arrays(draw: st.DrawFn) -> np.ndarray[Any, Any]:
    """A numpy array of any dtype (object and structured too), in any layout."""
    kind = draw(st.sampled_from(["bytes", "bytes", "bytes", "object"]))
    shape = draw(_SHAPES)
    count = math.prod(shape)
    if kind == "object":
        items = draw(st.lists(_scalars, min_size=count, max_size=count))
        base = np.empty(count, dtype=object)
        base[:] = items if items else []
        base = base.reshape(shape)
    else:
        dtype = draw(st.sampled_from(ARRAY_DTYPES))
        data = bytearray(_raw(draw, count, dtype.itemsize))
        if dtype == np.bool_:
            data = bytearray(b % 2 for b in data)
        base = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    layout = draw(st.sampled_from(["C", "fortran", "transposed", "offset", "stepped", "readonly"]))
    if layout == "fortran":
        return np.asfortranarray(base)
    if layout == "transposed":
        return base.T
    if layout == "offset" and base.ndim >= 1 and base.shape[0] > 1:
        return base[1:]
    if layout == "stepped" and base.ndim >= 1:
        return base[::2]
    if layout == "readonly":
        base.flags.writeable = False
    return base


_NUMPY_SCALARS = st.one_of(
    st.builds(np.float32, st.floats(width=32)),
    st.builds(np.float64, st.floats()),
    st.builds(np.int8, st.integers(-128, 127)),
    st.builds(np.uint64, st.integers(0, 2**64 - 1)),
    st.builds(np.bool_, st.booleans()),
    st.builds(np.complex64, st.complex_numbers(width=64)),
    st.builds(np.datetime64, st.integers(-(2**40), 2**40), st.just("s")),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.complex_numbers(),
    st.text(max_size=8),
    st.binary(max_size=8),
    _NUMPY_SCALARS,
)

#: An evaluation record, as users gather them: a tensor before an array, which once mixed up
#: their bytes.
_RECORDS = st.fixed_dictionaries(
    {"idx": st.integers(0, 10**6), "score": tensors(), "pred": arrays()}
)

#: Anything a user sends through an object collective.
PAYLOADS: st.SearchStrategy[Any] = st.recursive(
    st.one_of(_scalars, tensors(), arrays(), _RECORDS),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(-3, 3)), inner, max_size=4),
    ),
    max_leaves=8,
)


# ---- comparison -------------------------------------------------------------------------------


def _tensor_bytes(t: torch.Tensor) -> bytes:
    flat = t.detach().resolve_conj().resolve_neg().reshape(-1)
    flat = flat.clone(memory_format=torch.contiguous_format)  # stride 1 even for one element
    return bytes(flat.view(torch.uint8).numpy())


def _tensor_difference(expected: torch.Tensor, got: torch.Tensor, where: str) -> str:
    described = [
        (t.dtype, tuple(t.shape), t.device, t.requires_grad, t.is_leaf) for t in (expected, got)
    ]
    if described[0] != described[1]:
        return f"{where}: tensor {described[1]} instead of {described[0]}"
    if _tensor_bytes(expected) != _tensor_bytes(got):
        return f"{where}: tensor values {got!r} instead of {expected!r}"
    if not got.requires_grad:
        try:  # writable, as a tensor pickle rebuilds is: an in-place write must work
            got.copy_(got.clone())  # the same bits: the result stays comparable
        except RuntimeError as err:
            return f"{where}: the tensor cannot be changed in place: {err}"
    return ""


def _array_difference(expected: np.ndarray[Any, Any], got: np.ndarray[Any, Any], where: str) -> str:
    if (expected.dtype, expected.shape) != (got.dtype, got.shape):
        return f"{where}: array {got.dtype}{got.shape} instead of {expected.dtype}{expected.shape}"
    if expected.flags.writeable and not got.flags.writeable:
        return f"{where}: the array is read-only; pickle's copy is writable"
    if expected.dtype.hasobject:
        for index in np.ndindex(expected.shape):
            found = difference(expected[index], got[index], f"{where}[{index}]")
            if found:
                return found
        return ""
    if np.ascontiguousarray(expected).tobytes() != np.ascontiguousarray(got).tobytes():
        return f"{where}: array values {got!r} instead of {expected!r}"
    return ""


def difference(expected: Any, got: Any, where: str = "obj") -> str:
    """'' when ``got`` equals ``expected`` exactly (see the module docstring), else where and
    how they first differ."""
    if type(expected) is not type(got):
        return f"{where}: {type(got).__name__} {got!r} instead of {type(expected).__name__}"
    if isinstance(expected, torch.Tensor):
        return _tensor_difference(expected, got, where)
    if isinstance(expected, np.ndarray):
        return _array_difference(expected, got, where)
    if isinstance(expected, np.generic):
        same = expected.dtype == got.dtype and expected.tobytes() == got.tobytes()
        return "" if same else f"{where}: {got!r} instead of {expected!r}"
    if isinstance(expected, float):
        same = struct.pack("<d", expected) == struct.pack("<d", got)
        return "" if same else f"{where}: {got!r} instead of {expected!r}"
    if isinstance(expected, complex):
        same = struct.pack("<dd", expected.real, expected.imag) == struct.pack(
            "<dd", got.real, got.imag
        )
        return "" if same else f"{where}: {got!r} instead of {expected!r}"
    if isinstance(expected, (list, tuple)):
        if len(expected) != len(got):
            return f"{where}: {len(got)} items instead of {len(expected)}"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            found = difference(e, g, f"{where}[{i}]")
            if found:
                return found
        return ""
    if isinstance(expected, dict):
        if list(expected) != list(got):
            return f"{where}: keys {list(got)!r} instead of {list(expected)!r}"
        for key in expected:
            found = difference(expected[key], got[key], f"{where}[{key!r}]")
            if found:
                return found
        return ""
    return "" if expected == got else f"{where}: {got!r} instead of {expected!r}"
