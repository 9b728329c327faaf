"""The order keys of float MIN / MAX (``algorithms/carriers.py``, ``_OrderKeys``), checked
against IEEE 754-2019's minimum / maximum written out here: a NaN wins, -0.0 is below +0.0.

- float16 and bfloat16: all 65536 bit patterns. Sorted by their keys they are the floats'
  total order (-0.0 just below +0.0) with every NaN at the end that wins, the numbers' keys
  are distinct, and every pattern comes back (a number bit for bit, a NaN as a NaN); random
  pairs reduced through their keys give the reference's answer.
- float32 and float64: every pair of special values (signed zeros and infinities, NaNs of
  both signs and several payloads, subnormals, the extreme finite values), and hypothesis's
  bit patterns and floats.
- both forms: the functional one (torch.compile, the fold, reduce / reduce_scatter) and the
  in-place one of the eager all-reduce, which makes the keys in the caller's tensor.
"""

from __future__ import annotations

import math
import struct

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import distbridge as idist
from distbridge import _state
from distbridge.algorithms.carriers import ORDERED_FLOATS, ordered_carrier

INTS = {torch.float16: torch.int16, torch.bfloat16: torch.int16}
INTS.update({torch.float32: torch.int32, torch.float64: torch.int64})
assert set(INTS) == ORDERED_FLOATS
OPS = ("MIN", "MAX")


def reduce_by_keys(op: str, rows: torch.Tensor, in_place: bool) -> torch.Tensor:
    """``rows`` (one per rank) reduced with ``op`` through their keys, as a backend would."""
    made = [ordered_carrier(row.clone(), op, in_place) for row in rows]
    keys = torch.stack([k for k, _ in made])
    reduced = keys.amin(0) if op == "MIN" else keys.amax(0)
    return made[0][1](reduced)


