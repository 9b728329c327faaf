"""algorithms/byte_view against a copy made element by element: the bytes of any tensor, and
the tensor back from them, bit for bit (every dtype, size-1 dims with any stride, size-0 dims,
storage offsets, 0-d, and layouts that are not contiguous)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distbridge.algorithms import byte_view
from distbridge.models.horovod import dtypes as hvd_dtypes

DTYPES = [
    d
    for d in (
        torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
        getattr(torch, "uint16", None), getattr(torch, "uint32", None),
        getattr(torch, "uint64", None), torch.float16, torch.bfloat16, torch.float32,
        torch.float64, torch.complex64, torch.complex128,
        getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None),
    )
    if d is not None
]  # fmt: skip


def reference_bytes(t: torch.Tensor) -> bytes:
    """``t``'s elements in order, as bytes: copied element by element into a fresh tensor."""
    fresh = torch.empty(tuple(t.shape), dtype=t.dtype)
    fresh.copy_(t)
    return bytes(fresh.untyped_storage())


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    """A tensor in a random buffer: contiguous for torch (size-1 and size-0 dims with any
    stride, any storage offset) or, sometimes, transposed or stepped."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 1, 2, 3]), max_size=4)))
    offset = draw(st.integers(0, 5))
    layout = draw(st.sampled_from(["dense", "dense", "transposed", "stepped"]))
    step = 2 if layout == "stepped" else 1
    strides, run = [], step
    for n in reversed(shape):
        strides.append(run if n > 1 else draw(st.integers(0, 50)))  # any stride when n <= 1
        run *= max(n, 1)
    strides.reverse()
    count = offset + step * max(math.prod(shape), 1) + 1
    seed = draw(st.integers(0, 2**31))
    gen = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:  # only 0 / 1 bytes are bools
        base = torch.randint(0, 2, (count,), generator=gen).to(torch.bool)
    else:
        raw = torch.randint(0, 256, (count * dtype.itemsize,), dtype=torch.uint8, generator=gen)
        base = raw.view(dtype)
    t = base.as_strided(shape, tuple(strides), offset)
    if layout == "transposed" and t.dim() >= 2:
        t = t.transpose(0, -1)
    return t


@settings(max_examples=400, deadline=None)
@given(tensors())
def test_bytes_out_are_the_elements_in_order(t: torch.Tensor) -> None:
    assert bytes(byte_view.as_bytes(t).numpy().tobytes()) == reference_bytes(t)


@settings(max_examples=400, deadline=None)
@given(tensors())
def test_bytes_back_are_the_same_tensor(t: torch.Tensor) -> None:
    back = byte_view.from_bytes(byte_view.as_bytes(t), t.dtype, tuple(t.shape))
    assert back.dtype == t.dtype and back.shape == t.shape
    assert reference_bytes(back) == reference_bytes(t)


@settings(max_examples=200, deadline=None)
@given(tensors())
def test_bytes_of_a_contiguous_tensor_are_a_view(t: torch.Tensor) -> None:
    """Writes into the bytes reach the tensor when it is contiguous (``as_bytes`` is a view)."""
    data = byte_view.as_bytes(t)
    if not t.is_contiguous() or not data.numel():
        return
    before = reference_bytes(t)
    data.bitwise_not_() if t.dtype is not torch.bool else data.zero_()
    after = reference_bytes(t)
    assert after == (
        bytes(0 for _ in before) if t.dtype is torch.bool else bytes(~b & 0xFF for b in before)
    )


@settings(max_examples=200, deadline=None)
@given(tensors(), st.integers(0, 7))
def test_bytes_at_any_offset_come_back(t: torch.Tensor, shift: int) -> None:
    """Bytes that start off an element boundary (a slice of a received buffer) are copied."""
    data = byte_view.as_bytes(t)
    buffer = torch.zeros(shift + data.numel(), dtype=torch.uint8)
    buffer[shift:] = data
    back = byte_view.from_bytes(buffer[shift:], t.dtype, tuple(t.shape))
    assert reference_bytes(back) == reference_bytes(t)


@settings(max_examples=200, deadline=None)
@given(tensors(), st.integers(1, 3))
def test_rows_of_bytes_count_rows(t: torch.Tensor, times: int) -> None:
    """Horovod's rows of bytes (``as_sent`` of a dtype it does not move)."""
    if t.dim() == 0:
        if t.dtype not in hvd_dtypes.MOVED:
            with pytest.raises(ValueError, match="0-d"):
                hvd_dtypes.as_sent(t)
        return
    rows = hvd_dtypes.as_sent(t)
    assert rows.shape[0] == t.shape[0]
    stacked = torch.cat([rows] * times)  # what a gather of ``times`` such tensors returns
    back = hvd_dtypes.as_received(stacked, t)
    assert reference_bytes(back) == reference_bytes(torch.cat([t] * times))


def test_a_wrong_number_of_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="needs 8"):
        byte_view.from_bytes(torch.zeros(6, dtype=torch.uint8), torch.float32, (2,))


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(4.0).to(torch.bfloat16)[::2][:1],  # shape (1,), stride (2,)
        lambda: torch.arange(8.0).to(torch.bfloat16).as_strided((1, 1, 1), (2, 2, 2)),
    ],
    ids=["bf16-1-stride-2", "bf16-1x1x1-strides-2"],
)
def test_issue_30_layouts(make) -> None:  # type: ignore[no-untyped-def]
    t = make()
    assert t.is_contiguous()
    assert reference_bytes(hvd_dtypes.as_received(hvd_dtypes.as_sent(t), t)) == reference_bytes(t)
