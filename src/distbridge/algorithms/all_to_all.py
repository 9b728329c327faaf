"""all_to_all: of a list of tensors (uneven sizes allowed, each tensor with its own shape and
number of dims, or one shape with ``same_shape``), or of one tensor split along dim 0. The
algorithm once, over primitives; the shape rows it exchanges for uneven sizes are
``algorithms/shape_rows.py``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from distbridge.algorithms import byte_view, codec, shape_rows
from distbridge.algorithms.groups import NOT_A_MEMBER

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = ["all_to_all", "chunks_known"]


def all_to_all(
    model: ModelContract, tensors: Any, group: Any, same_shape: bool = False
) -> list[torch.Tensor] | torch.Tensor:
    """Rank r sends ``tensors[j]`` to group rank j and receives one tensor from each rank;
    with ``same_shape``, every tensor on every rank has one shape and nothing is exchanged
    first. One tensor instead of a list: its dim 0 in group-size chunks, one tensor back."""
    resolved = model.groups.resolve(group)
    shape_rows.check_flag("same_shape", same_shape)
    if isinstance(tensors, torch.Tensor):
        return tensors if resolved is NOT_A_MEMBER else _all_to_all_one(model, tensors, resolved)
    if resolved is NOT_A_MEMBER:
        return list(tensors)
    size, me = model._group_size(resolved), model._group_rank(resolved)
    if not isinstance(tensors, (list, tuple)) or len(tensors) != size:
        raise ValueError(
            f"all_to_all needs a list of {size} tensors (one per rank), got {tensors!r}."
        )
    if same_shape:
        views = _all_to_all_uniform(model, tensors, resolved, size)
        if views is not None:
            return views
    rows = [shape_rows.row(t) for t in tensors]
    # the caller vouches for the shapes with same_shape: no exchange
    table = None if same_shape else shape_rows.exchange(model, rows, resolved)
    mine_bad = [i for i, r in enumerate(rows) if r[0] == shape_rows.BAD]
    if mine_bad:
        raise TypeError(shape_rows.why_bad(tensors[mine_bad[0]], f"tensors[{mine_bad[0]}]"))
    if table is None:
        if any(r != rows[0] for r in rows):
            found = sorted({(str(t.dtype), tuple(t.shape)) for t in tensors})
            raise ValueError(
                f"all_to_all(same_shape=True) needs one dtype and shape for every tensor, "
                f"got {found}; pass same_shape=False for uneven sizes."
            )
        dtype = tensors[0].dtype
        received = [tuple(tensors[0].shape)] * size
    else:
        dtype, shapes = shape_rows.decode(table)  # row j * size + k: what j sends to k
        received = shapes[me::size]  # any number of dims in each
    placed = [model.to_placement(t) for t in tensors]
    data = _joined(placed, _end_to_end(placed))
    raw = dtype in model.uncarried_dtypes  # then it goes as its bytes: the splits count bytes
    width = dtype.itemsize if raw else 1
    in_splits = [p.numel() * width for p in placed]
    out_splits = [math.prod(s) * width for s in received]
    sendable = byte_view.as_bytes(data) if raw else data
    if len({*in_splits, *out_splits}) == 1:  # even: torch needs no split tables, XLA no emulation
        out = model._do_all_to_all_even(sendable.view(size, in_splits[0]), resolved).view(-1)
    else:
        out = model._do_all_to_all(sendable, in_splits, out_splits, resolved)
    pieces = list(torch.split(out, out_splits))
    if raw:
        pieces = [byte_view.from_bytes(p, dtype, s) for p, s in zip(pieces, received, strict=True)]
    return [p.reshape(s).to(t.device) for p, s, t in zip(pieces, received, tensors, strict=True)]


def _all_to_all_one(model: ModelContract, x: torch.Tensor, group: Any) -> torch.Tensor:
    """``all_to_all`` of one tensor, as ``all_to_all_single`` with equal splits: chunk j of dim
    0 goes to group rank j; returns a new tensor of ``x``'s shape whose chunk j came from rank
    j. Every rank passes the same shape (nothing is exchanged first)."""
    size = model._group_size(group)
    shape_rows.check_equal_chunks(
        "all_to_all of one tensor", x, size, f", or pass a list of {size} tensors (any sizes)"
    )
    if shape_rows.row(x)[0] == shape_rows.BAD:
        raise TypeError(shape_rows.why_bad(x, "all_to_all's tensor"))
    work = model.to_placement(x)
    if x.dtype in model.uncarried_dtypes:  # as bytes: row j holds chunk j's bytes
        data = byte_view.as_bytes(work)
        rows = model._do_all_to_all_even(data.view(size, data.numel() // size), group)
        out = byte_view.from_bytes(rows, x.dtype, tuple(x.shape))
    else:
        if group is None and work is x:
            model.fast_all_to_all.remember(x)
        out = model._do_all_to_all_even(work, group)
    return out if out.device == x.device else out.to(x.device)


def chunks_known(model: ModelContract, tensors: list[Any]) -> list[torch.Tensor] | None:
    """``all_to_all(tensors, same_shape=True)`` over the world when ``tensors`` is exactly
    ``list(x.chunk(world))`` of an ``x`` whose kind passed every check before (see
    ``checks.FastPath``): ``x`` goes, its answer is cut the same way. None otherwise."""
    first = tensors[0] if tensors else None
    if type(first) is not torch.Tensor:
        return None
    whole = first._base
    if whole is None or not model.fast_all_to_all.knows(whole):
        return None
    size = model.get_world_size()
    if len(tensors) != size or _chunked(first, size) is not whole:
        return None
    for t in tensors:
        if type(t) is not torch.Tensor or t._base is not whole or t.shape != first.shape:
            return None
    if _end_to_end(tensors) is None:  # not the chunks of ``whole`` along dim 0, in order
        return None
    return list(model._do_all_to_all_even(whole, None).chunk(size))


def _all_to_all_uniform(
    model: ModelContract, tensors: Sequence[Any], group: Any, size: int
) -> list[torch.Tensor] | None:
    """``all_to_all(same_shape=True)`` with few checks, or None when ``tensors`` are not
    all dense tensors of one sendable dtype, one shape and one device where the backend
    sends from (the general path then raises or moves them). Chunks of one tensor go
    without a copy; the received tensors are views of one new buffer. Every tensor read
    costs here: on a 1 MiB exchange this path is the whole of the facade's overhead."""
    first = tensors[0]
    if not isinstance(first, torch.Tensor):
        return None
    dtype, shape, device = first.dtype, first.shape, first.device
    if dtype in model.uncarried_dtypes or not codec.can_send(dtype):
        return None
    if len(shape) > shape_rows.MAX_DIMS:
        return None
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.layout is not torch.strided:
            return None
        if t.dtype is not dtype or t.shape != shape or t.device != device:
            return None
    if model._placement(first) != device:
        return None
    total = _end_to_end(tensors)
    whole = None if total is None else _chunked(first, size)
    if whole is not None:  # x.chunk(size): x itself goes, and its answer is cut the same way
        if group is None:
            model.fast_all_to_all.remember(whole)  # see chunks_known
        return list(model._do_all_to_all_even(whole, group).chunk(size))
    out = model._do_all_to_all_even(_joined(tensors, total).view(size, *shape), group)
    return list(out.unbind(0))


