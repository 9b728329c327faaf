"""reduce, gather, scatter, reduce_scatter and all_gather_tensors_with_shapes: the algorithm
once, over primitives.

Shapes may differ across ranks, the number of dims too: ranks first exchange their shape
rows (``algorithms/shape_rows.py``), then move every tensor flat, padded to the longest one's
number of elements, and cut each back to its own shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral
from typing import TYPE_CHECKING, Any

import torch

from distbridge.algorithms import byte_view, carriers, codec, shape_rows
from distbridge.algorithms.checks import check_dense, check_reducible, divide_, write_back
from distbridge.algorithms.groups import NOT_A_MEMBER
from distbridge.algorithms.values import gather_values

if TYPE_CHECKING:
    from distbridge.model_contract import ModelContract

__all__ = [
    "all_gather_with_shapes",
    "gather",
    "gather_known",
    "reduce",
    "reduce_scatter",
    "scatter",
    "scatter_known",
]


def _longest(shapes: Sequence[Sequence[int]]) -> int:
    """The most elements any of ``shapes`` holds (a 0-dim shape holds one)."""
    return max((math.prod(s) for s in shapes), default=0)


def _flat_padded(tensor: torch.Tensor, length: int) -> torch.Tensor:
    """``tensor``'s elements in order, then zeros up to ``length``: contiguous, and a view
    of ``tensor`` when it is contiguous and needs no zeros."""
    flat = tensor.reshape(-1)
    if flat.numel() == length:
        return flat.contiguous()
    return torch.nn.functional.pad(flat, (0, length - flat.numel()))


def _cut(flat: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """The first elements of 1-dim ``flat``, viewed in ``shape``."""
    return flat[: math.prod(shape)].view(tuple(shape))


def reduce(model: ModelContract, x: Any, dst: int, op: str, group: Any) -> Any:
    """Reduce onto ``dst``; other ranks get ``x`` back unchanged."""
    name = codec.canonical_op(op, model.reduce_ops, model.name)
    if isinstance(x, torch.Tensor):
        check_reducible(x, name, "reduce")
    elif codec.kind_of(x) not in codec.NUMBER_KINDS:
        raise TypeError(
            f"Unhandled input type {type(x).__name__}: reduce takes a tensor or a Python "
            f"number (int, float, bool), got {x!r}."
        )
    resolved = model.groups.resolve(group)
    model.check_root("dst", dst, resolved)
    if resolved is NOT_A_MEMBER:
        return x
    if not isinstance(x, torch.Tensor):
        total = model.all_reduce(x, name, group)  # a number: one tiny collective either way
        return total if model.get_rank() == dst else x
    work = model.to_placement(x)
    is_dst = model.get_rank() == dst
    if not is_dst and work is x:
        work = work.clone()  # backends may use non-destination buffers as scratch space
    work, back = carriers.reduction_carrier(work, name, model.uncarried_dtypes)
    sent_op = "SUM" if name == "AVG" and not model._native_avg() else name
    out = model._do_reduce(work, dst, sent_op, resolved)
    if not is_dst:
        return x
    if sent_op != name:
        divide_(out, model._group_size(resolved))
    return write_back(x, out if back is None else back(out))


def gather(
    model: ModelContract, x: Any, dst: int, group: Any, same_shape: bool = False
) -> list[Any]:
    """Every member's ``x`` on ``dst`` (shapes may differ unless ``same_shape``), ``[]`` on the
    other ranks."""
    resolved = model.groups.resolve(group)
    model.check_root("dst", dst, resolved)
    shape_rows.check_flag("same_shape", same_shape)
    if same_shape and not isinstance(x, torch.Tensor):
        raise TypeError(f"gather(same_shape=True) takes a tensor, got {type(x).__name__}.")
    if resolved is NOT_A_MEMBER:
        return []
    is_dst = model.get_rank() == dst
    if not isinstance(x, torch.Tensor):
        everything = gather_values(model, x, resolved)
        return everything if is_dst else []
    mine = shape_rows.row(x)  # with same_shape the caller vouches for the shapes: no exchange
    table = None if same_shape else shape_rows.exchange(model, [mine], resolved)
    if mine[0] == shape_rows.BAD:
        raise TypeError(shape_rows.why_bad(x, "gather's tensor"))
    # any number of dims on each rank, sent flat and cut back; one shape everywhere: as it is
    shapes = None if table is None else shape_rows.decode(table)[1]
    work = model.to_placement(x if shapes is None else _flat_padded(x, _longest(shapes)))
    parts = _do_gather(model, work, dst, resolved)
    if resolved is None and work is x and x.dtype not in model.uncarried_dtypes:
        model.fast_gather.remember(x)  # went as it was (same_shape): see gather_known
    if not is_dst or parts is None:
        return []
    if shapes is not None:
        parts = [_cut(p, s) for p, s in zip(parts, shapes, strict=True)]
    return parts if parts[0].device == x.device else [p.to(x.device) for p in parts]


def _do_gather(model: ModelContract, work: torch.Tensor, dst: int, group: Any) -> list[Any] | None:
    """The backend's gather of placed ``work``, as bytes where it lacks ``work``'s dtype."""
    if work.dtype not in model.uncarried_dtypes:
        return model._do_gather(work, dst, group)
    parts = model._do_gather(byte_view.as_bytes(work), dst, group)
    shape = tuple(work.shape)
    return None if parts is None else [byte_view.from_bytes(p, work.dtype, shape) for p in parts]


def all_gather_with_shapes(
    model: ModelContract, tensor: Any, shapes: Any, group: Any
) -> list[torch.Tensor]:
    """Every member's tensor, each in its own shape from ``shapes`` (given alike on every
    rank, so nothing is exchanged first; the number of dims may differ): all travel flat,
    padded to the longest."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}.")
    resolved = model.groups.resolve(group)
    if resolved is NOT_A_MEMBER:
        return [tensor]
    size, me = model._group_size(resolved), model._group_rank(resolved)
    if not isinstance(shapes, Sequence) or not all(isinstance(s, Sequence) for s in shapes):
        raise TypeError(
            f"shapes must be a list with one shape per group rank, e.g. [[2, 3], [4, 3]], "
            f"got {shapes!r}."
        )
    if not all(isinstance(d, Integral) and not isinstance(d, bool) for s in shapes for d in s):
        raise TypeError(f"shapes must hold int dimensions, got {shapes!r}.")
    shape_list = [tuple(int(d) for d in s) for s in shapes]
    if len(shape_list) != size:
        raise ValueError(f"shapes has {len(shape_list)} entries; the group has {size} ranks.")
    if any(d < 0 for s in shape_list for d in s):
        raise ValueError(f"shapes must hold dimensions of 0 or more, got {shape_list}.")
    # Checks of this rank's own tensor fail on this rank only: it still takes part in the
    # gather, with a flag in one slot past the data, so that every rank raises.
    problem: Exception | None = None
    if shape_list[me] != tuple(tensor.shape):
        problem = ValueError(
            f"shapes[{me}] is {shape_list[me]} but this rank's tensor has shape "
            f"{tuple(tensor.shape)}; shapes[i] must be group rank i's shape."
        )
    else:
        try:
            check_dense(tensor, "all_gather_tensors_with_shapes")
        except TypeError as err:  # what check_dense raises
            problem = err
    length = _longest(shape_list)
    try:
        if length >= 2**63 - 1:
            raise OverflowError(f"{length} elements")
        padded = torch.zeros((1, length + 1), dtype=tensor.dtype, device=tensor.device)
    except (RuntimeError, MemoryError, OverflowError) as err:  # torch: "can't allocate memory"
        raise ValueError(
            f"shapes {shape_list} need a buffer of {length} elements on every rank, which "
            f"cannot be allocated here ({type(err).__name__}); check the shapes."
        ) from err
    if problem is None:
        padded[0, : tensor.numel()] = tensor.reshape(-1)
    else:
        padded[0, length] = 1
    gathered = model.gather_tensor(padded, resolved)
    if problem is not None:
        raise problem
    flags = byte_view.as_bytes(gathered[:, length:]).view(size, -1).any(1)  # any dtype's 1
    failed = [i for i, bad in enumerate(flags.tolist()) if bad]
    if failed:
        raise ValueError(
            f"all_gather_tensors_with_shapes: group rank(s) {failed} passed a tensor that does "
            "not match its entry of shapes, or that is not dense (see the error there); no "
            "rank gets a result."
        )
    return [_cut(gathered[i], s) for i, s in enumerate(shape_list)]


