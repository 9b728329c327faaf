"""The tensors of a tensor case, rebuilt alike on every rank from the case's seed, and the
layouts a rank passes them in (contiguous, transposed, offset, strided, unit_strides: contiguous
for torch with odd strides on its size-1 dims, expanded), inside a
buffer with guard bytes so that a collective writing outside its tensor is seen."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tests.differential import tensor_cases as tc

__all__ = ["Built", "build_inputs", "filler", "present"]


@dataclass(frozen=True)
class Built:
    """A tensor as a rank passes it (``tensor``, in its layout), the buffer it lives in
    (``base``), and its value as a contiguous tensor (``value``)."""

    tensor: torch.Tensor
    base: torch.Tensor
    value: torch.Tensor


def _rng(case: tc.TensorCase, rank: int, index: int) -> np.random.Generator:
    return np.random.default_rng([case.seed, rank, index])


def _bits(rng: np.random.Generator, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    if dtype is torch.bool:
        return torch.from_numpy(rng.integers(0, 2, size=shape).astype(np.bool_))
    count = math.prod(shape) * dtype.itemsize
    if not count:
        return torch.empty(shape, dtype=dtype)
    raw = torch.from_numpy(rng.integers(0, 256, size=count, dtype=np.uint8))
    return raw.view(dtype).reshape(shape)


def _special_bits(dtype: torch.dtype) -> torch.Tensor:
    """Bit patterns a lossy path would change: NaNs (payloads, sign), inf, -0.0, subnormals,
    the extremes."""
    if dtype.is_complex:
        real = _special_bits(torch.float32 if dtype is torch.complex64 else torch.float64)
        return torch.complex(real, real.flip(0))
    if dtype is torch.bool:
        return torch.tensor([True, False])
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        values = [
            math.nan,
            -math.nan,
            math.inf,
            -math.inf,
            -0.0,
            0.0,
            info.tiny,
            info.max,
            info.min,
        ]
        plain = torch.tensor(values, dtype=torch.float64).to(dtype)
        raw = plain.view(torch.uint8).reshape(len(values), dtype.itemsize).clone()
        raw[0, 0] ^= 1  # a NaN with a payload
        return torch.cat(
            [
                plain,
                raw[:1].reshape(-1).view(dtype),
                torch.tensor([info.smallest_normal / 2]).to(dtype),
            ]
        )
    info_i = torch.iinfo(dtype)
    return torch.tensor([info_i.min, info_i.max, 0, 1], dtype=torch.float64).to(dtype)


def _with_specials(
    rng: np.random.Generator, values: torch.Tensor, specials: torch.Tensor
) -> torch.Tensor:
    """``values`` with about a quarter of its entries replaced by entries of ``specials``
    (as bytes: torch cannot index every dtype)."""
    width = values.element_size()
    rows = _raw(values).reshape(-1, width)
    pool = specials.reshape(-1).view(torch.uint8).reshape(-1, width)
    where = torch.from_numpy(rng.random(len(rows)) < 0.25)
    picks = torch.from_numpy(rng.integers(0, len(pool), size=len(rows)))
    rows[where] = pool[picks][where]
    return rows.reshape(-1).view(values.dtype).reshape(values.shape)


def _reduction_values(
    case: tc.TensorCase, rng: np.random.Generator, dtype: torch.dtype, shape: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    """float64 values whose reduction with the case's op is exact: of ``shape``, with a last
    axis of 2 (real, imaginary) for a complex dtype."""
    count = math.prod(shape)

    def part() -> np.ndarray[Any, Any]:
        if case.op == "PRODUCT":  # complex products stay exact without zeros (see the docs)
            pool = [v for v in tc.PRODUCT_FLOATS if v] if dtype.is_complex else tc.PRODUCT_FLOATS
            out = rng.choice(np.array(pool), size=count)
        else:
            out = rng.integers(-16, 17, size=count) / 2
        if case.specials and not (dtype.is_complex and case.op == "PRODUCT"):
            pool = [math.inf, -math.inf]
            if case.op not in ("MIN", "MAX") or tc.NAN_AND_SIGNED_ZERO_IN_MIN_MAX:
                pool += [math.nan, -0.0]
            out = np.where(rng.random(count) < 0.25, rng.choice(np.array(pool), size=count), out)
        return out.reshape(shape)

    return np.stack([part(), part()], axis=-1) if dtype.is_complex else part()


def _logical(case: tc.TensorCase, rank: int, index: int, shape: tuple[int, ...]) -> Any:
    """One tensor's value before averages are made exact: a tensor, or float64 values
    (``_reduction_values``) for a floating-point reduction."""
    dtype = tc.DTYPES[case.dtype]
    rng = _rng(case, rank, index)
    if case.variant == "safe_tensor" and rank != case.root:
        return _bits(rng, torch.uint8, shape)  # a placeholder: its value is never read
    if case.func in tc.REDUCTIONS and (dtype.is_floating_point or dtype.is_complex):
        value: Any = _reduction_values(case, rng, dtype, shape)
    else:
        value = _bits(rng, dtype, shape)
        if case.specials and value.numel():
            value = _with_specials(rng, value, _special_bits(dtype))
    dim = _expandable(shape)
    if case.layouts[rank] == "expanded" and dim is not None:  # alike along that dim
        first = value.take(range(1), axis=dim) if isinstance(value, np.ndarray) else None
        value = (
            np.repeat(first, shape[dim], axis=dim)
            if first is not None
            else value.narrow(dim, 0, 1).expand(shape).clone()
        )
    return value


def _exact_average(values: dict[int, Any], members: list[int]) -> None:
    """Shift the last member's halves so that the members' sum divides by their number,
    wherever every member's value is finite (elsewhere the result is NaN or inf anyway)."""
    stack = np.stack([values[m] for m in members])
    finite = np.isfinite(stack).all(axis=0)
    units = np.where(finite, stack * 2, 0).sum(axis=0)
    shift = np.where(finite, np.mod(units, len(members)) / 2, 0)
    last = values[members[-1]]
    values[members[-1]] = np.where(shift != 0, last - shift, last)