def _chunked(first: torch.Tensor, size: int) -> torch.Tensor | None:
    """The contiguous tensor whose ``chunk(size)`` along dim 0 starts with ``first``, when
    ``first`` and the parts after it (found end to end by the caller) are exactly that."""
    base, shape = first._base, first.shape
    if base is None or not shape or not shape[0] or base.data_ptr() != first.data_ptr():
        return None
    if base.dtype != first.dtype:  # chunks of x.view(other dtype): their base is x
        return None
    if base.shape[0] != size * shape[0] or base.shape[1:] != shape[1:]:
        return None
    return base if base.is_contiguous() else None


def _end_to_end(parts: Sequence[torch.Tensor]) -> int | None:
    """How many elements contiguous ``parts`` (of one dtype) hold when each starts where the
    one before it ends in memory; None when they do not."""
    address, total = parts[0].data_ptr(), 0
    for part in parts:
        if part.data_ptr() != address or not part.is_contiguous():
            return None
        address += part.numel() * part.element_size()
        total += part.numel()
    return total


def _joined(parts: Sequence[torch.Tensor], total: int | None) -> torch.Tensor:
    """``parts`` flat and joined: a view, not a copy, when they lie end to end in memory
    (``total`` elements, from ``_end_to_end``), as the chunks of ``x.chunk(n)`` do, and within
    one storage: consecutive addresses could still span two buffers that happen to touch."""
    first = parts[0]
    if total is not None:
        end = (first.storage_offset() + total) * first.element_size()
        if end <= first.untyped_storage().nbytes():
            return first.as_strided((total,), (1,))
    return torch.cat([p.reshape(-1) for p in parts])