def gather_known(model: ModelContract, x: torch.Tensor, dst: object) -> list[Any] | None:
    """``gather(x, dst, same_shape=True)`` over the world for an ``x`` of a kind that passed
    every check before (see ``checks.FastPath``); None for a ``dst`` that is not plainly right."""
    if type(dst) is not int or not 0 <= dst < model.get_world_size():
        return None
    parts = model._do_gather(x, dst, None)
    return parts if parts is not None and model.get_rank() == dst else []


def scatter(model: ModelContract, tensors: Any, src: int, group: Any, out: Any = None) -> Any:
    """Rank r of the group gets ``tensors[r]`` from ``src``; ``tensors`` is read on src only.
    With ``out``, every rank receives into it and no shapes are exchanged first."""
    resolved = model.groups.resolve(group)
    model.check_root("src", src, resolved)
    if out is not None and shape_rows.row(out)[0] == shape_rows.BAD:
        raise TypeError(shape_rows.why_bad(out, "scatter's out"))
    if resolved is NOT_A_MEMBER:
        return None
    size, me = model._group_size(resolved), model._group_rank(resolved)
    is_src = model.get_rank() == src
    problem: Exception | None = None
    if is_src and (not isinstance(tensors, (list, tuple)) or len(tensors) != size):
        problem = ValueError(
            f"scatter needs a list of {size} tensors on the source rank, got {tensors!r}."
        )
    if out is not None:
        return _scatter_into(model, tensors if is_src else None, out, src, resolved, size, problem)
    code = shape_rows.BAD if problem is None else shape_rows.WRONG
    rows = [[code] * shape_rows.WIDTH] * size
    if problem is None and is_src:
        rows = [shape_rows.row(t) for t in tensors]
        bad = [i for i, r in enumerate(rows) if r[0] == shape_rows.BAD]
        if bad:
            problem = TypeError(shape_rows.why_bad(tensors[bad[0]], f"tensors[{bad[0]}]"))
    table_t = torch.tensor(rows, dtype=torch.int64, device=model._collective_device())
    table = model._do_broadcast(table_t, src, resolved).cpu().numpy()
    if problem is not None:
        raise problem
    dtype, shapes = shape_rows.decode(table)  # any number of dims for each receiver
    length = _longest(shapes)
    device = tensors[me].device if is_src else model.device()
    out = torch.empty(length, dtype=dtype, device=model._collective_device())
    chunks = [_flat_padded(t, length).to(out.device) for t in tensors] if is_src else None
    return _cut(_do_scatter(model, chunks, out, src, resolved), shapes[me]).to(device)


