"""Different numbers of dims on different ranks, in one process: the shape rows, the flat
padding every model's gather / scatter / all_gather_tensors_with_shapes share, the debug
mode's fingerprints, and the serial model's answers. The multi-rank answers are checked on
gloo ranks in ``tests/distributed/test_ndims_gloo.py``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import distbridge as idist
from distbridge.algorithms import reduce_gather_scatter as extra
from distbridge.algorithms import shape_rows
from distbridge.reliability.debug import Fingerprint, describe

DTYPES = [
    d
    for d in (
        torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
        torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool,
        getattr(torch, "uint16", None), getattr(torch, "uint64", None),
    )
    if d is not None
]  # fmt: skip
SHAPES = st.lists(st.integers(0, 3), max_size=3).map(tuple)  # 0 to 3 dims


def _tensor(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random bytes in ``shape`` (NaN payloads and -0.0 included)."""
    width = torch.empty((), dtype=dtype).element_size()
    generator = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (math.prod(shape) * width,), dtype=torch.uint8, generator=generator)
    if dtype == torch.bool:
        raw &= 1
    return raw.view(dtype).reshape(shape)


def _exact(got: Any, want: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads too)."""
    if not isinstance(got, torch.Tensor) or (got.dtype, got.shape) != (want.dtype, want.shape):
        return False
    as_bytes = [t.new_empty(t.shape).copy_(t).reshape(-1).view(torch.uint8) for t in (got, want)]
    return torch.equal(*as_bytes)


def _table(tensors: list[torch.Tensor]) -> np.ndarray[Any, Any]:
    """The rows of ``tensors`` as the exchange gives them: one row per rank."""
    return np.array([shape_rows.row(t) for t in tensors]).reshape(len(tensors), 1, -1)


# ---- shape rows -------------------------------------------------------------------------------


def test_decode_keeps_every_rows_own_number_of_dims() -> None:
    tensors = [torch.zeros(()), torch.zeros(2, 3, 4), torch.zeros(0), torch.zeros((1,) * 8)]
    dtype, shapes = shape_rows.decode(_table(tensors))
    assert dtype == torch.float32
    assert shapes == [(), (2, 3, 4), (0,), (1,) * 8]


@given(st.lists(SHAPES, min_size=1, max_size=5), st.sampled_from(DTYPES))
def test_decode_gives_back_every_shape(shapes: list[tuple[int, ...]], dtype: torch.dtype) -> None:
    got_dtype, got = shape_rows.decode(_table([torch.zeros(s, dtype=dtype) for s in shapes]))
    assert (got_dtype, got) == (dtype, shapes)


def test_decode_still_refuses_what_cannot_be_sent_together() -> None:
    with pytest.raises(TypeError, match=r"same dtype; got torch.float32, torch.int64"):
        shape_rows.decode(_table([torch.zeros(()), torch.zeros(2, 3, dtype=torch.int64)]))
    bad = np.array([shape_rows.row(torch.zeros(2)), shape_rows.row("not a tensor")])
    with pytest.raises(TypeError, match="cannot be sent"):
        shape_rows.decode(bad)
    wrong = np.array([shape_rows.row(torch.zeros(2)), [shape_rows.WRONG] * shape_rows.WIDTH])
    with pytest.raises(ValueError, match="do not fit"):
        shape_rows.decode(wrong)


def test_a_row_holds_up_to_max_dims() -> None:
    assert shape_rows.row(torch.zeros(()))[1:] == [0] * (shape_rows.WIDTH - 1)
    assert shape_rows.row(torch.zeros((2,) * 8))[1:] == [8, *[2] * 8]
    assert shape_rows.row(torch.zeros((1,) * 9)) == [shape_rows.BAD] * shape_rows.WIDTH
    assert "9 dimensions; at most 8" in shape_rows.why_bad(torch.zeros((1,) * 9), "x")


# ---- the flat padding -------------------------------------------------------------------------


@given(st.lists(SHAPES, min_size=1, max_size=4), st.sampled_from(DTYPES), st.booleans())
def test_every_shape_comes_back_from_the_flat_padding(
    shapes: list[tuple[int, ...]], dtype: torch.dtype, strided: bool
) -> None:
    length = extra._longest(shapes)
    assert length == max(math.prod(s) for s in shapes)
    for i, shape in enumerate(shapes):
        t = _tensor(shape, dtype, seed=i)
        if strided:  # every other element of a longer buffer
            t = torch.stack([t, torch.zeros_like(t)], dim=-1)[..., 0]
        flat = extra._flat_padded(t, length)
        assert flat.shape == (length,) and flat.is_contiguous()
        assert not flat[t.numel() :].any(), "the padding must be zeros"
        assert _exact(extra._cut(flat, shape), t)


# ---- the serial model -------------------------------------------------------------------------


@settings(max_examples=60)
@given(SHAPES, st.sampled_from(DTYPES), st.integers(0, 2**31 - 1))
def test_serial_collectives_keep_any_number_of_dims(
    shape: tuple[int, ...], dtype: torch.dtype, seed: int
) -> None:
    x = _tensor(shape, dtype, seed)
    before = x.clone()
    (gathered,) = idist.gather(x)
    assert _exact(gathered, x)
    (vouched,) = idist.gather(x, same_shape=True)
    assert _exact(vouched, x)
    assert _exact(idist.scatter([x]), x)
    (exchanged,) = idist.all_to_all([x])
    assert _exact(exchanged, x)
    (with_shapes,) = idist.all_gather_tensors_with_shapes(x, [list(shape)])
    assert _exact(with_shapes, x)
    assert _exact(x, before), "a collective changed its input"


def test_all_gather_still_concatenates_along_dim_0() -> None:
    assert idist.all_gather(torch.tensor(3.0)).shape == (1,)  # a 0-dim tensor: one row
    assert idist.all_gather(torch.zeros(2, 3)).shape == (2, 3)


# ---- the debug mode ---------------------------------------------------------------------------


def _print(call: str, **args: Any) -> Fingerprint:
    fields, notes = describe(call, args, lambda op: str(op).upper())
    return Fingerprint(call, fields, notes, (0, 1), "here.py:1 in f")


@pytest.mark.parametrize(
    ("call", "a", "b"),
    [
        ("gather", {"x": torch.zeros(()), "dst": 0}, {"x": torch.zeros(2, 3, 4), "dst": 0}),
        ("all_gather_tensors_with_shapes", {"x": torch.zeros(()), "shapes": [[], [2, 3]]},
         {"x": torch.zeros(2, 3), "shapes": [[], [2, 3]]}),
        ("all_to_all", {"x": [torch.zeros(()), torch.zeros(1, 2)]},
         {"x": [torch.zeros(3, 1, 1), torch.zeros(4)]}),
        ("scatter", {"x": [torch.zeros(()), torch.zeros(2, 2)], "src": 0}, {"x": None, "src": 0}),
    ],
)  # fmt: skip
def test_the_debug_mode_lets_the_number_of_dims_differ(
    call: str, a: dict[str, Any], b: dict[str, Any]
) -> None:
    assert _print(call, **a).agrees_with(_print(call, **b))


@pytest.mark.parametrize(
    ("call", "a", "b"),
    [
        ("all_gather", {"x": torch.zeros(())}, {"x": torch.zeros(2, 3, 4)}),  # no concatenation
        ("gather", {"x": torch.zeros(()), "dst": 0, "same_shape": True},
         {"x": torch.zeros(1), "dst": 0, "same_shape": True}),  # the caller vouched for one
        ("gather", {"x": torch.zeros(()), "dst": 0},
         {"x": torch.zeros(2, dtype=torch.int64), "dst": 0}),  # dtypes still must match
    ],
)  # fmt: skip
def test_the_debug_mode_still_compares_what_must_match(
    call: str, a: dict[str, Any], b: dict[str, Any]
) -> None:
    first, second = _print(call, **a), _print(call, **b)
    assert not first.agrees_with(second)
    if call == "all_gather":  # the report names both shapes
        assert "shape=[]" in first.text() and "shape=[2, 3, 4]" in second.text()