def ieee(op: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IEEE 754-2019 minimum / maximum of ``a`` and ``b``, element-wise: written out, since
    torch.minimum / torch.maximum may answer either zero for -0.0 and +0.0."""
    if op == "MIN":
        picked = torch.where(a < b, a, b)
        negative_zero = torch.signbit(a) | torch.signbit(b)
    else:
        picked = torch.where(a > b, a, b)
        negative_zero = torch.signbit(a) & torch.signbit(b)
    zeros = (a == 0) & (b == 0)
    picked = torch.where(zeros, torch.where(negative_zero, -0.0, 0.0).to(a.dtype), picked)
    return torch.where(torch.isnan(a) | torch.isnan(b), torch.full_like(a, math.nan), picked)


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """NaN where ``want`` is NaN (any sign or payload), else the same bits."""
    ints = INTS[want.dtype]
    nan = torch.isnan(want)
    return torch.equal(torch.isnan(got), nan) and torch.equal(
        got.view(ints)[~nan], want.view(ints)[~nan]
    )


# ---- 16-bit floats: every bit pattern -----------------------------------------------------


def every_pattern(dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_16_bit_pattern_orders_and_comes_back(
    dtype: torch.dtype, op: str, in_place: bool
) -> None:
    x = every_pattern(dtype)
    keys, back = ordered_carrier(x.clone(), op, in_place)
    assert keys.dtype is torch.int32  # gloo and NCCL have no int16
    nan = torch.isnan(x)
    # sorted by key: the numbers in their total order, then (MAX) or before them (MIN) NaNs
    order = torch.argsort(keys.long())
    by_key = x[order]
    n_nan, n_numbers = int(nan.sum()), int((~nan).sum())
    if op == "MAX":
        numbers, nans = by_key.split([n_numbers, n_nan])
    else:
        nans, numbers = by_key.split([n_nan, n_numbers])
    assert torch.isnan(nans).all() and not torch.isnan(numbers).any()
    lo, hi = numbers[:-1].double(), numbers[1:].double()
    negative_then_positive_zero = (lo == 0) & (hi == 0) & torch.signbit(lo) & ~torch.signbit(hi)
    assert ((lo < hi) | negative_then_positive_zero).all()
    assert int(numbers.double().eq(0).sum()) == 2  # -0.0 and +0.0, both kept apart
    # keys distinct for numbers, and the way back
    assert torch.unique(keys[~nan]).numel() == n_numbers
    got = back(keys.clone())  # in place: it writes the floats over the keys' memory
    assert same(got, x) and torch.isnan(got[nan]).all()


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_random_16_bit_pairs_reduce_as_ieee(dtype: torch.dtype, op: str, in_place: bool) -> None:
    gen = torch.Generator().manual_seed(36)
    x = every_pattern(dtype)
    a, b = (x[torch.randint(0, x.numel(), (1 << 17,), generator=gen)] for _ in range(2))
    got = reduce_by_keys(op, torch.stack([a, b]), in_place)
    assert got.dtype is dtype
    assert same(got, ieee(op, a, b))


# ---- float32 and float64: special values and hypothesis ------------------------------------


def _special_bits(dtype: torch.dtype) -> list[int]:
    """Bit patterns: signed zeros, infinities, NaNs of both signs with several payloads, the
    smallest and largest subnormals, the smallest normal, the largest finite value."""
    v = torch.iinfo(INTS[dtype]).bits
    mantissa = {torch.float32: 23, torch.float64: 52}[dtype]
    inf = ((1 << (v - 1 - mantissa)) - 1) << mantissa
    quiet = 1 << (mantissa - 1)
    positive = [
        0,
        1,
        (1 << mantissa) - 1,
        1 << mantissa,
        inf - 1,
        inf,
        inf | quiet,
        inf | 1,
        inf | quiet | 5,
        (1 << (v - 1)) - 1,
        0x3F800000 if v == 32 else 0x3FF0000000000000,  # 1.0
    ]
    sign = 1 << (v - 1)
    signed = positive + [b | sign for b in positive]
    return [b - (1 << v) if b >= sign else b for b in signed]  # as signed integers


def _from_bits(dtype: torch.dtype, bits: list[int]) -> torch.Tensor:
    return torch.tensor(bits, dtype=INTS[dtype]).view(dtype)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_pair_of_special_values(dtype: torch.dtype, op: str, in_place: bool) -> None:
    specials = _from_bits(dtype, _special_bits(dtype))
    n = specials.numel()
    a, b = specials.repeat_interleave(n), specials.repeat(n)
    assert same(reduce_by_keys(op, torch.stack([a, b]), in_place), ieee(op, a, b))
    keys, back = ordered_carrier(specials.clone(), op, in_place)
    assert keys.dtype is INTS[dtype]
    assert same(back(keys), specials)


def _values(dtype: torch.dtype) -> st.SearchStrategy[torch.Tensor]:
    """Any bit pattern of ``dtype`` (every NaN payload and sign), or hypothesis's floats of
    its width (subnormals, infinities, signed zeros, NaN), or a special value."""
    v = torch.iinfo(INTS[dtype]).bits
    raw = st.integers(-(2 ** (v - 1)), 2 ** (v - 1) - 1).map(lambda b: _from_bits(dtype, [b]))
    floats = st.floats(width=v).map(lambda f: torch.tensor([f], dtype=dtype))
    special = st.sampled_from(_special_bits(dtype)).map(lambda b: _from_bits(dtype, [b]))
    return st.one_of(raw, floats, special)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@given(data=st.data())
def test_drawn_values_reduce_as_ieee_and_come_back(
    dtype: torch.dtype, op: str, in_place: bool, data: st.DataObject
) -> None:
    ranks = data.draw(st.lists(_values(dtype), min_size=1, max_size=4), label="ranks")
    rows = torch.cat(ranks).view(-1, 1)
    want = rows[0]
    for row in rows[1:]:
        want = ieee(op, want, row)
    assert same(reduce_by_keys(op, rows, in_place), want), rows
    keys, back = ordered_carrier(rows.clone(), op, in_place)
    assert same(back(keys), rows)


def test_struct_agrees_on_the_special_bits() -> None:
    """The special patterns are what they say: -0.0, +inf, a negative quiet NaN."""
    bits = _special_bits(torch.float64)
    as_float = [struct.unpack("<d", struct.pack("<q", b))[0] for b in bits]
    assert math.copysign(1.0, as_float[len(bits) // 2]) == -1.0 and as_float[0] == 0.0
    assert as_float[5] == math.inf and math.isnan(as_float[6 + len(bits) // 2])


# ---- the two forms ------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", sorted(INTS, key=str))
def test_functional_form_writes_nothing_it_is_given(dtype: torch.dtype, op: str) -> None:
    x = _from_bits(torch.float32, [0, -(2**31), 0x7FC00000, 1]).to(dtype)
    before = x.clone()
    keys, back = ordered_carrier(x, op)
    reduced = keys.clone()
    got = back(reduced)
    assert torch.equal(x.view(torch.uint8), before.view(torch.uint8))
    assert torch.equal(reduced, keys) and got is not x
    assert same(got, x)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", sorted(INTS, key=str))
def test_in_place_form_uses_the_tensor_itself(dtype: torch.dtype, op: str) -> None:
    x = torch.tensor([1.5, -0.0, 0.0, -math.inf, math.nan], dtype=dtype)
    want = x.clone()
    keys, back = ordered_carrier(x, op, in_place=True)
    if INTS[dtype] is not torch.int16:
        assert keys.data_ptr() == x.data_ptr()  # no copy: the keys are x's bits
    assert back(keys) is x
    assert same(x, want)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", sorted(INTS, key=str))
def test_all_reduce_in_place_of_odd_tensors(
    serial_model: None, dtype: torch.dtype, op: str
) -> None:
    """A world of one gives back every number bit for bit, in the caller's tensor, 0-d and
    non-contiguous ones too."""
    for x in (
        torch.tensor(-0.0, dtype=dtype),
        torch.tensor([[1.0, -2.0], [math.inf, -0.0]], dtype=dtype).t(),
        torch.tensor([math.nan, 3.0], dtype=dtype),
    ):
        want = x.clone()
        assert idist.all_reduce(x, op) is x
        assert same(x.contiguous(), want.contiguous())


def test_a_failed_reduction_leaves_the_tensor_as_it_was(
    serial_model: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys are made in the caller's tensor: a collective that raises puts it back."""
    model = _state.current()

    def refuse(tensor: torch.Tensor, op: str, group: object) -> torch.Tensor:
        raise RuntimeError("the engine refused")

    monkeypatch.setattr(model, "_do_all_reduce", refuse)
    x = torch.tensor([1.5, -0.0, -math.inf, 2.0**-140], dtype=torch.float32)
    h = torch.tensor([1.5, -0.0, -math.inf], dtype=torch.bfloat16)
    for t in (x, h):
        want = t.clone()
        for op in OPS:
            with pytest.raises(RuntimeError, match="refused"):
                idist.all_reduce(t, op)
            assert same(t, want)