def _do_scatter(
    model: ModelContract, chunks: list[torch.Tensor] | None, out: torch.Tensor, src: int, group: Any
) -> torch.Tensor:
    """The backend's scatter into placed ``out``, as bytes where it lacks ``out``'s dtype."""
    if out.dtype not in model.uncarried_dtypes:
        return model._do_scatter(chunks, out, src, group)
    raw = [byte_view.as_bytes(c) for c in chunks] if chunks is not None else None
    got = model._do_scatter(raw, byte_view.as_bytes(out), src, group)
    return byte_view.from_bytes(got, out.dtype, tuple(out.shape))


def _scatter_into(
    model: ModelContract,
    tensors: Any,
    out: torch.Tensor,
    src: int,
    group: Any,
    size: int,
    problem: Exception | None,
) -> torch.Tensor:
    """``scatter`` when the caller gives the receiving tensor: its dtype and shape are every
    chunk's, so nothing is exchanged first (``tensors`` is None except on ``src``). When the
    source's ``tensors`` are no list of the group's size (``problem``) or do not fit ``out``,
    it still sends zeros, since the other ranks are already waiting, and then raises."""
    if tensors is not None and problem is None:
        wrong = [i for i, t in enumerate(tensors) if shape_rows.row(t) != shape_rows.row(out)]
        if wrong:
            t = tensors[wrong[0]]
            found = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else repr(t)
            problem = ValueError(
                f"scatter(out=...) needs every tensor to have out's dtype and shape "
                f"({out.dtype} {tuple(out.shape)}); tensors[{wrong[0]}] is {found}."
            )
    if problem is not None:  # send zeros: the other ranks already wait in the scatter
        tensors = [torch.zeros_like(out)] * size
    work = model.to_placement(out)
    # The chunks go where the receiving tensor is: gloo scatters CUDA tensors only into CUDA.
    chunks = [t.to(work.device).contiguous() for t in tensors] if tensors is not None else None
    got = _do_scatter(model, chunks, work, src, group)
    if problem is not None:
        raise problem
    if group is None and work is out and out.dtype not in model.uncarried_dtypes:  # as it was
        model.fast_scatter.remember(out)  # see scatter_known
    return write_back(out, got)


def scatter_known(
    model: ModelContract, tensors: Any, src: object, out: torch.Tensor
) -> torch.Tensor | None:
    """``scatter(tensors, src, out=out)`` over the world for an ``out`` of a kind that passed
    every check before (see ``checks.FastPath``): one pass over the source's tensors, nothing else.
    None when ``src`` or the tensors are not plainly right: the general path then decides
    (and still sends, so the ranks that came here do not wait in vain)."""
    world = model.get_world_size()
    if type(src) is not int or not 0 <= src < world:
        return None
    chunks = None
    if model.get_rank() == src:
        if type(tensors) not in (list, tuple) or len(tensors) != world:
            return None
        dtype, shape, device = out.dtype, out.shape, out.device
        for t in tensors:
            if type(t) is not torch.Tensor or t.layout is not torch.strided:
                return None
            if t.dtype is not dtype or t.shape != shape or t.device != device:
                return None
        chunks = [t.contiguous() for t in tensors]
    return write_back(out, model._do_scatter(chunks, out, src, None))


def reduce_scatter(model: ModelContract, tensor: Any, op: str, group: Any) -> Any:
    """Split ``tensor`` along dim 0 into group-size chunks, reduce them, keep chunk ``rank``."""
    name = codec.canonical_op(op, model.reduce_ops, model.name)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"reduce_scatter takes a tensor, got {type(tensor).__name__}.")
    check_reducible(tensor, name, "reduce_scatter")
    resolved = model.groups.resolve(group)
    if resolved is NOT_A_MEMBER:
        return tensor
    size = model._group_size(resolved)
    shape_rows.check_equal_chunks("reduce_scatter", tensor, size, "")
    work = model.to_placement(tensor)
    work, back = carriers.reduction_carrier(work, name, model.uncarried_dtypes)
    sent_op = "SUM" if name == "AVG" and not model._native_avg() else name
    out = model._do_reduce_scatter(work, sent_op, resolved)
    if sent_op != name:
        divide_(out, size)
    return (out if back is None else back(out)).to(tensor.device)