def _to_tensor(value: Any, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    as_float = torch.from_numpy(np.array(value, dtype=np.float64))
    if dtype.is_complex:
        return torch.complex(as_float[..., 0], as_float[..., 1]).to(dtype)
    return as_float.to(dtype)


def build_inputs(case: tc.TensorCase, world: int) -> list[list[torch.Tensor]]:
    """Every rank's tensors (as contiguous CPU tensors) with the values each rank passes."""
    dtype = tc.DTYPES[case.dtype]
    out: list[list[torch.Tensor]] = [[] for _ in range(world)]
    for index in range(max(len(s) for s in case.shapes)):
        values = {
            r: _logical(case, r, index, shapes[index])
            for r, shapes in enumerate(case.shapes)
            if index < len(shapes)
        }
        if case.op == "AVG":
            _exact_average(values, case.members(world))
        for r, value in values.items():
            placeholder = case.variant == "safe_tensor" and r != case.root
            out[r].append(_to_tensor(value, torch.uint8 if placeholder else dtype))
    return out


def present(value: torch.Tensor, layout: str, device: torch.device | None = None) -> Built:
    """``value`` as a tensor in ``layout`` (in a buffer with guard bytes around it), on
    ``device``; a layout the shape cannot have falls back to "offset"."""
    shape = tuple(value.shape)
    if layout == "transposed" and value.dim() < 2:
        layout = "offset"
    if layout == "strided" and (value.dim() == 0 or shape[0] < 1):  # shape[0] 1: stride 2
        layout = "offset"
    if layout == "unit_strides" and 1 not in shape:
        layout = "offset"
    dim = _expandable(shape)
    if layout == "expanded" and (dim is None or not _alike_along(value, dim)):
        layout = "offset"
    fill = torch.full((), 0x5A, dtype=torch.uint8)
    if layout == "contiguous":
        base = value.clone()
        tensor = base
    elif layout == "transposed":
        base = value.transpose(0, 1).clone(memory_format=torch.contiguous_format)
        tensor = base.transpose(0, 1)
    elif layout == "strided":
        base = _guarded((2 * shape[0], *shape[1:]), value.dtype, fill)
        tensor = base[::2]
        tensor.copy_(value)
    elif layout == "expanded":  # stride 0 along the first dim longer than 1
        assert dim is not None
        base = value.narrow(dim, 0, 1).clone()
        tensor = base.expand(shape)
    elif layout == "unit_strides":  # contiguous for torch; size-1 dims stride 2 * their due
        count = value.numel()
        base = _guarded((count + 5,), value.dtype, fill)
        due = torch.empty(shape).stride()
        odd = tuple(2 * s + 1 if n == 1 else s for n, s in zip(shape, due, strict=True))
        tensor = base.as_strided(shape, odd, 3)
        tensor.copy_(value)
    else:  # offset: a contiguous view that starts 3 elements into a longer buffer
        count = value.numel()
        base = _guarded((count + 5,), value.dtype, fill)
        tensor = base[3 : 3 + count].view(shape)
        tensor.copy_(value)
    if device is not None and device.type != "cpu":
        base = base.to(device)
        tensor = base.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())
    return Built(tensor=tensor, base=base, value=value)


def _expandable(shape: tuple[int, ...]) -> int | None:
    """The dim an expanded tensor of ``shape`` repeats (the first longer than 1), if any."""
    return next((d for d, n in enumerate(shape) if n > 1), None)


def _alike_along(value: torch.Tensor, dim: int) -> bool:
    """Whether ``value`` has the same bytes at every index of ``dim``."""
    first = value.narrow(dim, 0, 1).expand(value.shape)
    return torch.equal(_raw(first), _raw(value))


def _raw(t: torch.Tensor) -> torch.Tensor:
    """The bytes of ``t``'s elements, in order (any strides)."""
    t = t.view(torch.uint8) if t.dtype is torch.bool else t  # a copy would make bools 0 / 1
    return t.clone(memory_format=torch.contiguous_format).reshape(-1).view(torch.uint8)


def filler(case: tc.TensorCase) -> torch.Tensor:
    """What scatter's ``out`` holds before the call: bytes 0x5A (bools: False), in the shape
    of the source's tensors."""
    shape = case.shapes[case.root if case.root is not None else 0][0]
    return _guarded(shape, tc.DTYPES[case.dtype], torch.full((), 0x5A, dtype=torch.uint8))


def _guarded(shape: tuple[int, ...], dtype: torch.dtype, fill: torch.Tensor) -> torch.Tensor:
    """A buffer whose every byte is 0x5A (what a stray write would change)."""
    count = math.prod(shape)
    if not count:
        return torch.empty(shape, dtype=dtype)
    raw = fill.expand(count * dtype.itemsize).clone()
    if dtype is torch.bool:
        raw = (raw & 1).to(torch.uint8)  # bool bytes must stay 0 / 1
    return raw.view(dtype).reshape(shape)
