"""numpy scalars through the number collectives: each arrives as ``x.item()``, the Python
int, float or bool of its value, bit for bit (NaN and -0.0 included), on the serial model;
the same code runs on every model after the one local encoding. Differential against
numpy's own ``item()``; the ``*_object`` collectives keep the numpy type."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import distbridge as idist

_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
           np.float16, np.float32, np.float64]  # fmt: skip


@st.composite
def _scalars(draw: st.DrawFn) -> Any:
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    return draw(hnp.from_dtype(dtype)).astype(dtype)[()]


def _same(got: Any, want: Any) -> bool:
    if type(got) is not type(want):
        return False
    if isinstance(want, float):
        return struct.pack("<d", got) == struct.pack("<d", want) or (
            math.isnan(got) and math.isnan(want)
        )
    return bool(got == want)


@settings(max_examples=300, deadline=None, database=None)
@given(_scalars())
def test_a_numpy_scalar_arrives_as_its_item(value: Any) -> None:
    want = value.item()
    assert isinstance(value, np.generic)
    (gathered,) = idist.all_gather(value)
    assert _same(gathered, want), (value, gathered)
    assert _same(idist.broadcast(value, src=0), want)
    assert _same(idist.broadcast(value, src=0, safe_mode=True), want)
    reduced = idist.all_reduce(value, op="MAX")
    assert _same(reduced, want), (value, reduced)


@settings(max_examples=100, deadline=None, database=None)
@given(_scalars())
def test_the_object_collectives_keep_the_numpy_type(value: Any) -> None:
    (gathered,) = idist.all_gather_object(value)
    assert type(gathered) is type(value)
    assert gathered.tobytes() == value.tobytes()


def test_an_int_past_64_bits_names_the_way_out() -> None:
    with pytest.raises(ValueError, match="does not fit in 64 bits; send it as a str or an object"):
        idist.all_gather(np.uint64(2**64 - 1))
