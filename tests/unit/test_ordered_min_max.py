"""Float MIN / MAX are IEEE 754-2019's minimum / maximum on every backend: a NaN wins and
-0.0 is below 0.0. ``algorithms/carriers.ordered_carrier`` turns floats into integer keys
whose MIN / MAX, turned back, is that answer; hypothesis draws floats of every width (NaN
with any sign and payload, infinities, signed zeros, subnormals) and compares with numpy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import distbridge as idist
from distbridge.algorithms.carriers import ORDERED_FLOATS, ordered_carrier
from tests.differential.tensor_reference import ieee_min_max

WIDTHS = {torch.float16: 16, torch.bfloat16: 16, torch.float32: 32, torch.float64: 64}
assert set(WIDTHS) == ORDERED_FLOATS


def _floats_of(dtype: torch.dtype) -> st.SearchStrategy[torch.Tensor]:
    """Any bit pattern of ``dtype`` (so every NaN payload and sign), or a special value."""
    bits = WIDTHS[dtype]
    raw = st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    special = st.sampled_from([math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0])
    ints = {16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]
    return st.one_of(
        raw.map(lambda b: torch.tensor([b], dtype=ints).view(dtype)),
        special.map(lambda v: torch.tensor([v], dtype=dtype)),
    )


def _same(got: torch.Tensor, want: np.ndarray) -> bool:
    g, w = got.double().numpy(), want
    if np.isnan(w).any() or np.isnan(g).any():
        return bool(np.isnan(g).all() and np.isnan(w).all())
    return bool((g == w).all() and (np.signbit(g) == np.signbit(w)).all())


@pytest.mark.parametrize("op", ["MIN", "MAX"])
@pytest.mark.parametrize("dtype", sorted(WIDTHS, key=str))
@given(data=st.data())
def test_keys_reduce_as_ieee_minimum_and_maximum(
    dtype: torch.dtype, op: str, data: st.DataObject
) -> None:
    ranks = data.draw(st.lists(_floats_of(dtype), min_size=1, max_size=5), label="ranks")
    keys = [ordered_carrier(x, op) for x in ranks]
    stacked = torch.stack([k for k, _ in keys])
    reduced = stacked.amin(0) if op == "MIN" else stacked.amax(0)
    got = keys[0][1](reduced)
    assert got.dtype == dtype
    want = ranks[0].double().numpy()
    for x in ranks[1:]:
        want = ieee_min_max(op, want, x.double().numpy())
    assert _same(got, want), (ranks, got)


@pytest.mark.parametrize("op", ["MIN", "MAX"])
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_a_float_number_in_a_world_of_one_comes_back(op: str, value: float) -> None:
    got = idist.all_reduce(value, op=op)
    assert type(got) is float
    assert (math.isnan(got) and math.isnan(value)) or (
        got == value and math.copysign(1, got) == math.copysign(1, value)
    )
